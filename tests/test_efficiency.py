"""MFU means what it says: achieved model FLOP/s over the device's dense peak for the training dtype."""
import json

import pytest
import torch

from nmt_toolkit.training import efficiency


def test_known_gpus_give_their_dense_peaks():
    assert efficiency.table_peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.0  # SXM: NVIDIA's dense figure
    assert efficiency.table_peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0  # the more specific name wins
    assert efficiency.table_peak_tflops("NVIDIA A100-SXM4-40GB", "tf32") == 156.0
    assert efficiency.table_peak_tflops("NVIDIA H200", "fp32") == 66.9
    assert efficiency.table_peak_tflops("Some Future GPU", "bf16") is None


def test_mfu_is_achieved_over_peak_and_never_above_one():
    # 280 TFLOP/s of model FLOPs on one H100 in bf16: 280 / 989 = 0.283 (worked by hand)
    assert efficiency.mfu(280_000.0, 989.0) == pytest.approx(0.28311, abs=1e-5)
    assert efficiency.mfu(280_000.0, 989.0, world_size=2) == pytest.approx(0.14156, abs=1e-5)
    assert efficiency.mfu(5_000_000.0, 989.0) == 1.0  # a peak given too low cannot make it exceed 1
    assert efficiency.mfu(100.0, None) is None


def test_no_peak_on_the_cpu_unless_given():
    cpu = torch.device("cpu")
    assert efficiency.peak_tflops(cpu, None) is None
    assert efficiency.peak_tflops(cpu, "bf16", override=2.0) == 2.0


def test_compute_dtype_follows_precision_and_tf32(monkeypatch):
    assert efficiency.compute_dtype("bf16") == "bf16" and efficiency.compute_dtype("fp16") == "fp16"
    monkeypatch.setattr(efficiency, "tf32_matmuls", lambda: False)
    assert efficiency.compute_dtype(None) == "fp32"
    monkeypatch.setattr(efficiency, "tf32_matmuls", lambda: True)
    assert efficiency.compute_dtype(None) == "tf32"
    assert efficiency.tf32_matmuls() in (True, False)


def test_cpu_training_logs_gflops_but_no_mfu(tmp_path, capsys):
    """Before this change the CPU log divided by a timed 1024^3 product and printed mfu 1.3-1.4."""
    from nmt_toolkit.cli.train import run as train
    from tests.train_helpers import TINY, make_bin

    data = make_bin(tmp_path)
    assert train([data, *TINY, "--max-update", "2", "--save-dir", str(tmp_path / "ck"), "--no-save"]) == 0
    rows = [json.loads(l) for l in capsys.readouterr().err.splitlines() if l.startswith("{")]
    train_rows = [r for r in rows if r.get("tag") in ("train_inner", "train")]
    assert train_rows and all(any(k.endswith("gflops") for k in r) for r in train_rows)
    assert not any(k.endswith("mfu") for r in rows for k in r)
    capsys.readouterr()
    assert train([data, *TINY, "--max-update", "2", "--save-dir", str(tmp_path / "ck2"), "--no-save",
                  "--peak-tflops", "1000"]) == 0
    rows = [json.loads(l) for l in capsys.readouterr().err.splitlines() if l.startswith("{")]
    values = [v for r in rows for k, v in r.items() if k.endswith("mfu")]
    assert values and all(0 < v < 1e-2 for v in values)  # a 2-core CPU is far below 1 PFLOP/s
