"""The examples users run: quickstart, the WMT14 recipe in --local mode, PTB parsing on the sample.

Fast tests check the helpers the scripts are built on (task generator, corpus cleaning, treebank
preparation and tree rebuilding). The slow tests run the scripts end to end on real data, as CI does:
``examples/wmt14/ci.sh``, ``examples/ptb_parsing/ci.sh`` and a shortened quickstart, and each must reach a
score that a broken model misses (the numbers next to each threshold were measured on one CPU thread; the
causal mask switched off or the labels not shifted, in a scratch copy, gave the "broken" ones). The full
quickstart (the README's main job, BLEU >= 90) runs when ``NMT_TOOLKIT_FULL_EXAMPLES=1``.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def _run(cmd, cwd, env_extra=None, timeout=900) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(env_extra or {})
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{cmd} failed with status {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                             f"\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def _import_example(path: pathlib.Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------ fast: helpers


def test_quickstart_task_is_deterministic_and_splits_are_disjoint(tmp_path):
    make_task = _import_example(EXAMPLES / "quickstart" / "make_task.py")
    sizes = {"train": 800, "valid": 50, "test": 50}
    make_task.make_task(str(tmp_path / "a"), sizes, seed=3)
    make_task.make_task(str(tmp_path / "b"), sizes, seed=3)
    for split, n in sizes.items():
        for side in ("src", "tgt"):
            a = (tmp_path / "a" / f"{split}.{side}").read_text()
            assert a == (tmp_path / "b" / f"{split}.{side}").read_text()
            assert len(a.splitlines()) == n
    train = set((tmp_path / "a" / "train.src").read_text().splitlines())
    test = set((tmp_path / "a" / "test.src").read_text().splitlines())
    assert not train & test


def test_quickstart_task_reorders_and_agrees():
    make_task = _import_example(EXAMPLES / "quickstart" / "make_task.py")
    import random

    rng = random.Random(0)
    for _ in range(200):
        src, tgt = make_task.sentence(rng)
        words = tgt.split()
        assert words[-1] == "." and src.split()[-1] == "."
        ke = words.index("ke")
        # the verb (with its negation) comes after the object marker: SOV
        assert len(words) - ke - 1 in (2, 3)
        # a plural subject ("these", "some", "all", or a plural noun) never gets a singular present verb
        if " sees " in f" {src} ":
            assert words[-2].endswith("at")


def test_clean_corpus_follows_moses_rules(tmp_path):
    clean = _import_example(EXAMPLES / "wmt14" / "clean_corpus.py")
    assert clean.keep(10, 15, 1, 250, 1.5)
    assert not clean.keep(10, 16, 1, 250, 1.5)  # ratio 1.6
    assert not clean.keep(0, 1, 1, 250, 1.5)  # empty side
    assert not clean.keep(251, 251, 1, 250, 1.5)  # too long
    (tmp_path / "c.en").write_text("a b\n&apos;s  x  y\nlong " + "w " * 300 + "\none\n")
    (tmp_path / "c.de").write_text("a b c\n&quot;s x y\nlong\n1 2 3 4\n")
    assert clean.main([str(tmp_path / "c"), "en", "de", str(tmp_path / "out"), "1", "250", "--ratio", "1.5",
                       "--unescape"]) == 0
    assert (tmp_path / "out.en").read_text().splitlines() == ["a b", "'s x y"]
    assert (tmp_path / "out.de").read_text().splitlines() == ["a b c", '"s x y']


@pytest.mark.slow
def test_ptb_prepare_sample_split_and_round_trip(tmp_path, data_dir):
    treebank = _import_example(EXAMPLES / "ptb_parsing" / "treebank.py")
    from nmt_toolkit.data.trees import parse_tree
    from nmt_toolkit.scoring import parseval

    out_mrg, out_line = tmp_path / "mrg", tmp_path / "oneline"
    treebank.main(["prepare", str(data_dir / "ptb-sample" / "mrg"), str(out_mrg)])
    treebank.main(["prepare", str(data_dir / "ptb-sample" / "oneline"), str(out_line)])
    for split, n in (("train", 3396), ("valid", 273), ("test", 245)):
        for ext in ("words", "tree", "gold"):
            text = (out_mrg / f"{split}.{ext}").read_text()
            assert len(text.splitlines()) == n
            assert text == (out_line / f"{split}.{ext}").read_text()  # .mrg and one-line files agree
    assert "-NONE-" not in (out_mrg / "train.gold").read_text()
    assert not re.search(r"\((NP|S|VP)-[A-Z]", (out_mrg / "train.gold").read_text())  # function tags gone
    # gold linearisation -> H- lines -> delinearise -> PARSEVAL 100
    targets = (out_mrg / "test.tree").read_text().splitlines()
    gen = tmp_path / "gen.txt"
    gen.write_text("".join(f"H-{i}\t-0.1\t{t}\n" for i, t in reversed(list(enumerate(targets)))))
    trees = tmp_path / "test.trees"
    treebank.main(["delinearise", str(gen), "--words", str(out_mrg / "test.words"),
                   "--gold", str(out_mrg / "test.gold"), "--output", str(trees)])
    assert trees.read_text() == (out_mrg / "test.gold").read_text()  # words and gold tags back in place
    result = parseval.evaluate(parseval.read_trees(out_mrg / "test.gold"), parseval.read_trees(trees))
    assert result.overall.f1 == pytest.approx(100.0)
    # a broken hypothesis still gives a tree for every sentence
    gen.write_text("H-0\t-1.0\t(S XX (NP XX\nH-1\t-1.0\t)NP )S\n")
    treebank.main(["delinearise", str(gen), "--words", str(out_mrg / "test.words"), "--output", str(trees)])
    lines = trees.read_text().splitlines()
    assert len(lines) == 245 and all(parse_tree(line) is not None for line in lines)


# ------------------------------------------------------------------------------- slow: the scripts


def _bash(script: pathlib.Path, *args, env=None, cwd=None, timeout=900):
    return _run(["bash", str(script), *map(str, args)], cwd=cwd or REPO, env_extra=env, timeout=timeout)


# One thread, as the scores below were measured (the threads change the float sums, and so a short run's
# trajectory); two threads on a 2-core machine that something else also loads ran up to 10x slower.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class _Started:
    """A script started now and awaited later; its output goes to files (a pipe nobody reads would fill up
    and stall it)."""

    def __init__(self, script: pathlib.Path, work: pathlib.Path, env_extra: dict, logs: pathlib.Path):
        logs.mkdir(parents=True)
        self.cmd, self.work = ["bash", str(script), str(work)], work
        self.out, self.err = open(logs / "stdout", "w+"), open(logs / "stderr", "w+")
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, env={**os.environ, **env_extra}, stdout=self.out,
                                     stderr=self.err, text=True)

    def result(self, timeout: float = 900) -> tuple[subprocess.CompletedProcess, pathlib.Path]:
        self.proc.wait(timeout=timeout)
        self.out.seek(0)
        self.err.seek(0)
        proc = subprocess.CompletedProcess(self.cmd, self.proc.returncode, self.out.read(), self.err.read())
        if proc.returncode != 0:
            raise AssertionError(f"{self.cmd} failed with status {proc.returncode}\n--- stdout\n"
                                 f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}")
        return proc, self.work

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        self.err.close()


@pytest.fixture(scope="module")
def recipes(tmp_path_factory, data_dir):
    """The WMT14 and PTB CI recipes, started together: each is a chain of one-thread processes, so on two
    cores the pair takes about as long as the longer one, not the sum."""
    root = tmp_path_factory.mktemp("recipes")
    env = {"NMT_TOOLKIT_TEST_DATA": str(data_dir), **ONE_THREAD}
    started = {"wmt14": _Started(EXAMPLES / "wmt14" / "ci.sh", root / "wmt14", env, root / "wmt14-logs"),
               "ptb": _Started(EXAMPLES / "ptb_parsing" / "ci.sh", root / "ptb", env, root / "ptb-logs")}
    yield started
    for script in started.values():
        script.stop()


def _last_valid_ppl(log: pathlib.Path) -> float:
    ppl = re.findall(r"^valid \| .*?\| ppl ([\d.]+) ", log.read_text(), re.M)
    assert ppl, log.read_text()[-3000:]
    return float(ppl[-1])


@pytest.mark.slow
def test_wmt14_ci_recipe(recipes, data_dir):
    proc, work = recipes["wmt14"].result()
    out = proc.stdout
    assert re.search(r"BLEU", out), out
    assert "tokenized BLEU" in out
    # 250 updates of a 1M-parameter model on 10k news pairs learn the target language, not yet translation
    # (BLEU on newstest2014 is ~0 for far longer than CI can wait): what moves is the validation perplexity,
    # ~4300 untrained -> 270 here (seeds 2 and 3: 292, 268). Near 1 on unseen news text means the decoder
    # sees the token it predicts: labels not shifted gave 1.06.
    ppl = _last_valid_ppl(work / "train.log")
    assert 30.0 < ppl < 400.0, ppl
    assert (work / "data-bin" / "dict.en.txt").read_text() == (work / "data-bin" / "dict.de.txt").read_text()
    assert (work / "checkpoints" / "averaged.pt").is_file()
    hyps = (work / "newstest2014" / "hyp.detok.de").read_text().splitlines()
    refs = (work / "data-bin" / "raw" / "test.de").read_text().splitlines()
    assert len(hyps) == len(refs) == 200
    assert refs[0] == (data_dir / "newstest2014" / "newstest2014.de").read_text().splitlines()[0]


@pytest.mark.slow
def test_ptb_parsing_ci_recipe(recipes):
    proc, work = recipes["ptb"].result()
    match = re.search(r"Bracketing FMeasure\s*=\s*([\d.]+)", proc.stdout)
    assert match, proc.stdout
    f1 = float(match.group(1))
    # measured 12.56 after 200 updates (seeds 2 and 3: 12.55, 11.94; two threads 12.50); broken models'
    # outputs repaired into trees: causal mask off 0.04, labels not shifted 0.02
    assert f1 >= 6.0, proc.stdout
    assert re.search(r"Number of Valid sentence\s*=\s*245", proc.stdout), proc.stdout
    trees = (work / "decode" / "test.trees").read_text().splitlines()
    assert len(trees) == 245


def _bleu(text: str) -> float:
    match = re.search(r"BLEU[^=\n]*=\s*([\d.]+)", text)
    assert match, text
    return float(match.group(1))


# The quickstart's recipe, shortened: 5,000 pairs, 300 updates of 512 tokens with a 50-update warmup
# (the full task's "BLEU >= 90 or an error" check lowered to this run's threshold)
QUICK = {"QS_TRAIN_PAIRS": "5000", "QS_VALID_PAIRS": "100", "QS_TEST_PAIRS": "100", "QS_MIN_BLEU": "30",
         "QS_EXTRA": "--max-update 300 --warmup-updates 50 --lr 3e-3 --max-tokens 512 --save-interval-updates 20 "
                     "--no-validate-at-start"}
# a small built-in task, so that data and preprocessing take seconds
SMALL = {"QS_TRAIN_PAIRS": "2000", "QS_VALID_PAIRS": "50", "QS_TEST_PAIRS": "50"}


@pytest.mark.slow
def test_quickstart_short_run(tmp_path):
    """The quickstart pipeline on a shortened built-in task (the full run is the README's main job): it learns
    the reordering and agreement, and shows its progress while it trains."""
    proc = _bash(EXAMPLES / "quickstart" / "run.sh", "--workdir", tmp_path / "qs", "--max-minutes", "5",
                 "--threads", "1", env=QUICK)
    # measured 57.3 (seeds 2 and 3: 50.9, 60.3; two threads 48.8); causal mask off 0.0, labels not shifted 0.0
    assert _bleu(proc.stdout) >= 30.0, proc.stdout
    assert "SRC" in proc.stdout and "SYS" in proc.stdout
    assert len((tmp_path / "qs" / "output" / "hyp.txt").read_text().splitlines()) == 100
    assert (tmp_path / "qs" / "checkpoints" / "averaged.pt").is_file()
    # progress lines between "== train ..." and the end of training (stderr is a pipe here: plain lines)
    err = proc.stderr.splitlines()
    start = err.index("== train ...")
    end = next(i for i, line in enumerate(err) if line.startswith("== train ") and "done in" in line)
    shown = [re.fullmatch(r"\s+(\d+)% \| update (\d+)/300 \| epoch \d+/100 \| [\d:]+ of 5:00 \| "
                          r"(loss [\d.]+ \| )?[\d:]+ left( \| ~\d+ of 300 updates by the time limit)?", line)
             for line in err[start + 1:end]]
    shown = [m for m in shown if m]
    updates = [int(m.group(2)) for m in shown]
    assert updates and updates[0] == 1 and updates == sorted(updates) and len(updates) <= 21, err[start:end + 1]
    assert any(m.group(3) for m in shown)  # the loss, once the first log interval has read it
    # the whole log is still kept, progress lines included
    log = (tmp_path / "qs" / "output" / "train.log").read_text()
    assert "model: " in log and "train_inner |" in log and "progress |" in log and "done training" in log


def _quickstart_fails(tmp_path, *args, env=None) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", str(EXAMPLES / "quickstart" / "run.sh"), "--workdir", str(tmp_path / "qs"),
                           "--threads", "1", *args], cwd=REPO, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    # no score printed as if it were a result
    assert "BLEU" not in proc.stdout and "SYS" not in proc.stdout, proc.stdout
    return proc


@pytest.mark.slow
def test_quickstart_on_a_machine_too_slow_says_so_instead_of_a_score(tmp_path):
    """A time limit too short for the updates the task needs: no garbage score, but how far it got and what
    to do, and a non-zero exit."""
    proc = _quickstart_fails(tmp_path, "--max-minutes", "0.1", env=SMALL)
    assert proc.returncode == 3, proc.stderr
    match = re.search(r"reached (\d+) of the (\d+) updates", proc.stderr)
    assert match, proc.stderr
    assert int(match.group(1)) < int(match.group(2)) and int(match.group(2)) == 1000, proc.stderr
    assert re.search(r"[\d.]+ s per update", proc.stderr), proc.stderr
    assert "close other programs" in proc.stderr and "--max-minutes" in proc.stderr, proc.stderr
    assert not (tmp_path / "qs" / "output" / "score.txt").exists()


@pytest.mark.slow
def test_quickstart_with_a_score_far_below_the_task_s_says_so(tmp_path):
    """A model that has not learned the task (10 updates) is generated and scored, but the score is reported
    as a failure on stderr with a non-zero exit, not printed as the result."""
    proc = _quickstart_fails(tmp_path, "--max-minutes", "5",
                             env={**SMALL, "QS_EXTRA": "--max-update 10 --max-tokens 512 --no-validate-at-start",
                                  "QS_GEN_EXTRA": "--max-len-b 5"})
    assert proc.returncode == 4, proc.stderr
    assert re.search(r"BLEU [\d.]+ .*far below", proc.stderr), proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("NMT_TOOLKIT_FULL_EXAMPLES") != "1",
                    reason="the full quickstart takes ~4 minutes; set NMT_TOOLKIT_FULL_EXAMPLES=1")
def test_quickstart_full_run_reaches_high_bleu(tmp_path):
    # run.sh gives the training at most 20 minutes (--max-minutes); a machine too slow for that fails here
    proc = _bash(EXAMPLES / "quickstart" / "run.sh", "--workdir", tmp_path / "qs", timeout=1800)
    assert _bleu(proc.stdout) >= 90.0
    assert "1000 updates in" in proc.stdout  # the whole budget trained, whatever the machine's speed


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("NMT_TOOLKIT_FULL_EXAMPLES") != "1",
                    reason="set NMT_TOOLKIT_FULL_EXAMPLES=1 to run the quickstart on Multi30k")
def test_quickstart_on_multi30k(tmp_path, data_dir):
    # 400 updates (not a time box, so the score does not depend on the machine's speed): ~3 minutes
    proc = _bash(EXAMPLES / "quickstart" / "run.sh", "--data", data_dir / "multi30k", "--src", "en", "--tgt", "de",
                 "--valid-name", "val", "--test-name", "test_2016_flickr", "--max-train-lines", "5000",
                 "--max-minutes", "10", "--threads", "1", "--workdir", tmp_path / "m30k", timeout=900,
                 env={"QS_EXTRA": "--max-update 400 --warmup-updates 100"})
    # measured 14.5 (chrF 39.0); causal mask off 0.0
    assert _bleu(proc.stdout) >= 7.0, proc.stdout


# ------------------------------------------------------------------------------------ multilingual

ML_PAIRS = ["en-de", "de-en", "en-fr", "fr-en", "en-cs", "cs-en"]
ML_ROW = re.compile(r"^\| (\w\w-\w\w)( \(zero-shot\))? \| ([\d.]+) \| (\S+) \| (\S+) \| (\S+) \|$", re.M)


def _sacrebleu_cli(ref: pathlib.Path, hyp: pathlib.Path) -> float:
    out = subprocess.run([sys.executable, "-m", "sacrebleu", str(ref), "-i", str(hyp), "-b"], capture_output=True,
                         text=True, check=True).stdout
    return round(float(out.strip()), 1)


def test_multilingual_table_scores_each_direction_as_sacrebleu_does(tmp_path):
    """table.py against the sacreBLEU command line on hypotheses written here: a perfect, a partly wrong and a
    bilingual system per direction, the difference and the bar as worked from those numbers."""
    refs = ["a dog runs on the green grass .", "two men are playing chess in a park .",
            "a woman in a red coat walks down the street .", "children play football on a sunny beach ."]
    worse = ["a dog runs on grass .", "two men play chess .", "a woman in a red coat walks down the street .",
             "kids play football on the beach ."]
    (tmp_path / "test.de").write_text("\n".join(refs) + "\n")
    (tmp_path / "test.en").write_text("\n".join(refs) + "\n")
    for pair, multi, bi in [("en-de", refs, worse), ("de-en", worse, refs)]:
        (tmp_path / "multi").mkdir(exist_ok=True)
        (tmp_path / f"bi-{pair}").mkdir()
        (tmp_path / "multi" / f"hyp.{pair}.txt").write_text("\n".join(multi) + "\n")
        (tmp_path / f"bi-{pair}" / f"hyp.{pair}.txt").write_text("\n".join(bi) + "\n")
    table = _import_example(EXAMPLES / "multilingual" / "table.py")
    out = subprocess.run([sys.executable, str(EXAMPLES / "multilingual" / "table.py"), str(tmp_path),
                          str(tmp_path / "test"), "--pairs", "en-de", "de-en", "--updates", "12"],
                         capture_output=True, text=True, check=True).stdout
    low = _sacrebleu_cli(tmp_path / "test.de", tmp_path / "bi-en-de" / "hyp.en-de.txt")
    assert 0 < low < 100 - table.BAR
    rows = {m[0]: m[2:] for m in ML_ROW.findall(out)}
    assert rows == {"en-de": ("100.0", f"{low:.1f}", f"{100 - low:+.1f}", "yes"),
                    "de-en": (f"{low:.1f}", "100.0", f"{low - 100:+.1f}", "NO")}, out
    assert "missed the bar: de-en" in out
    (tmp_path / "multi" / "hyp.en-de.txt").write_text("\n".join(refs[:3]) + "\n")
    proc = subprocess.run([sys.executable, str(EXAMPLES / "multilingual" / "table.py"), str(tmp_path),
                           str(tmp_path / "test"), "--pairs", "en-de", "--updates", "6"], capture_output=True, text=True)
    assert proc.returncode != 0 and "3 hypotheses for 4 references" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_multilingual_ci_recipe(tmp_path, data_dir):
    """run.sh --ci end to end: every data-bin, the six-direction model, six bilingual ones, the decodes and the
    table, whose numbers are sacreBLEU's on the hypotheses the script wrote against the raw references. At this
    size every BLEU is 0 (hypotheses are empty or one piece repeated); the scoring itself is checked on
    non-zero numbers by test_multilingual_table_scores_each_direction_as_sacrebleu_does."""
    import sacrebleu

    work = tmp_path / "ml"
    proc = _bash(EXAMPLES / "multilingual" / "run.sh", "--ci", work,
                 env={"MULTI30K": str(data_dir / "multi30k"), **ONE_THREAD})
    rows = ML_ROW.findall(proc.stdout)
    assert [r[0] for r in rows] == ML_PAIRS + ["de-fr"], proc.stdout
    assert rows[-1][1:] == (" (zero-shot)", rows[-1][2], "–", "–", "–")

    def bleu(hyp_file, pair):
        refs = (data_dir / "multi30k" / f"test_2016_flickr.{pair[3:]}").read_text().splitlines()[:50]
        hyps = hyp_file.read_text().splitlines()
        assert len(hyps) == 50, hyp_file
        return f"{sacrebleu.corpus_bleu(hyps, [refs]).score:.1f}"

    for pair, _, multi, bi, diff, bar in rows:
        assert multi == bleu(work / "multi" / f"hyp.{pair}.txt", pair)
        if pair in ML_PAIRS:
            assert bi == bleu(work / f"bi-{pair}" / f"hyp.{pair}.txt", pair)
            assert float(diff) == round(float(multi) - float(bi), 1)
            assert bar == ("yes" if float(multi) >= float(bi) - 2.0 else "NO")
    # each bilingual model read its own direction of its own data-bin, for UPDATES/6 updates
    for pair in ML_PAIRS:
        log = (work / f"bi-{pair}" / "ck" / "train.log").read_text()
        src, tgt = pair.split("-")
        assert re.search(rf"\[{src}\] dictionary: \d+ types; \[{tgt}\] dictionary", log), log[:2000]
        assert "done training: reached --max-update 2; 2 updates" in log, log[-2000:]


@pytest.mark.slow
def test_distill_ci_recipe(tmp_path, data_dir):
    """examples/distill/run.sh --ci end to end. The forward translation, made shard by shard, is the teacher's
    own translation of the training sources in corpus order (one unsharded nmt-generate of the same teacher);
    the student's data-bin holds it as targets; distill.jsonl has the teacher (beam 2) and the student (beams 2
    and 1) in both engines, each BLEU sacreBLEU's on the hypotheses the evaluation kept. Killed after a shard,
    the recipe redoes only what is missing; a missing TEACHER, or one of another dictionary, is one line."""
    import sacrebleu

    work, env = tmp_path / "distill", {"MULTI30K": str(data_dir / "multi30k"), "RUNS": "1", **ONE_THREAD}
    _bash(EXAMPLES / "distill" / "run.sh", "--ci", work, env=env)
    forward = (work / "forward" / "train.de").read_text().splitlines()
    whole = _run(["nmt-generate", str(work / "bin"), "--path", str(work / "teacher" / "checkpoint_last.pt"),
                  "--gen-subset", "train", "--beam", "2", "--lenpen", "0.6", "--batch-size", "64", "--max-len-a",
                  "1.2", "--max-len-b", "10"], cwd=tmp_path, env_extra=ONE_THREAD).stdout
    rows = dict(line[2:].split("\t", 2)[::2] for line in whole.splitlines() if line.startswith("D-"))
    assert len(forward) == 400 and forward == [rows[str(i)] for i in range(400)]
    assert json.loads((work / "student-bin" / "preprocess.json").read_text())["splits"]["train"]["sentences"] == 400
    refs = (data_dir / "multi30k" / "test_2016_flickr.de").read_text().splitlines()[:50]
    lines = [json.loads(x) for x in (work / "distill.jsonl").read_text().splitlines()]
    assert [(x["role"], x["engine"], x["precision"], x["beam"]) for x in lines] == [
        ("teacher", "torch", "float32", 2), ("student", "torch", "float32", 2), ("student", "torch", "float32", 1),
        ("teacher", "ctranslate2", "int8", 2), ("student", "ctranslate2", "int8", 2),
        ("student", "ctranslate2", "int8", 1)]
    for x in lines:
        hyps = (work / "evaluation" / f"{x['role']}.beam{x['beam']}.{x['engine']}.0.out").read_text().splitlines()
        assert len(hyps) == 50 and x["bleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
        assert x["words_per_s_per_core"] > 0 and x["peak_mib"] > 0 and x["cpu"] and x["date"] and x["code"]

    # a run killed while translating shard 1: that shard and what follows it are done again, nothing else
    for stale in ("forward/shard1.txt", "forward/train.de", "distill.jsonl"):
        (work / stale).unlink()
    for stale in ("student-bin", "student", "export"):
        shutil.rmtree(work / stale)
    again = _bash(EXAMPLES / "distill" / "run.sh", "--ci", work, env=env)
    assert re.findall(r"forward translation: shard (\d)", again.stderr) == ["1"]
    assert "nmt-train" in again.stderr and f"{work}/teacher" not in again.stderr  # the teacher is kept
    assert (work / "forward" / "train.de").read_text().splitlines() == forward

    # a run killed while training the student, after its save at update 6: the training resumes there
    student = work / "student"
    last = sorted(student.glob("checkpoint_*_6.pt"))
    assert len(last) == 1, sorted(p.name for p in student.iterdir())
    shutil.copyfile(last[0], student / "checkpoint_last.pt")
    for stale in (".done", "averaged.pt"):
        (student / stale).unlink()
    shutil.rmtree(work / "export" / "student.folder")
    _bash(EXAMPLES / "distill" / "run.sh", "--ci", work, env=env)
    log = (student / "train.log").read_text()
    assert re.search(r"resumed from \S*checkpoint_last\.pt at update 6\b", log), log[-3000:]
    assert (student / "averaged.pt").exists() and (work / "export" / "student.folder" / "manifest.json").exists()

    proc = subprocess.run(["bash", str(EXAMPLES / "distill" / "run.sh"), "--ci", str(tmp_path / "other")],
                          env={**os.environ, **env, "TEACHER": str(tmp_path / "missing.pt")}, capture_output=True,
                          text=True)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"run.sh: TEACHER={tmp_path / 'missing.pt'}: no such checkpoint file"]
    assert not (tmp_path / "other").exists()

    # a teacher trained on another dictionary (its record of the source dictionary changed): one line, exit 1
    import torch
    foreign = torch.load(work / "teacher" / "checkpoint_last.pt", weights_only=True)
    foreign["dictionaries"]["source"]["sha256"] = "0" * 64
    torch.save(foreign, tmp_path / "foreign.pt")
    proc = subprocess.run(["bash", str(EXAMPLES / "distill" / "run.sh"), "--ci", str(tmp_path / "third")],
                          env={**os.environ, **env, "TEACHER": str(tmp_path / "foreign.pt")}, capture_output=True,
                          text=True)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("run.sh:")]
    assert proc.returncode == 1 and len(errors) == 1 and "wrong dictionary" in errors[0], proc.stderr
    assert not (tmp_path / "third" / "forward" / "train.de").exists()
