"""Learning-rate schedules: the paper's formula, cosine endpoints, and the LambdaLR built on them."""

import math

import pytest
import torch
from torch import nn

from tformer.training.optim import OptimConfig, build_optimizer
from tformer.training.schedules import (
    ScheduleConfig,
    build_scheduler,
    constant_lr,
    cosine_lr,
    inverse_sqrt_lr,
)

D, WARMUP = 512, 4000


@pytest.mark.parametrize("step", [1, 100, WARMUP, 10 * WARMUP])
def test_inverse_sqrt_matches_the_paper(step):
    expected = D**-0.5 * min(step**-0.5, step * WARMUP**-1.5)
    assert inverse_sqrt_lr(step, d_model=D, warmup=WARMUP) == pytest.approx(expected, rel=1e-12)
    assert inverse_sqrt_lr(step, d_model=D, warmup=WARMUP, factor=2.0) == pytest.approx(2 * expected)


def test_inverse_sqrt_closed_forms_and_peak():
    assert inverse_sqrt_lr(1, d_model=D, warmup=WARMUP) == pytest.approx(D**-0.5 * WARMUP**-1.5)
    peak = inverse_sqrt_lr(WARMUP, d_model=D, warmup=WARMUP)
    assert peak == pytest.approx((D * WARMUP) ** -0.5)  # ~ 7.0e-4 for the base model
    assert inverse_sqrt_lr(10 * WARMUP, d_model=D, warmup=WARMUP) == pytest.approx(peak / math.sqrt(10))
    lrs = [inverse_sqrt_lr(s, d_model=D, warmup=WARMUP) for s in range(1, 3 * WARMUP)]
    assert max(range(len(lrs)), key=lrs.__getitem__) + 1 == WARMUP


def test_cosine_endpoints():
    kw = dict(peak=1e-3, warmup=10, total=110, min_ratio=0.1)
    assert cosine_lr(1, **kw) == pytest.approx(1e-4)
    assert cosine_lr(10, **kw) == pytest.approx(1e-3)
    assert cosine_lr(60, **kw) == pytest.approx((1e-3 + 1e-4) / 2)  # half way down the cosine
    assert cosine_lr(110, **kw) == pytest.approx(1e-4)
    assert cosine_lr(500, **kw) == pytest.approx(1e-4)  # held at the floor after total
    lrs = [cosine_lr(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False))


def test_constant_warms_up_then_holds():
    assert constant_lr(5, peak=0.2, warmup=10) == pytest.approx(0.1)
    assert constant_lr(10, peak=0.2, warmup=10) == constant_lr(1000, peak=0.2, warmup=10) == 0.2
    assert constant_lr(1, peak=0.2, warmup=0) == 0.2


def test_step_zero_is_rejected():
    with pytest.raises(ValueError, match="step=0"):
        inverse_sqrt_lr(0, d_model=D, warmup=WARMUP)


def optimizer(lr: float) -> torch.optim.Optimizer:
    torch.manual_seed(0)
    return build_optimizer(nn.Linear(3, 3), OptimConfig(lr=lr))


def run(opt: torch.optim.Optimizer, sched, steps: int) -> list[float]:
    """The lr each of the next `steps` optimizer steps uses."""
    used = []
    for _ in range(steps):
        used.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return used


def test_scheduler_follows_the_paper_from_step_one():
    opt = optimizer(2.0)
    sched = build_scheduler(opt, ScheduleConfig(warmup=10), d_model=64, lr=2.0)
    used = run(opt, sched, 30)
    expected = [inverse_sqrt_lr(s, d_model=64, warmup=10, factor=2.0) for s in range(1, 31)]
    assert used == pytest.approx(expected, rel=1e-12)
    assert all(g["lr"] == opt.param_groups[0]["lr"] for g in opt.param_groups)  # both groups scheduled


def test_scheduler_cosine_and_constant():
    opt = optimizer(1e-3)
    config = ScheduleConfig(name="cosine", warmup=5, total_steps=25, min_ratio=0.1)
    used = run(opt, build_scheduler(opt, config, d_model=64, lr=1e-3), 30)
    assert used[4] == pytest.approx(1e-3)  # peak at step warmup
    assert used[24] == pytest.approx(1e-4) and used[29] == pytest.approx(1e-4)  # floor at total and after
    opt = optimizer(0.5)
    used = run(opt, build_scheduler(opt, ScheduleConfig(name="constant", warmup=2), d_model=64, lr=0.5), 4)
    assert used == pytest.approx([0.25, 0.5, 0.5, 0.5])


def test_scheduler_state_round_trips():
    config = ScheduleConfig(name="cosine", warmup=3, total_steps=20)
    opt = optimizer(1e-3)
    sched = build_scheduler(opt, config, d_model=64, lr=1e-3)
    run(opt, sched, 7)
    opt_state, sched_state = opt.state_dict(), sched.state_dict()
    reference = run(opt, sched, 5)

    opt2 = optimizer(1e-3)
    sched2 = build_scheduler(opt2, config, d_model=64, lr=1e-3)
    opt2.load_state_dict(opt_state)
    sched2.load_state_dict(sched_state)
    assert run(opt2, sched2, 5) == reference
    assert reference[0] == pytest.approx(cosine_lr(8, peak=1e-3, warmup=3, total=20, min_ratio=0.0))


@pytest.mark.parametrize("kwargs,field", [
    (dict(name="linear"), "schedule.name"),
    (dict(warmup=0), "schedule.warmup"),
    (dict(warmup=-1, name="constant"), "schedule.warmup"),
    (dict(name="cosine", warmup=10), "schedule.total_steps"),
    (dict(name="cosine", warmup=10, total_steps=10), "schedule.total_steps"),
    (dict(min_ratio=1.5), "schedule.min_ratio"),
])
def test_bad_values_are_named(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ScheduleConfig(**kwargs)
