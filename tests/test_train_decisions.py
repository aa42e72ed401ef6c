"""The rules of the training run without training: when to validate, save and stop (decisions.decide,
decisions.after_validation), which checkpoint files a save writes (checkpoints.checkpoint_names), and the
checkpoint's training state (state.TrainState) read and written."""
from __future__ import annotations

from dataclasses import replace

import torch

from nmt_toolkit.checkpoints import checkpoint_names
from nmt_toolkit.training.decisions import (Decision, Patience, UpdateFacts, after_validation, decide, is_better,
                                            limit_reached)
from nmt_toolkit.training.options import CheckpointConfig, OptimizationConfig
from nmt_toolkit.training.progress import Meter
from nmt_toolkit.training.state import TrainState, get_rng_state

CK = CheckpointConfig()
OPT = OptimizationConfig()


def test_update_intervals_at_update_500():
    """--save-interval-updates 250 and --validate-interval-updates 500, mid-epoch: validate and save an
    update checkpoint; then checkpoint_1_500.pt and checkpoint_last.pt (no new best: not validated better)."""
    ck = replace(CK, save_interval_updates=250)
    opt = replace(OPT, validate_interval_updates=500)
    d = decide(UpdateFacts(num_updates=500, epoch=1), ck, opt)
    assert d == Decision(validate=True, save=True, stop=None, update_checkpoint=True)
    assert checkpoint_names(ck, 1, 500, False, d.update_checkpoint, None, 3.0) == ["checkpoint_1_500.pt",
                                                                                 "checkpoint_last.pt"]


def test_update_250_saves_without_validating_and_251_does_nothing():
    ck = replace(CK, save_interval_updates=250)
    opt = replace(OPT, validate_interval_updates=500)
    assert decide(UpdateFacts(num_updates=250, epoch=1), ck, opt) == Decision(False, True, None, True)
    assert decide(UpdateFacts(num_updates=251, epoch=1), ck, opt) == Decision(False, False, None, False)


def test_end_of_epoch_with_intervals_in_epochs():
    """--validate-interval 2 --save-interval 2: epoch 3 ends with a save (every epoch end saves
    checkpoint_last.pt) but no validation and no checkpoint3.pt; epoch 4 validates and writes checkpoint4.pt."""
    ck, opt = replace(CK, save_interval=2), replace(OPT, validate_interval=2)
    d3 = decide(UpdateFacts(num_updates=48, epoch=3, end_of_epoch=True), ck, opt)
    assert d3 == Decision(validate=False, save=True, stop=None, update_checkpoint=False)
    assert checkpoint_names(ck, 3, 48, True, False, None, 5.0) == ["checkpoint_last.pt"]
    d4 = decide(UpdateFacts(num_updates=64, epoch=4, end_of_epoch=True), ck, opt)
    assert d4.validate and d4.save and d4.stop is None
    d4, patience = after_validation(d4, 4.5, Patience(5.0, 0), ck)
    assert patience == Patience(4.5, 0)
    assert checkpoint_names(ck, 4, 64, True, False, 4.5, patience.best) == ["checkpoint4.pt", "checkpoint_best.pt",
                                                                           "checkpoint_last.pt"]


def test_max_update_validates_saves_and_stops():
    opt = replace(OPT, max_update=40)
    d = decide(UpdateFacts(num_updates=40, epoch=3), CK, opt)
    assert d == Decision(validate=True, save=True, stop="reached --max-update 40", update_checkpoint=False)
    assert decide(UpdateFacts(num_updates=40, epoch=3, can_validate=False), CK, opt).validate is False


def test_time_limit_and_signals():
    opt = replace(OPT, stop_time_hours=0.5)
    d = decide(UpdateFacts(num_updates=7, epoch=1, time_up=True), CK, opt)
    assert d == Decision(validate=True, save=True, stop="reached --stop-time-hours 0.5")
    # a signal: save and leave, no validation (preemption gives seconds, not minutes)
    d = decide(UpdateFacts(num_updates=7, epoch=1, signalled=True, signal_name="SIGTERM"), CK, opt)
    assert d == Decision(validate=False, save=True, stop="received SIGTERM")
    d = decide(UpdateFacts(num_updates=7, epoch=1, end_of_epoch=True, signalled=True), CK, opt)
    assert d == Decision(validate=False, save=True, stop="another rank stopped")
    # --max-update wins over the clock and the signal
    d = decide(UpdateFacts(num_updates=9, epoch=1, time_up=True, signalled=True), CK, replace(opt, max_update=9))
    assert d.stop == "reached --max-update 9" and d.validate is False


def test_save_interval_minutes():
    ck = replace(CK, save_interval_minutes=1.0)
    assert decide(UpdateFacts(num_updates=3, epoch=1, seconds_since_save=59.9), ck, OPT) == Decision()
    assert decide(UpdateFacts(num_updates=3, epoch=1, seconds_since_save=60.0), ck, OPT) == \
        Decision(validate=False, save=True, update_checkpoint=True)


def test_new_best_forces_a_save_and_resets_patience():
    ck = replace(CK, patience=2, keep_best_checkpoints=2)
    d, p = after_validation(Decision(validate=True), 4.25, Patience(5.0, 1), ck)
    assert d == Decision(validate=True, save=True) and p == Patience(4.25, 0)
    assert checkpoint_names(ck, 2, 30, False, False, 4.25, p.best) == [
        "checkpoint_best.pt", "checkpoint.best_loss_4.2500.pt", "checkpoint_last.pt"]


def test_patience_stops_after_n_validations_without_improvement():
    ck = replace(CK, patience=2)
    d, p = after_validation(Decision(validate=True), 5.5, Patience(5.0, 0), ck)
    assert d == Decision(validate=True) and p == Patience(5.0, 1)
    d, p = after_validation(Decision(validate=True), 5.0, p, ck)  # equal is no improvement
    assert p == Patience(5.0, 2)
    assert d == Decision(validate=True, save=True,
                         stop="early stop: loss did not improve for 2 validations (--patience)")
    # a stop already decided keeps its reason; patience -1 or 0 never stops
    d, _ = after_validation(Decision(validate=True, save=True, stop="reached --max-update 9"), 6.0, p, ck)
    assert d.stop == "reached --max-update 9"
    for never in (-1, 0):
        d, _ = after_validation(Decision(validate=True), 6.0, Patience(5.0, 50), replace(CK, patience=never))
        assert d.stop is None and not d.save


def test_maximized_metric_and_first_validation():
    assert is_better(1.0, None, maximize=False) and is_better(1.0, None, maximize=True)
    assert is_better(30.0, 29.5, maximize=True) and not is_better(29.0, 29.5, maximize=True)
    ck = replace(CK, maximize_best_checkpoint_metric=True, best_checkpoint_metric="bleu", keep_best_checkpoints=1)
    d, p = after_validation(Decision(validate=True), 30.0, Patience(29.5, 3), ck)
    assert p == Patience(30.0, 0) and d.save
    assert checkpoint_names(ck, 1, 10, False, False, 30.0, 30.0)[1] == "checkpoint.best_bleu_30.0000.pt"
    assert after_validation(Decision(), None, Patience(29.5, 3), ck) == (Decision(), Patience(29.5, 3))


def test_checkpoint_names_table():
    """Each name's condition alone, in the order the files are written."""
    both = replace(CK, keep_best_checkpoints=1)
    assert checkpoint_names(both, 3, 48, True, True, 2.0, 2.0) == [
        "checkpoint3.pt", "checkpoint_3_48.pt", "checkpoint_best.pt", "checkpoint.best_loss_2.0000.pt",
        "checkpoint_last.pt"]
    assert checkpoint_names(replace(CK, no_epoch_checkpoints=True), 3, 48, True, True, None, 2.0) == [
        "checkpoint_3_48.pt", "checkpoint_last.pt"]  # update checkpoints stay on, as in fairseq
    assert checkpoint_names(replace(CK, no_last_checkpoints=True), 3, 48, False, False, 2.5, 2.0) == []
    assert checkpoint_names(replace(CK, no_last_checkpoints=True), 3, 48, False, False, 2.0, 2.0) == [
        "checkpoint_best.pt"]


def test_limits_before_an_epoch():
    opt = replace(OPT, max_epoch=3, max_update=100)
    assert limit_reached(3, False, 40, opt) is None
    assert limit_reached(3, True, 48, opt) == "reached --max-epoch 3"
    assert limit_reached(4, False, 48, opt) == "reached --max-epoch 3"
    assert limit_reached(2, False, 100, opt) == "reached --max-update 100"
    assert limit_reached(99, True, 10 ** 9, OPT) is None  # 0: no limit


def _saved_train_state() -> dict:
    """A train_state exactly as nmt-train writes it (the keys and their order of a real checkpoint)."""
    meter = Meter()
    meter.add({"loss": 2.5, "nll_loss": 2.0, "ntokens": 10.0})
    return {"epoch": 2, "num_updates": 21, "iterator": {"epoch": 2, "iterations_in_epoch": 5, "shuffle": True},
            "num_shards": 1, "best": 5.25, "patience_counter": 1, "rng": get_rng_state(), "wall": 12.5,
            "meters": {"interval": meter.state_dict(), "epoch": Meter().state_dict()}}


def _same(a, b) -> bool:
    if torch.is_tensor(a):
        return torch.is_tensor(b) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b)


def test_train_state_reads_a_saved_one_and_writes_it_back_unchanged():
    saved = _saved_train_state()
    state = TrainState.from_dict(saved)
    assert (state.epoch, state.num_updates, state.num_shards, state.best, state.patience_counter, state.wall) == \
        (2, 21, 1, 5.25, 1, 12.5)
    assert state.iterator == {"epoch": 2, "iterations_in_epoch": 5, "shuffle": True}
    assert _same(state.to_dict(), saved)  # same keys, same order, same values and tensors
    assert _same(TrainState.from_dict(state.to_dict()).to_dict(), state.to_dict())


def test_train_state_of_a_checkpoint_without_one_is_a_fresh_start():
    for missing in (None, {}):
        state = TrainState.from_dict(missing)
        assert state == TrainState()
        assert (state.epoch, state.num_updates, state.best, state.patience_counter, state.rng) == (1, 0, None, 0, None)
    # an averaged checkpoint keeps where training was, nothing to resume from
    state = TrainState.from_dict({"epoch": 4, "num_updates": 60})
    assert (state.epoch, state.num_updates, state.iterator, state.rng, state.meters) == (4, 60, None, None, None)


def test_position_of_keeps_epoch_and_updates_only():
    saved = _saved_train_state()
    assert TrainState.position_of(saved) == {"epoch": 2, "num_updates": 21}
    assert TrainState.position_of({"num_updates": 7}) == {"num_updates": 7}
    assert TrainState.position_of(None) is None
