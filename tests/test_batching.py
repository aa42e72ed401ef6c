"""Batching: token budget, coverage, determinism, exact resume, rank sharding, collation."""
import numpy as np
import torch

from nmt_toolkit.data.batching import EpochBatchIterator, batch_by_size
from tests.train_helpers import random_pairs


def _dataset(n=300, seed=0):
    return random_pairs(n, seed)


def _iterator(ds, **kw):
    idx = ds.ordered_indices(seed=1)
    batches = batch_by_size(idx, ds.num_tokens_vec(), max_tokens=200, required_batch_size_multiple=8)
    return EpochBatchIterator(ds, batches, seed=3, **kw), batches


def test_budget_and_coverage():
    ds = _dataset()
    _, batches = _iterator(ds)
    ntok = ds.num_tokens_vec()
    assert all(len(b) * ntok[b].max() <= 200 for b in batches)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(ds)))


def test_same_seed_same_batches_and_epochs_differ():
    ds = _dataset()
    a = [b["id"].tolist() for b in _iterator(ds)[0].next_epoch_itr()]
    itr = _iterator(ds)[0]
    b = [x["id"].tolist() for x in itr.next_epoch_itr()]
    c = [x["id"].tolist() for x in itr.next_epoch_itr()]
    assert a == b and a != c and itr.epoch == 2
    assert sorted(sum(c, [])) == list(range(len(ds)))


def test_resume_yields_exactly_the_remaining_batches():
    ds = _dataset()
    itr = _iterator(ds)[0]
    itr.next_epoch_itr()
    full = [b["id"].tolist() for b in itr.next_epoch_itr()]  # epoch 2
    itr2 = _iterator(ds)[0]
    itr2.next_epoch_itr()
    epoch = itr2.next_epoch_itr()
    for _ in range(5):
        next(epoch)
    state = itr2.state_dict()
    assert state["epoch"] == 2 and state["iterations_in_epoch"] == 5
    itr3 = _iterator(ds)[0]
    itr3.load_state_dict(state)
    rest = [b["id"].tolist() for b in itr3.next_epoch_itr()]
    assert rest == full[5:] and itr3.end_of_epoch()
    assert itr3.state_dict()["epoch"] == 3 and itr3.state_dict()["iterations_in_epoch"] == 0


def test_ranks_get_equal_batch_counts():
    ds = _dataset(n=77)
    _, batches = _iterator(ds)
    per_rank = [list(_iterator(ds, num_shards=3, shard_id=r)[0].next_epoch_itr()) for r in range(3)]
    assert len({len(p) for p in per_rank}) == 1 == len({len(_iterator(ds, num_shards=3, shard_id=r)[0]) for r in range(3)})
    ids = [i for p in per_rank for b in p if b for i in b["id"].tolist()]
    assert sorted(ids) == list(range(len(ds)))
    assert sum(1 for p in per_rank for b in p if b == {}) == 3 * len(per_rank[0]) - len(batches)


def test_collate_pads_right_and_shifts_eos():
    ds = _dataset(n=5)
    sample = ds.collater([ds[i] for i in range(5)])
    src, prev, tgt = sample["net_input"]["src_tokens"], sample["net_input"]["prev_output_tokens"], sample["target"]
    for row, i in enumerate(range(5)):
        s, t = ds[i]["source"], ds[i]["target"]
        assert src[row, :len(s)].tolist() == s.tolist() and (src[row, len(s):] == 1).all()
        assert tgt[row, :len(t)].tolist() == t.tolist() and (tgt[row, len(t):] == 1).all()
        assert prev[row, :len(t)].tolist() == [2] + t[:-1].tolist() and (prev[row, len(t):] == 1).all()
    assert sample["ntokens"] == int((tgt != 1).sum()) and sample["nsentences"] == 5
    assert src.dtype == torch.long and sample["net_input"]["src_lengths"].tolist() == [len(ds[i]["source"]) for i in range(5)]


def test_task_iterator_on_real_data(data_dir, tmp_path):
    from nmt_toolkit.cli.preprocess import run
    from nmt_toolkit.tasks.translation import TranslationConfig, TranslationTask

    w = data_dir / "wmt14-sample"
    assert run(["--source-lang", "en", "--target-lang", "de", "--trainpref", str(w / "valid"),
                "--destdir", str(tmp_path / "bin"), "--no-progress-bar"]) == 0
    task = TranslationTask.setup_task(TranslationConfig(data=str(tmp_path / "bin"), max_tokens=2000,
                                                        max_source_positions=60, max_target_positions=60))
    assert (task.cfg.source_lang, task.cfg.target_lang) == ("en", "de")
    ds = task.load_dataset("train")
    itr = task.get_batch_iterator("train", seed=1)
    n = 0
    for b in itr.next_epoch_itr():
        assert b["net_input"]["src_tokens"].numel() <= 2000 and b["target"].numel() <= 2000
        assert b["net_input"]["src_tokens"].shape[1] <= 60
        n += b["nsentences"]
    assert n == int(((ds.src_sizes <= 60) & (ds.tgt_sizes <= 60)).sum()) < len(ds)
