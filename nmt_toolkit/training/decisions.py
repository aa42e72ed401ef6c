"""What the run does after an update: validate, save, stop. Pure functions of the run's state and options.

The loop gathers the facts of an update (:class:`UpdateFacts`), asks :func:`decide` before validating, runs
the validation it asked for, and asks :func:`after_validation` what the metric changes: a new best is saved
at once (``checkpoint_best.pt`` now, not only if a save happens to follow), and ``--patience`` validations
without one end the run with a save. Nothing here reads a clock, a device or a file, so every rule can be
tested without training.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional


@dataclass(frozen=True)
class UpdateFacts:
    """The state of the run just after update ``num_updates``.

    ``time_up`` and ``signalled`` are what the ranks agreed on (:class:`StopVote`); ``signal_name`` names the
    signal this process received (``None`` when the stop came from another rank)."""

    num_updates: int
    epoch: int
    end_of_epoch: bool = False
    time_up: bool = False
    signalled: bool = False
    signal_name: Optional[str] = None
    seconds_since_save: float = 0.0
    can_validate: bool = True


@dataclass(frozen=True)
class Decision:
    """``validate`` the splits, ``save`` a checkpoint, ``stop`` the run (the reason, or ``None``).

    ``update_checkpoint``: the save is due by ``--save-interval-updates`` or ``--save-interval-minutes``, so
    it writes ``checkpoint_<epoch>_<updates>.pt`` (see :func:`checkpoints.checkpoint_names`)."""

    validate: bool = False
    save: bool = False
    stop: Optional[str] = None
    update_checkpoint: bool = False


def stop_reason(num_updates: int, time_up: bool, signalled: bool, signal_name: Optional[str], opt) -> Optional[str]:
    """Why the run stops after this update: ``--max-update`` first, then ``--stop-time-hours``, then a signal."""
    if num_updates >= (opt.max_update or math.inf):
        return f"reached --max-update {opt.max_update}"
    if time_up:
        return f"reached --stop-time-hours {opt.stop_time_hours}"
    if signalled:
        return f"received {signal_name}" if signal_name is not None else "another rank stopped"
    return None


def decide(facts: UpdateFacts, ck, opt) -> Decision:
    """Before validation: validate at the intervals (epochs and updates) and when a limit is reached; save
    at the end of an epoch, at the save intervals, and whenever the run stops. A signal skips the
    validation: the process is being preempted, so save and leave."""
    n = facts.num_updates
    stop = stop_reason(n, facts.time_up, facts.signalled, facts.signal_name, opt)
    by_updates = ck.save_interval_updates > 0 and n % ck.save_interval_updates == 0
    by_minutes = ck.save_interval_minutes > 0 and facts.seconds_since_save >= ck.save_interval_minutes * 60
    validate = facts.can_validate and not facts.signalled and (
        (facts.end_of_epoch and facts.epoch % opt.validate_interval == 0)
        or (opt.validate_interval_updates > 0 and n % opt.validate_interval_updates == 0)
        or (stop is not None and stop.startswith("reached")))
    save = facts.end_of_epoch or by_updates or by_minutes or stop is not None
    return Decision(validate=validate, save=save, stop=stop, update_checkpoint=by_updates or by_minutes)


def is_better(value: float, best: Optional[float], maximize: bool) -> bool:
    """``value`` beats ``best`` (the first validation always does)."""
    if best is None:
        return True
    return value > best if maximize else value < best


@dataclass(frozen=True)
class Patience:
    """The best validation metric so far and the validations since it improved (``--patience``)."""

    best: Optional[float] = None
    bad_validations: int = 0


def after_validation(decision: Decision, metric: Optional[float], patience: Patience, ck) -> tuple[Decision, Patience]:
    """A new best forces a save; ``--patience`` validations in a row without one stop the run, with a save
    (``checkpoint_last.pt`` is then this update). ``metric`` is ``None`` when nothing was validated."""
    if metric is None:
        return decision, patience
    if is_better(metric, patience.best, ck.maximize_best_checkpoint_metric):
        patience = Patience(metric, 0)
        decision = replace(decision, save=True)
    else:
        patience = Patience(patience.best, patience.bad_validations + 1)
    if 0 < ck.patience <= patience.bad_validations and decision.stop is None:
        decision = replace(decision, save=True, stop=(f"early stop: {ck.best_checkpoint_metric} did not improve "
                                                      f"for {ck.patience} validations (--patience)"))
    return decision, patience


def limit_reached(epoch: int, epoch_done: bool, num_updates: int, opt) -> Optional[str]:
    """Before an epoch starts: the ``--max-epoch`` or ``--max-update`` the run has already reached."""
    max_epoch = opt.max_epoch or math.inf
    if epoch > max_epoch or (epoch == max_epoch and epoch_done):
        return f"reached --max-epoch {opt.max_epoch}"
    if num_updates >= (opt.max_update or math.inf):
        return f"reached --max-update {opt.max_update}"
    return None
