"""The batch prefetcher (training/prefetch.py): same batches in the same order, exact resume, errors raised
in the training loop, a thread that stops when the loop leaves early."""
import threading

import pytest
import torch

from nmt_toolkit.data.batching import EpochBatchIterator, batch_by_size
from nmt_toolkit.training.compile import pad_to_multiple
from nmt_toolkit.training.prefetch import Prefetcher
from tests.train_helpers import random_pairs


def _iterator(n=300, seed=0):
    ds = random_pairs(n, seed)
    batches = batch_by_size(ds.ordered_indices(seed=1), ds.num_tokens_vec(), max_tokens=200)
    return EpochBatchIterator(ds, batches, seed=3, num_shards=2, shard_id=1)  # a rank's share, with a filler


def _same(a, b):
    if torch.is_tensor(a):
        return torch.is_tensor(b) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_same_batches_in_the_same_order():
    plain = list(_iterator().next_epoch_itr())
    with Prefetcher(_iterator().next_epoch_itr(), depth=2) as batches:
        got = list(batches)
    assert len(got) == len(plain) > 10 and all(_same(a, b) for a, b in zip(plain, got))
    assert plain[-1] == {} and got[-1] == {}  # the rank's filler batch comes through as it is


def test_the_position_counts_consumed_batches_and_resume_is_exact():
    full = list(_iterator().next_epoch_itr())
    itr = _iterator()
    batches = Prefetcher(itr.next_epoch_itr(), depth=2)
    for _ in range(5):
        next(batches)
    while batches._queue.qsize() < 2:  # the thread has prepared two more
        threading.Event().wait(0.01)
    state = itr.state_dict()
    batches.close()
    assert state["iterations_in_epoch"] == 5 and itr.has_next()
    resumed = _iterator()
    resumed.load_state_dict(state)
    with Prefetcher(resumed.next_epoch_itr()) as rest:
        tail = list(rest)
    assert len(tail) == len(full) - 5 and all(_same(a, b) for a, b in zip(full[5:], tail))
    assert resumed.end_of_epoch()


def test_prepare_runs_on_the_thread():
    plain = list(_iterator().next_epoch_itr())
    seen = set()

    def prepare(batch):
        seen.add(threading.current_thread().name)
        return pad_to_multiple(batch, 8, 1, 1)

    with Prefetcher(_iterator().next_epoch_itr(), prepare) as batches:
        got = list(batches)
    assert seen == {"nmt-prefetch"}
    for a, b in zip(plain[:-1], got[:-1]):
        assert b["net_input"]["src_tokens"].size(1) % 8 == 0 and b["target"].size(1) % 8 == 0
        s, t = a["net_input"]["src_tokens"].size(1), a["target"].size(1)
        assert torch.equal(b["net_input"]["src_tokens"][:, :s], a["net_input"]["src_tokens"])
        assert torch.equal(b["target"][:, :t], a["target"]) and (b["target"][:, t:] == 1).all()


def test_an_error_on_the_thread_is_raised_in_the_loop():
    itr = _iterator()
    epoch = itr.next_epoch_itr()
    calls = [0]
    collate = itr.collate_fn

    def failing(items):
        calls[0] += 1
        if calls[0] == 4:
            raise OSError("train.bin: read error")
        return collate(items)

    itr.collate_fn = failing
    batches = Prefetcher(epoch)
    got = [next(batches) for _ in range(3)]
    with pytest.raises(OSError, match="train.bin: read error"):
        next(batches)
    assert len(got) == 3 and itr.state_dict()["iterations_in_epoch"] == 3
    assert not batches._thread.is_alive()


def test_leaving_early_stops_the_thread():
    batches = Prefetcher(_iterator().next_epoch_itr(), depth=1)
    next(batches)
    batches.close()
    assert not batches._thread.is_alive()
