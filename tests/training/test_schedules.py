"""Learning-rate schedules: the paper's formula, cosine and linear endpoints, the schedules fitted to the end
of training (a time budget), and the LambdaLR built on them."""

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
    fitted_lr,
    inverse_sqrt_lr,
    linear_lr,
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


def test_linear_endpoints():
    kw = dict(peak=1e-3, warmup=10, total=110, min_ratio=0.1)
    assert linear_lr(5, **kw) == pytest.approx(5e-4)
    assert linear_lr(10, **kw) == pytest.approx(1e-3)
    assert linear_lr(60, **kw) == pytest.approx((1e-3 + 1e-4) / 2)  # half way down the line
    assert linear_lr(35, **kw) == pytest.approx(1e-3 - 0.25 * 9e-4)
    assert linear_lr(110, **kw) == pytest.approx(1e-4)
    assert linear_lr(500, **kw) == pytest.approx(1e-4)  # held at the floor after total


@pytest.mark.parametrize("decay", ["cosine", "linear"])
def test_fitted_closed_forms(decay):
    kw = dict(decay=decay, peak=1e-3, warmup=10, min_ratio=0.1)
    assert fitted_lr(5, 0.0, **kw) == pytest.approx(5e-4)  # the warm-up counts steps
    assert fitted_lr(10, 0.0, **kw) == fitted_lr(5000, 0.0, **kw) == pytest.approx(1e-3)
    assert fitted_lr(5, 0.5, **kw) == pytest.approx(0.5 * (1e-3 + 1e-4) / 2)  # ramp times the decay at p
    assert fitted_lr(50, 0.5, **kw) == pytest.approx((1e-3 + 1e-4) / 2)  # both shapes halve at p = 0.5
    quarter = {"cosine": 0.5 * (1 + math.cos(math.pi / 4)), "linear": 0.75}[decay]
    assert fitted_lr(50, 0.25, **kw) == pytest.approx(1e-4 + 9e-4 * quarter)
    assert fitted_lr(1, 0.3, **{**kw, "warmup": 0}) == fitted_lr(99, 0.3, **kw)  # no warm-up: the decay alone


@pytest.mark.parametrize("decay", ["cosine", "linear"])
def test_fitted_reaches_the_floor_when_the_budget_is_used_up(decay):
    kw = dict(decay=decay, peak=2e-3, warmup=10, min_ratio=0.05)
    assert fitted_lr(300, 1.0, **kw) == pytest.approx(1e-4)
    assert fitted_lr(300, 1.7, **kw) == pytest.approx(1e-4)  # past the end (the last step runs over): held
    lrs = [fitted_lr(300, p / 100, **kw) for p in range(101)]
    assert all(a > b for a, b in zip(lrs, lrs[1:], strict=False))


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


@pytest.mark.parametrize("name", ["cosine", "linear"])
def test_scheduler_without_total_steps_follows_progress(name):
    """The lr of step k is the fitted schedule at progress(k), whatever progress reads (the loop: its clock)."""
    clock = {"p": 0.0}
    opt = optimizer(1e-3)
    config = ScheduleConfig(name=name, warmup=2, min_ratio=0.2)
    sched = build_scheduler(opt, config, d_model=64, lr=1e-3, progress=lambda step: clock["p"])
    used = []
    for p in (0.0, 0.1, 0.1, 0.6, 1.0):
        clock["p"] = p
        opt.step()
        sched.step()  # the next step's lr, read at this progress
        used.append(opt.param_groups[0]["lr"])
    kw = dict(decay=name, peak=1e-3, warmup=2, min_ratio=0.2)
    assert used == pytest.approx([fitted_lr(k, p, **kw) for k, p in zip(range(2, 7), (0.0, 0.1, 0.1, 0.6, 1.0),
                                                                         strict=True)])
    assert used[-1] == pytest.approx(2e-4)  # the floor once the run is used up
    with pytest.raises(ValueError, match="needs progress"):
        build_scheduler(optimizer(1e-3), config, d_model=64, lr=1e-3)


def test_scheduler_linear_with_total_steps_counts_steps():
    opt = optimizer(1e-3)
    config = ScheduleConfig(name="linear", warmup=5, total_steps=25, min_ratio=0.1)
    used = run(opt, build_scheduler(opt, config, d_model=64, lr=1e-3, progress=lambda step: 1.0), 30)
    assert used == pytest.approx([linear_lr(s, peak=1e-3, warmup=5, total=25, min_ratio=0.1) for s in range(1, 31)])


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
    (dict(name="exponential"), "schedule.name"),
    (dict(warmup=0), "schedule.warmup"),
    (dict(warmup=-1, name="constant"), "schedule.warmup"),
    (dict(name="cosine", warmup=10, total_steps=10), "schedule.total_steps=10 must be > warmup=10 for the "
                                                     "cosine schedule, or null"),
    (dict(name="linear", warmup=10, total_steps=5), "schedule.total_steps=5 must be > warmup=10"),
    (dict(min_ratio=1.5), "schedule.min_ratio"),
])
def test_bad_values_are_named(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ScheduleConfig(**kwargs)


def test_cosine_and_linear_without_total_steps_decay_to_the_end_of_training():
    assert ScheduleConfig(name="cosine", warmup=10).total_steps is None
    assert ScheduleConfig(name="linear", warmup=0, min_ratio=0.1).total_steps is None
