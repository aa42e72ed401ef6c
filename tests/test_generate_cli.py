"""nmt-generate and nmt-interactive end to end on a tiny data-bin (sentencepiece) and two small models that
learned to upper-case sentences (tests/trained_model.py, trained once a session): outputs that vary and reach a
BLEU and exact-match floor (a random-weight model prints "▁BIG ▁BIG …" everywhere and misses both), each in
its input's place, the grep ^H | cut -f3- pipeline, T- lines equal to the raw references, H- scores equal to
--score-reference, n-best lists, an ensemble of the two models against the mixture of their probabilities
worked out from each alone, decode workers, and one-line errors for bad checkpoints."""
from __future__ import annotations

import io
import math
import re
import subprocess
import sys

import pytest
import torch
from trained_model import WORDS  # noqa: F401  (test_generate_options builds its own sentences of these words)

from nmt_toolkit.cli import generate as gen_cli
from nmt_toolkit.cli import interactive as inter_cli
from nmt_toolkit.cli import preprocess as prep_cli
from nmt_toolkit.data.dictionary import Dictionary
from nmt_toolkit.models.transformer import TransformerConfig, TransformerModel
from nmt_toolkit.checkpoints import save_checkpoint

# what the first model reaches on the 23 test sentences (BLEU about 75, about 16 exact at beam 3); a model that
# learned nothing scores about 0
BLEU_FLOOR, EXACT_FLOOR = 50.0, 10


@pytest.fixture(scope="module")
def setup_dir(trained_translation):
    """(raw text folder, data-bin, checkpoint of the first trained model); other test modules import it."""
    return trained_translation.root, trained_translation.data, trained_translation.first


def _run(capsys, argv):
    rc = gen_cli.run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _fields(out: str, tag: str) -> list[list[str]]:
    """The tab-separated fields of every ``tag-`` line, in printed order."""
    return [line.split("\t") for line in out.splitlines() if line.startswith(f"{tag}-")]


def _by_id(out: str, tag: str) -> dict[int, list[str]]:
    return {int(f[0][2:]): f for f in _fields(out, tag)}


def _bleu(out: str) -> float:
    return float(re.search(r"^Generate test with beam=\d+: BLEU\S* = ([0-9.]+) ", out, re.M).group(1))


def _positional(out: str) -> dict[int, list[float]]:
    """Per sentence id, the P- scores (base 2, EOS included)."""
    return {i: [float(x) for x in f[1].split()] for i, f in _by_id(out, "P").items()}


def _assert_learned(out: str, refs: list[str], floor: float = BLEU_FLOOR, exact: int = EXACT_FLOOR) -> None:
    """The detokenized D- line of sentence i is close to reference i: outputs in their inputs' places, varied,
    and those of a model that learned the task."""
    detok = _by_id(out, "D")
    assert sorted(detok) == list(range(len(refs)))
    texts = [detok[i][2] for i in range(len(refs))]
    right = sum(t == r for t, r in zip(texts, refs))
    assert right >= exact, (right, texts)
    assert _bleu(out) >= floor, out.splitlines()[-1]
    assert len(set(texts)) >= len(refs) - 3, texts  # 23 different sources: (nearly) as many outputs
    pieces = [p for i in range(len(refs)) for p in _by_id(out, "H")[i][2].split()]
    assert max(pieces.count(p) for p in set(pieces)) < 0.3 * len(pieces)  # not one token everywhere ("." is 0.19)


@pytest.mark.slow
def test_generate_lines_order_and_pipeline(setup_dir, capsys):
    root, data, ck = setup_dir
    rc, out, err = _run(capsys, [data, "--path", ck, "--gen-subset", "test", "--beam", "3", "--max-len-b", "5",
                                 "--batch-size", "4", "--print-alignment"])
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[-1].startswith("Generate test with beam=3: BLEU|")
    for tag in "STHDPA":
        tagged = [l for l in lines if l.startswith(f"{tag}-")]
        assert len(tagged) == 23, tag
        ids = [int(l.split("\t")[0][2:]) for l in tagged]
        assert ids == list(range(23)), f"{tag}- lines not in input order"
    refs = (root / "test.de").read_text().splitlines()
    assert [l.split("\t", 1)[1] for l in lines if l.startswith("T-")] == refs
    assert [l.split("\t", 1)[1] for l in lines if l.startswith("S-")] == (root / "test.en").read_text().splitlines()
    # batches of 4 sorted by length: a hypothesis printed under another sentence's id would miss its reference
    _assert_learned(out, refs)
    h = [l for l in lines if l.startswith("H-")][0].split("\t")
    assert len(h) == 3 and float(h[1]) <= 0
    p = [l for l in lines if l.startswith("P-")][0].split("\t")[1].split()
    assert len(p) == len(h[2].split()) + 1  # one score per token, EOS included
    # the shell pipeline fairseq users have
    argv = [data, "--path", ck, "--beam", "2", "--max-len-b", "5", "--batch-size", "8"]
    cmd = f"{sys.executable} -m nmt_toolkit.cli.generate {' '.join(map(str, argv))} 2>/dev/null | grep ^H | cut -f3-"
    piped = subprocess.run(cmd, shell=True, capture_output=True, text=True, check=True).stdout.splitlines()
    rc, out, err = _run(capsys, argv)
    assert rc == 0, err
    assert piped == [f[2] for f in _fields(out, "H")] and len(piped) == 23


def _as_targets(out: str, root, data, tmp_path):
    """A data-bin whose test targets are the D- lines of ``out`` (sources: the test sources), re-encoded with
    the data-bin's sentencepiece model, for --score-reference; and the ids whose re-encoding gives back the
    H- pieces (detokenizing and encoding again may split a word otherwise)."""
    detok = _by_id(out, "D")
    hyps = _by_id(out, "H")
    (tmp_path / "hyp.en").write_text((root / "test.en").read_text())
    (tmp_path / "hyp.de").write_text("\n".join(detok[i][2] for i in sorted(detok)) + "\n")
    bin2 = tmp_path / "bin2"
    assert prep_cli.run(["--source-lang", "en", "--target-lang", "de", "--testpref", str(tmp_path / "hyp"),
                         "--srcdict", str(data / "dict.en.txt"), "--tgtdict", str(data / "dict.de.txt"),
                         "--bpe-model", str(data / "spm.model"), "--bpe", "sentencepiece", "--destdir", str(bin2),
                         "--no-progress-bar"]) == 0
    return bin2, hyps


def test_h_scores_equal_score_reference(setup_dir, capsys, tmp_path):
    root, data, ck = setup_dir
    rc, out, err = _run(capsys, [data, "--path", ck, "--beam", "4", "--max-len-b", "6", "--max-tokens", "200"])
    assert rc == 0, err
    # score the same outputs teacher-forced: a data-bin whose test targets are our hypotheses
    bin2, hyp = _as_targets(out, root, data, tmp_path)
    rc, out2, err = _run(capsys, [bin2, "--path", ck, "--score-reference"])
    assert rc == 0, err
    ref = _by_id(out2, "H")
    same = [i for i, h in hyp.items() if ref[i][2] == h[2]]  # same tokens after the round trip
    assert len(same) >= 20, (len(same), [(hyp[i][2], ref[i][2]) for i in hyp if i not in same])
    for i in same:
        assert float(ref[i][1]) == pytest.approx(float(hyp[i][1]), abs=1e-4)


def test_nbest_lists_distinct_hypotheses_best_first(setup_dir, capsys):
    """--nbest 3: three different hypotheses per sentence, in input order, scores falling; the first is the
    --nbest 1 output (the search keeps the same finished set, it only prints more of it), and each has its P-
    line. The reference is among the three at least as often as it is the best."""
    root, data, ck = setup_dir
    argv = [data, "--path", ck, "--beam", "4", "--max-len-b", "5", "--batch-size", "5"]
    rc, one, err = _run(capsys, argv)
    assert rc == 0, err
    rc, out, err = _run(capsys, argv + ["--nbest", "3"])
    assert rc == 0, err
    h, p = _fields(out, "H"), _fields(out, "P")
    assert [int(f[0][2:]) for f in h] == [i for i in range(23) for _ in range(3)]
    assert [len(f[1].split()) for f in p] == [len(f[2].split()) + 1 for f in h]
    best = _by_id(one, "H")
    refs = (root / "test.de").read_text().splitlines()
    detok = _fields(out, "D")
    in_nbest = 0
    for i in range(23):
        three = h[3 * i : 3 * i + 3]
        assert len({f[2] for f in three}) == 3, three
        scores = [float(f[1]) for f in three]
        assert scores == sorted(scores, reverse=True), three
        assert three[0][2] == best[i][2] and float(three[0][1]) == pytest.approx(float(best[i][1]), abs=1e-4)
        in_nbest += refs[i] in [f[2] for f in detok[3 * i : 3 * i + 3]]
    assert in_nbest >= sum(_by_id(one, "D")[i][2] == refs[i] for i in range(23)) >= EXACT_FLOOR


def _mixture(a: list[float], b: list[float]) -> list[float]:
    """Per token, log2 of the mean of the two models' probabilities (from their base-2 log-probabilities)."""
    return [math.log2((2.0 ** x + 2.0 ** y) / 2) for x, y in zip(a, b)]


def test_ensemble_of_two_models_is_the_mixture_of_their_probabilities(trained_translation, capsys, tmp_path):
    """--path a.pt:b.pt with two models trained from different seeds (a model with itself passes whatever the
    combination rule): each P- score of the ensemble is log2((p_a + p_b) / 2) of the two models' own P- scores,
    teacher-forced on the references and on the ensemble's own search output; the averaged log-probabilities,
    the max or the first model alone would give other numbers (the last check makes sure of it)."""
    t = trained_translation
    root, data, a, b = t.root, t.data, t.first, t.second
    both = f"{a}:{b}"
    forced = {}
    for name, path in (("a", a), ("b", b), ("ab", both)):
        rc, out, err = _run(capsys, [data, "--path", path, "--score-reference"])
        assert rc == 0, err
        forced[name] = _positional(out)
    assert sorted(forced["ab"]) == list(range(23))
    rule_matters = 0.0
    for i in range(23):
        pa, pb, pab = forced["a"][i], forced["b"][i], forced["ab"][i]
        assert pab == pytest.approx(_mixture(pa, pb), abs=3e-4), i
        for x, y, m in zip(pa, pb, pab):
            rule_matters = max(rule_matters, abs(m - (x + y) / 2), abs(m - max(x, y)), abs(m - x))
    assert rule_matters > 0.05

    rc, ens, err = _run(capsys, [data, "--path", both, "--beam", "3", "--max-len-b", "5"])
    assert rc == 0, err
    refs = (root / "test.de").read_text().splitlines()
    _assert_learned(ens, refs)
    bin2, hyps = _as_targets(ens, root, data, tmp_path)
    alone = {}
    for name, path in (("a", a), ("b", b)):
        rc, out, err = _run(capsys, [bin2, "--path", path, "--score-reference"])
        assert rc == 0, err
        alone[name] = (_by_id(out, "H"), _positional(out))
    searched = _positional(ens)
    same = [i for i in range(23) if alone["a"][0][i][2] == hyps[i][2]]
    assert len(same) >= 20
    for i in same:
        assert searched[i] == pytest.approx(_mixture(alone["a"][1][i], alone["b"][1][i]), abs=3e-4), i
    # the two models do not print the same outputs: the ensemble is not one model twice
    outputs = {}
    for name, path in (("a", a), ("b", b)):
        rc, out, err = _run(capsys, [data, "--path", path, "--beam", "3", "--max-len-b", "5"])
        outputs[name] = [f[2] for f in _fields(out, "H")]
    assert sum(x != y for x, y in zip(outputs["a"], outputs["b"])) >= 3


def test_bad_checkpoints_are_one_line_errors(setup_dir, capsys, tmp_path):
    root, data, ck = setup_dir
    bad = tmp_path / "truncated.pt"
    bad.write_bytes(ck.read_bytes()[:500])
    for path, words in ((bad, "truncated"), (tmp_path / "missing.pt", "no such")):
        rc, out, err = _run(capsys, [data, "--path", path])
        errors = [l for l in err.splitlines() if "error:" in l]
        assert rc == 1 and len(errors) == 1 and str(path) in errors[0] and words in errors[0]
        assert "Traceback" not in err
    # a checkpoint trained with another dictionary
    other = Dictionary()
    for i in range(40):
        other.add_symbol(f"x{i}")
    state = torch.load(ck, weights_only=True)
    cfg = TransformerConfig(**state["config"]["model"])
    state["model"] = TransformerModel.build_model(cfg, other, other).state_dict()
    wrong = tmp_path / "wrong.pt"
    save_checkpoint(state, str(wrong))
    rc, out, err = _run(capsys, [data, "--path", wrong])
    assert rc == 1 and "wrong dictionary" in err and "dict.en.txt" in err


def test_input_file_and_interactive(setup_dir, capsys, tmp_path, monkeypatch):
    """Raw --input and nmt-interactive print the translation nmt-generate gives the binarized sentence."""
    root, data, ck = setup_dir
    raw = tmp_path / "raw.en"
    raw.write_text("A dog runs.\n\nA man sits on the red ball ü€.\n")
    rc, out, err = _run(capsys, [data, "--path", ck, "--input", raw, "--max-len-b", "3"])
    assert rc == 0, err
    assert [l for l in out.splitlines() if l.startswith("S-")][0] == "S-0\tA dog runs."
    from_file = _by_id(out, "D")
    assert from_file[0][2] == "A DOG RUNS."  # a sentence of three known words: the model has it right
    monkeypatch.setattr(sys, "stdin", io.StringIO("A dog runs.\n\nThe cat.\n"))
    rc = inter_cli.run([str(data), "--path", str(ck), "--plain", "--buffer-size", "2", "--max-len-b", "3"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert len(out.split("\n")) == 4 and out.split("\n")[1] == ""  # 3 lines, the empty one stays empty
    assert out.split("\n")[0] == from_file[0][2]
    monkeypatch.setattr(sys, "stdin", io.StringIO("A dog runs.\n"))
    rc = inter_cli.run([str(data), "--path", str(ck), "--max-len-b", "3"])
    out, _ = capsys.readouterr()
    assert rc == 0 and [l[:2] for l in out.splitlines()] == ["S-", "H-", "D-", "P-"]
    alone = _by_id(out, "D")[0]  # decoded alone, not in a batch with the two other lines: the same words, and a
    assert alone[2] == from_file[0][2]  # score equal up to float rounding (padding changes the sums' order)
    assert float(alone[1]) == pytest.approx(float(from_file[0][1]), rel=1e-5, abs=1e-6)


def _assert_same_lines_up_to_rounding(got: str, want: str) -> None:
    got_lines, want_lines = got.splitlines(), want.splitlines()
    assert len(got_lines) == len(want_lines)
    for g, w in zip(got_lines, want_lines):
        g_fields, w_fields = g.replace("\t", " ").split(" "), w.replace("\t", " ").split(" ")
        assert len(g_fields) == len(w_fields), (g, w)
        for a, b in zip(g_fields, w_fields):
            try:
                x, y = float(a), float(b)
            except ValueError:
                assert a == b, (g, w)
                continue
            assert abs(x - y) <= 2e-4 + 1e-6 * abs(y), (g, w)


def test_decode_workers_print_the_same_lines(setup_dir, capsys):
    _, data, ck = setup_dir
    argv = [data, "--path", ck, "--gen-subset", "test", "--beam", "3", "--max-len-b", "6", "--batch-size", "3"]
    threads = torch.get_num_threads()
    rc, one, err = _run(capsys, argv + ["--decode-workers", "1"])
    assert rc == 0, err
    for workers in (["--decode-workers", "3"], []):  # 3, and the default (one per thread here)
        rc, many, err = _run(capsys, argv + workers)
        assert rc == 0, err
        # every line, in input order (8 batches, up to 3 in flight); a worker runs on its share of the threads, and
        # a one-thread matrix product may sum in another order than a two-thread one, so scores agree to float
        # rounding, not bit for bit
        _assert_same_lines_up_to_rounding(many, one)
        assert len({f[2] for f in _fields(many, "H")}) >= 20  # outputs that tell the batches apart
        assert torch.get_num_threads() == threads  # restored
    rc, _, err = _run(capsys, argv + ["--decode-workers", "0"])
    assert rc != 0 and "--decode-workers 0: must be an integer ≥ 1" in err


def test_default_decode_workers_one_per_thread_on_the_cpu_only(monkeypatch):
    from nmt_toolkit.generation.config import GenerationConfig
    from nmt_toolkit.generation.translator import Engine, decode_workers

    cpu, gpu = Engine(device=torch.device("cpu")), Engine(device=torch.device("cuda"))
    beam, sampling = GenerationConfig(), GenerationConfig(sampling=True)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert decode_workers(None, beam, cpu, num_batches=16) == 2
    assert decode_workers(None, beam, cpu, num_batches=8) == 2
    assert decode_workers(None, beam, cpu, num_batches=3) == 2  # one-thread workers as long as each has a batch
    assert decode_workers(None, beam, cpu, num_batches=1) == 1
    assert decode_workers(None, beam, gpu, num_batches=16) == 1
    assert decode_workers(None, sampling, cpu, num_batches=16) == 1
    monkeypatch.setattr(torch, "get_num_threads", lambda: 16)
    assert decode_workers(None, beam, cpu, num_batches=64) == 4  # then 4 threads each
    assert decode_workers(None, beam, cpu, num_batches=12) == 4
    assert decode_workers(None, beam, cpu, num_batches=3) == 3
    assert decode_workers(3, beam, cpu, num_batches=16) == 3


def test_decode_batches_keeps_order_and_raises_in_the_caller():
    import time

    from nmt_toolkit.generation.parallel import decode_batches

    def slow_square(x):
        time.sleep(0.02 * (5 - x))  # later batches finish first
        return x * x

    assert list(decode_batches(range(5), slow_square, workers=3)) == [(x, x * x) for x in range(5)]

    def fails_on_two(x):
        if x == 2:
            raise ValueError("batch 2 is bad")
        return x

    got = []
    with pytest.raises(ValueError, match="batch 2 is bad"):
        for item in decode_batches(range(5), fails_on_two, workers=2):
            got.append(item)
    assert got == [(0, 0), (1, 1)]


def test_half_precision_flags_need_a_gpu_and_exclude_each_other(setup_dir, capsys):
    _, data, ck = setup_dir
    argv = [data, "--path", ck, "--gen-subset", "test", "--beam", "2", "--max-len-b", "3"]
    for flag in ("--fp16", "--bf16"):
        rc, _, err = _run(capsys, argv + ["--cpu", flag])
        assert rc != 0 and f"{flag} needs a GPU" in err
    rc, _, err = _run(capsys, argv + ["--fp16", "--bf16"])
    assert rc != 0 and "exclude each other" in err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_decoding_matches_the_cpu_and_half_precision_stays_close(setup_dir, capsys):
    _, data, ck = setup_dir
    argv = [data, "--path", ck, "--gen-subset", "test", "--beam", "3", "--max-len-b", "6", "--batch-size", "5"]
    rc, cpu, err = _run(capsys, argv + ["--cpu"])
    assert rc == 0, err
    rc, gpu, err = _run(capsys, argv)
    assert rc == 0, err
    _assert_same_lines_up_to_rounding(gpu, cpu)

    def hyps(out):
        return {l.split("\t")[0]: (float(l.split("\t")[1]), l.split("\t")[2])
                for l in out.splitlines() if l.startswith("H-")}

    want = hyps(cpu)
    for flag, tol in (("--fp16", 0.02), ("--bf16", 0.1)):
        rc, out, err = _run(capsys, argv + [flag])
        assert rc == 0, err
        got = hyps(out)
        assert got.keys() == want.keys()
        same = [k for k in want if got[k][1] == want[k][1]]
        # a random model has near-ties that half precision may break the other way; most must agree
        assert len(same) >= 0.8 * len(want), flag
        for k in same:  # base-2 sentence scores, length-normalised: close to the float32 ones
            assert abs(got[k][0] - want[k][0]) <= tol, (flag, k, got[k], want[k])


def test_a_cpu_decode_without_batch_size_gives_every_thread_its_own_batches(trained_translation, monkeypatch):
    """200 sentences of at most 10 tokens fit one --max-tokens 4096 batch; on the CPU without --batch-size they
    are cut into batches of at most --cpu-batch-size (64: ceil(200 / 64) = 4 batches), which two threads decode
    two at a time, one thread each. --batch-size, and --cpu-batch-size 0, keep the given budgets."""
    import random

    from nmt_toolkit import Translator
    from nmt_toolkit.generation.translator import decode_workers
    from tests.trained_model import sentences

    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    lines = sentences(random.Random(5), 200)
    sizes = {}
    for name, options in (("default", {}), ("cpu_batch_size 0", {"cpu_batch_size": 0})):
        t = Translator.load(str(trained_translation.first), str(trained_translation.data), device="cpu", **options)
        dataset = t.task.build_dataset_for_inference(t.encode(lines, "test input", 1, unit="sentence"))
        batches = list(t.batches(dataset))
        sizes[name] = sorted(len(b["id"]) for b in batches)
        sizes[name + " workers"] = decode_workers(None, t.gen, t.engine, len(batches))
    assert sizes["default"] == [8, 64, 64, 64] and sizes["default workers"] == 2
    assert sizes["cpu_batch_size 0"] == [200] and sizes["cpu_batch_size 0 workers"] == 1


def test_interactive_answers_line_by_line_on_one_thread_unless_told(setup_dir, capsys, monkeypatch):
    """Lines answered one at a time decode on one thread by default (a lone sentence split over threads
    stalls whenever another process takes a core: docs/benchmarks.md); --threads and larger buffers keep
    the machine's threads. torch's count is the process's, so it is restored afterwards."""
    import torch

    root, data, ck = setup_dir
    before = torch.get_num_threads()
    try:
        seen = {}
        for name, extra in (("default", []), ("--threads 2", ["--threads", "2"]), ("buffer 8", ["--buffer-size", "8"])):
            torch.set_num_threads(2)
            monkeypatch.setattr(sys, "stdin", io.StringIO("A dog runs.\n"))
            assert inter_cli.run([str(data), "--path", str(ck), "--plain", "--max-len-b", "3", *extra]) == 0
            seen[name] = (torch.get_num_threads(), capsys.readouterr().out)
        assert {name: threads for name, (threads, _) in seen.items()} == {"default": 1, "--threads 2": 2, "buffer 8": 2}
        assert len({out for _, out in seen.values()}) == 1  # the same translation on any thread count
    finally:
        torch.set_num_threads(before)
