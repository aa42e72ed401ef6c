"""The training state a checkpoint carries: :class:`TrainState`, and the RNG states as plain values and
tensors (checkpoints are loaded with ``weights_only=True``)."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch


def get_rng_state(device: Optional[torch.device] = None) -> dict:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": {"version": int(version), "internal": list(internal), "gauss": gauss},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"].cpu())
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].cpu().numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


#: the keys an averaged checkpoint keeps: where training was, without a position to resume from
POSITION_KEYS = ("epoch", "num_updates")


@dataclass
class TrainState:
    """The training part of a checkpoint (its ``train_state`` entry), the one place it is built and read.

    ``iterator`` is the data position (:meth:`EpochBatchIterator.state_dict`), ``num_shards`` the world size
    it was counted on, ``best`` the best validation metric so far, ``patience_counter`` the validations since
    it last improved, ``rng`` the RNG states at the save (:func:`get_rng_state`), ``wall`` the training
    seconds so far, ``meters`` the train meters (``{"interval": ..., "epoch": ...}``). Reading tolerates the
    keys a checkpoint lacks (an averaged or imported one): each then takes the value of a fresh start.
    """

    epoch: int = 1
    num_updates: int = 0
    iterator: Optional[dict] = None
    num_shards: Optional[int] = None
    best: Optional[float] = None
    patience_counter: int = 0
    rng: Optional[dict] = None
    wall: float = 0.0
    meters: Optional[dict] = None

    def to_dict(self) -> dict:
        """The ``train_state`` entry, its keys in the order checkpoints have always stored them."""
        return {"epoch": self.epoch, "num_updates": self.num_updates, "iterator": self.iterator,
                "num_shards": self.num_shards, "best": self.best, "patience_counter": self.patience_counter,
                "rng": self.rng, "wall": self.wall, "meters": self.meters}

    @classmethod
    def from_dict(cls, state: Optional[dict]) -> "TrainState":
        state = state or {}
        shards = state.get("num_shards")
        return cls(epoch=int(state.get("epoch", 1)), num_updates=int(state.get("num_updates", 0)),
                   iterator=state.get("iterator") or None, num_shards=None if shards is None else int(shards),
                   best=state.get("best"), patience_counter=int(state.get("patience_counter", 0)),
                   rng=state.get("rng"), wall=float(state.get("wall", 0.0)), meters=state.get("meters") or None)

    @staticmethod
    def position_of(state: Any) -> Optional[dict]:
        """Where training was (epoch, updates) without what resumes it (RNG states, data position): the
        ``train_state`` of a checkpoint made from others, such as an average. ``None`` without one."""
        if not isinstance(state, dict):
            return None
        return {k: v for k, v in state.items() if k in POSITION_KEYS}
