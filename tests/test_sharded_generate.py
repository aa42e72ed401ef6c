"""nmt-generate --num-shards N --shard-id I: the shards' merged output is the unsharded output.

Every run decodes one batch at a time (``--decode-workers 1``): the unsharded split has enough batches for two
one-thread decode workers while a shard of it has not, and a batch decoded on one intra-op thread can differ
from the same batch on two in the last float digits of its scores (the matrix products sum in another order)."""
import pathlib

import pytest

from nmt_toolkit.cli.generate import run as generate

FIX = pathlib.Path(__file__).parent / "fixtures" / "fairseq"
ARGS = [str(FIX / "data-bin"), "--path", str(FIX / "postnorm" / "model.pt"), "--gen-subset", "test", "--beam", "4",
        "--batch-size", "8",
        "--decode-workers", "1"]


def blocks(text: str) -> dict[int, list[str]]:
    """Every sentence's S-/T-/H-/D-/P- lines, by sentence id."""
    out: dict[int, list[str]] = {}
    for line in text.splitlines():
        if line[:2] in ("S-", "T-", "H-", "D-", "P-"):
            out.setdefault(int(line.split("\t")[0][2:]), []).append(line)
    return out


@pytest.mark.slow
def test_merged_shards_equal_the_unsharded_output(capsys):
    assert generate(ARGS) == 0
    whole = capsys.readouterr().out
    merged: dict[int, list[str]] = {}
    for shard in range(3):
        assert generate([*ARGS, "--num-shards", "3", "--shard-id", str(shard)]) == 0
        out = capsys.readouterr().out
        assert "BLEU" not in out  # a shard's score is not the test set's
        part = blocks(out)
        assert part and not set(part) & set(merged)  # each sentence in exactly one shard
        merged.update(part)
    assert merged == blocks(whole) and len(merged) == 100
    assert "BLEU" in whole


def test_shard_results_files_are_named_per_shard(tmp_path, capsys):
    assert generate([*ARGS, "--num-shards", "2", "--shard-id", "1", "--results-path", str(tmp_path)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["generate-test.shard1-of-2.txt"]


@pytest.mark.parametrize("flags, message", [
    (["--num-shards", "0"], "--num-shards 0: must be an integer ≥ 1"),
    (["--num-shards", "2", "--shard-id", "2"], "--shard-id 2 is out of range for --num-shards 2 (0 .. 1)"),
])
def test_bad_shards_are_one_line_errors(flags, message, capsys):
    assert generate([*ARGS, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and len(err) == 1


def test_torchrun_ranks_are_the_shards(monkeypatch, capsys):
    assert generate(ARGS) == 0
    whole = blocks(capsys.readouterr().out)
    merged = {}
    for rank in range(2):
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        assert generate([*ARGS, "--cpu"]) == 0
        merged.update(blocks(capsys.readouterr().out))
    assert merged == whole
