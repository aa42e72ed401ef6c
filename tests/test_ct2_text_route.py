"""nmt-generate on raw text through a CTranslate2 export runs without torch (generation/ct2_text.py), and
prints what CTranslate2 alone translates (the reference: ctranslate2.Translator and sentencepiece, called
here directly) and what the Translator's route prints for the same export with its data-bin."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

ct2 = pytest.importorskip("ctranslate2", reason="the [ct2] extra is not installed")

from nmt_toolkit.cli.generate import run as generate  # noqa: E402

SEARCH = ["--beam", "4", "--lenpen", "0.6", "--max-len-a", "0", "--max-len-b", "40"]


@pytest.fixture(scope="module")
def export_folder(trained_translation, trained_ct2_export, tmp_path_factory):
    lines = tmp_path_factory.mktemp("ct2-lines") / "in.en"
    lines.write_text("".join((trained_translation.root / "test.en").read_text().splitlines(True)[:40]))
    return trained_translation.data, trained_ct2_export, lines


def _out(capsys, argv) -> str:
    assert generate(argv) == 0, capsys.readouterr().err[-2000:]
    return capsys.readouterr().out


def test_the_text_route_loads_no_torch(export_folder, tmp_path):
    """The whole program, in a process of its own: a translation per line, and torch never imported."""
    _, folder, lines = export_folder
    probe = ("import sys, json\nfrom nmt_toolkit.cli.generate import run\n"
             f"code = run({json.dumps(['--path', str(folder), '--input', str(lines), '--engine', 'ctranslate2', '--plain'])})\n"
             "print(json.dumps({'code': code, 'torch': 'torch' in sys.modules}), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert json.loads(done.stderr.strip().splitlines()[-1]) == {"code": 0, "torch": False}, done.stderr[-2000:]
    assert len(done.stdout.splitlines()) == len(lines.read_text().splitlines()) > 20


def test_plain_prints_what_ctranslate2_alone_translates(export_folder, capsys):
    """--plain's lines are CTranslate2's own translations of the same sentences under the same search, in
    input order, through either route (alone, and with the data-bin: the Translator's)."""
    import sentencepiece

    data, folder, lines = export_folder
    sentences = lines.read_text().splitlines()
    spm = sentencepiece.SentencePieceProcessor(model_file=str(folder / "spm.model"))
    translator = ct2.Translator(str(folder), device="cpu", intra_threads=1)
    results = translator.translate_batch(spm.encode(sentences, out_type=str), beam_size=4, length_penalty=0.6,
                                         max_decoding_length=40)
    expected = [spm.decode(r.hypotheses[0]) for r in results]
    assert all(len(r.hypotheses[0]) < 39 for r in results)  # no output reaches the limit (ranked otherwise)
    common = ["--path", str(folder), "--input", str(lines), "--engine", "ctranslate2", *SEARCH, "--plain"]
    assert _out(capsys, common).splitlines() == expected
    assert _out(capsys, [str(data), *common]).splitlines() == expected


def test_the_text_route_prints_the_translator_routes_lines(export_folder, capsys):
    """S-/H-/D-/P- lines, scores included, equal to the Translator's route on the same export (float32: the
    same sentences batched otherwise score alike to the printed digits)."""
    data, folder, lines = export_folder
    common = ["--path", str(folder), "--input", str(lines), "--engine", "ctranslate2", *SEARCH, "--threads", "2"]
    alone, given = _out(capsys, common), _out(capsys, [str(data), *common])
    assert alone.count("\nP-") == len(lines.read_text().splitlines()) > 20
    assert alone == given
    plain = _out(capsys, [*common, "--plain"]).splitlines()
    d_lines = sorted((line.split("\t") for line in alone.splitlines() if line.startswith("D-")),
                     key=lambda d: int(d[0][2:]))
    assert plain == [text for _, _, text in d_lines]


def test_a_line_too_long_is_the_same_error_on_both_routes(export_folder, capsys, tmp_path):
    data, folder, _ = export_folder
    lines = tmp_path / "long.en"
    lines.write_text("A dog runs.\n" + " ".join(["dog"] * 60) + "\n")
    common = ["--path", str(folder), "--input", str(lines), "--engine", "ctranslate2", "--max-source-positions", "20"]
    errors = []
    for argv in (common, [str(data), *common]):
        assert generate(argv) != 0
        errors.append(capsys.readouterr().err.strip().splitlines()[-1])
    assert errors[0] == errors[1]
    assert f"--input {lines} line 2:" in errors[0] and "--max-source-positions" in errors[0]


def test_options_of_the_translator_route_hold_on_the_text_route(export_folder, capsys):
    """--print-alignment takes the Translator's route, with or without the data-bin: the same lines; an
    --attention-plot (the torch model's layers) is refused; --decode-workers sets the replicas."""
    data, folder, lines = export_folder
    common = ["--path", str(folder), "--input", str(lines), "--engine", "ctranslate2"]
    printed = []
    for argv in (common, [str(data), *common]):
        assert generate([*argv, "--print-alignment"]) == 0
        printed.append([line for line in capsys.readouterr().out.splitlines() if line.startswith("A-")])
    assert printed[0] == printed[1] and len(printed[0]) == len(lines.read_text().splitlines())
    assert generate([*common, "--attention-plot", str(folder.parent / "plots")]) == 2
    assert "--attention-plot plots the torch model's layers" in capsys.readouterr().err
    assert generate([*common, "--threads", "2", "--decode-workers", "1", "--plain"]) == 0
    assert "1 replica(s), 2 thread(s) each" in capsys.readouterr().err


def test_a_data_bin_decodes_on_one_replica_per_thread(export_folder, capsys):
    """On a data-bin (the Translator's route) CTranslate2 decodes several batches at once, one replica of one
    thread each, and prints what one batch at a time on all threads prints."""
    data, folder, _ = export_folder
    common = [str(data), "--path", str(folder), "--engine", "ctranslate2", "--gen-subset", "test", "--threads", "2",
              "--batch-size", "4"]
    assert generate(common) == 0
    together = capsys.readouterr()
    assert generate([*common, "--decode-workers", "1"]) == 0
    alone = capsys.readouterr()
    assert "decoding 2 batches at once" in together.err and "batches at once" not in alone.err
    assert together.out == alone.out and together.out.count("\nH-") >= 8
