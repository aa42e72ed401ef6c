"""Checkpoint → model (nmt_toolkit/loading.py): the loaded weights are the file's, bit for bit, and loading
leaves the caller's process as it found it (its random stream, its imports)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.errors import DataError
from nmt_toolkit.loading import load_models
from nmt_toolkit.checkpoints import save_checkpoint


def _dicts(data):
    return Dictionary.load(str(data / "dict.en.txt")), Dictionary.load(str(data / "dict.de.txt"))


def _load(path, data):
    src, tgt = _dicts(data)
    models, _ = load_models([str(path)], src, tgt, langs=("en", "de"))
    return models[0]


def test_the_loaded_model_holds_the_files_weights_and_draws_no_random_numbers(trained_translation):
    """The reference is the file read by torch.load itself; the caller's random stream (a --sampling seed set
    before loading) is the same afterwards as before."""
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    model = _load(trained_translation.first, trained_translation.data)
    assert torch.equal(torch.get_rng_state(), before)
    weights = torch.load(trained_translation.first, weights_only=True)["model"]
    loaded = model.state_dict()
    assert loaded.keys() == weights.keys()
    for key, tensor in weights.items():
        assert loaded[key].dtype == torch.float32 and torch.equal(loaded[key], tensor), key


def test_a_finite_weight_whose_sum_overflows_loads(trained_translation, tmp_path):
    """Values near float32's largest (3e38) are finite though their sum is inf: not a "non-finite" error."""
    state = torch.load(trained_translation.first, weights_only=True)
    key = next(k for k, t in state["model"].items() if k.startswith("decoder.layers.0") and t.dim() == 2)
    state["model"][key] = state["model"][key].clone()
    state["model"][key][0, :2] = 3e38
    assert torch.isinf(state["model"][key].sum())
    path = tmp_path / "large.pt"
    save_checkpoint(state, str(path))
    model = _load(path, trained_translation.data)
    assert torch.equal(model.state_dict()[key], state["model"][key])
    state["model"][key][0, 2] = float("nan")  # and one NaN beside them is still found
    save_checkpoint(state, str(path))
    with pytest.raises(DataError, match=r"holds 1 non-finite values"):
        _load(path, trained_translation.data)


@pytest.mark.slow
def test_loading_does_not_import_torchs_python_reference_kernels(trained_translation):
    """Building a model on the meta device runs torch's Python reference kernels, which import sympy and
    hundreds of modules: about 2 s and 70 MiB at every start of nmt-generate. Loading needs none of them."""
    script = f"""
import sys
import torch
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.loading import load_models
from nmt_toolkit.registry import import_builtin_components
import_builtin_components()
data = {str(trained_translation.data)!r}
src, tgt = Dictionary.load(data + "/dict.en.txt"), Dictionary.load(data + "/dict.de.txt")
assert "sympy" not in sys.modules
load_models([{str(trained_translation.first)!r}], src, tgt, langs=("en", "de"))
print("SYMPY", "sympy" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SYMPY False" in proc.stdout
