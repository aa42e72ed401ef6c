"""Eq. 3 (noam), fairseq's inverse_sqrt, and exact state round-trips."""
import pytest
import torch

from nmt_toolkit.optim.lr_schedulers import (CosineConfig, CosineSchedule, InverseSqrtConfig, InverseSqrtSchedule,
                                             NoamConfig, NoamSchedule, PlateauConfig, PlateauSchedule, noam)
from nmt_toolkit.errors import UsageError
from nmt_toolkit.optim.optimizers import AdamConfig, build_adam, parse_betas


def eq3(step, d=512, warmup=4000):
    return d ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("step", [1, 100, 4000, 100000])
def test_noam_is_eq3(step):
    sched = NoamSchedule(NoamConfig(warmup_updates=4000, model_dim=512), None, 1.0)
    assert sched.lr_at(step - 1) == pytest.approx(eq3(step), rel=1e-12)  # lr_at(n) = lr of update n+1
    assert noam(step, 512, 4000) == pytest.approx(eq3(step), rel=1e-12)


def test_noam_value_at_warmup():
    assert noam(4000, 512, 4000) == pytest.approx(6.988e-4, rel=1e-3)


def test_noam_sets_optimizer_lr_for_the_first_update():
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=0.0)
    sched = NoamSchedule(NoamConfig(warmup_updates=4000, model_dim=512), opt, 2.0)
    sched.step_update(0)
    assert opt.param_groups[0]["lr"] == pytest.approx(2.0 * eq3(1))


@pytest.mark.parametrize("step", [1, 100, 4000, 100000])
def test_inverse_sqrt_matches_noam(step):
    d, w = 512, 4000
    inv = InverseSqrtSchedule(InverseSqrtConfig(warmup_updates=w, warmup_init_lr=0.0), None, (d * w) ** -0.5)
    assert inv.lr_at(step) == pytest.approx(eq3(step, d, w), rel=1e-9)


def test_inverse_sqrt_fairseq_semantics():
    inv = InverseSqrtSchedule(InverseSqrtConfig(warmup_updates=10, warmup_init_lr=1e-7), None, 1e-3)
    assert inv.lr_at(0) == pytest.approx(1e-7)
    assert inv.lr_at(10) == pytest.approx(1e-3)
    assert inv.lr_at(40) == pytest.approx(1e-3 * 0.5)


def test_state_dict_round_trip():
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=0.0)
    a = PlateauSchedule(PlateauConfig(lr_patience=0), opt, 1.0)
    a.step(1, 3.0), a.step(2, 4.0)
    b = PlateauSchedule(PlateauConfig(lr_patience=0), opt, 1.0)
    b.load_state_dict(a.state_dict())
    assert b.get_lr() == a.get_lr() == 0.5 and b.best == 3.0
    c = CosineSchedule(CosineConfig(warmup_updates=2, min_lr=0.0, cosine_period_updates=12), opt, 1.0)
    assert c.lr_at(2) == pytest.approx(1.0) and c.lr_at(12) == pytest.approx(0.0, abs=1e-12)


def test_adam_betas_parse_and_fused():
    assert parse_betas("0.9,0.98") == (0.9, 0.98) == parse_betas("(0.9, 0.98)")
    with pytest.raises(UsageError, match="adam-betas"):
        parse_betas("0.9")
    opt = build_adam(AdamConfig(adam_betas="(0.9, 0.98)"), [torch.nn.Parameter(torch.zeros(3))], 1e-3)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    assert opt.defaults.get("fused") or opt.defaults.get("foreach")


def test_noam_without_lr_flag_is_eq3_exactly():
    """With no --lr, noam's scale defaults to 1.0 (not the generic 5e-4): lr(4000) is the paper's 6.988e-4."""
    from nmt_toolkit import registry
    from nmt_toolkit.optim import build_lr_scheduler, default_lr
    from nmt_toolkit.optim.lr_schedulers import NoamConfig

    registry.import_builtin_components()
    assert default_lr("noam") == 1.0 and default_lr("inverse_sqrt") == 5e-4
    sched = build_lr_scheduler("noam", NoamConfig(warmup_updates=4000, model_dim=512), None, None)
    assert abs(sched.step_update(3999) - 512 ** -0.5 * 4000 ** -0.5) < 1e-12
    assert abs(sched.step_update(3999) - 6.988e-4) < 1e-6
