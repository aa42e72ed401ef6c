"""The DDP stop vote (training/stopping.py): every rank stops at the same update, one update after the first
rank asked, without reading the device in the update it asked."""
import os

import pytest
import torch
import torch.distributed as dist

from nmt_toolkit.training import distributed
from nmt_toolkit.training.stopping import StopVote


def _votes(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=world)
    vote = StopVote(torch.device("cpu"), world)
    seen = []
    for update in range(1, 7):
        # rank 1 is signalled after update 2; rank 0's time budget runs out after update 4
        seen.append(vote.vote(time_up=rank == 0 and update >= 4, signalled=rank == 1 and update >= 2))
    torch.save(seen, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.slow
def test_every_rank_reads_the_same_vote_one_update_late(tmp_path):
    import torch.multiprocessing as mp

    out = str(tmp_path / "votes")
    mp.start_processes(_votes, args=(2, distributed.free_port(), out), nprocs=2, join=True, start_method="spawn")
    got = [torch.load(f"{out}.{rank}") for rank in range(2)]
    want = [(False, False), (False, False), (False, True), (False, True), (True, True), (True, True)]
    assert got[0] == got[1] == want


def test_one_process_stops_at_once():
    vote = StopVote(torch.device("cpu"), 1)
    assert vote.vote(False, False) == (False, False)
    assert vote.vote(True, False) == (True, False) and vote.vote(False, True) == (False, True)
