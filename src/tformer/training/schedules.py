"""Learning-rate schedules, as pure functions of the step and as a `LambdaLR` over an optimizer.

The paper's schedule (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762, sec. 5.3, eq. 3):

    lr(step) = factor * d^-0.5 * min(step^-0.5, step * warmup^-1.5)

linear warm-up for `warmup` steps, then decay with the inverse square root of the step; the two branches
meet at step = warmup, the peak, factor * (d * warmup)^-0.5. Steps count from 1 (the first update).

Cosine (Loshchilov & Hutter 2017, https://arxiv.org/abs/1608.03983, without restarts): linear warm-up to
`peak`, then half a cosine down to min_ratio * peak at `total`, held there after.

Linear: linear warm-up to `peak`, then a straight line down to min_ratio * peak at `total`, held there after
(the shape of Hugging Face's `get_linear_schedule_with_warmup`).

Constant: linear warm-up to the base learning rate, then flat.

Fitted to the end of training (cosine or linear with `total_steps` null): a run that stops on a time budget
does not know its last step in advance, so the decay follows the run's progress p in [0, 1], the larger of
step / max_steps and elapsed seconds / budget seconds, which the loop supplies:

    lr(step, p) = peak * min(1, step / warmup) * decay(p)

with decay(p) the cosine or the line from 1 at p = 0 to min_ratio at p = 1. The warm-up counts steps; the
decay runs over the whole run (it has begun by the end of the warm-up: the highest lr is
peak * decay(p at step warmup)), and the lr reaches min_ratio * peak when the budget or max_steps is used up.

With `build_scheduler` the lr used by the k-th optimizer step (k = 1, 2, ...) is the schedule at step k:
build the scheduler before the first step and call `scheduler.step()` after every `optimizer.step()`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tformer.configio import check_finite
from tformer.errors import UserError

SCHEDULES = ("inverse_sqrt", "cosine", "linear", "constant")
DECAYING = ("cosine", "linear")  # the schedules that decay to an end: total_steps, or the end of training


@dataclass(kw_only=True)
class ScheduleConfig:
    name: str = "inverse_sqrt"
    warmup: int = 4000
    total_steps: int | None = None  # cosine, linear: the end of the decay; null: the end of training
    min_ratio: float = 0.0  # cosine, linear: the final lr as a fraction of the peak

    def __post_init__(self) -> None:
        check_finite(self, where="schedule.")
        if self.name not in SCHEDULES:
            allowed = ", ".join(SCHEDULES)
            raise UserError(f"schedule.name={self.name!r} is not allowed; choose one of {allowed}")
        if not _is_int(self.warmup) or self.warmup < 0:
            raise UserError(f"schedule.warmup={self.warmup!r} must be an integer >= 0")
        if self.name == "inverse_sqrt" and self.warmup < 1:
            raise UserError(f"schedule.warmup={self.warmup!r} must be >= 1 for the inverse_sqrt schedule")
        if self.total_steps is not None and (not _is_int(self.total_steps) or self.total_steps < 1):
            raise UserError(f"schedule.total_steps={self.total_steps!r} must be a positive integer or null")
        if self.name in DECAYING and self.total_steps is not None and self.total_steps <= self.warmup:
            raise UserError(f"schedule.total_steps={self.total_steps!r} must be > warmup={self.warmup} for the "
                             f"{self.name} schedule, or null to decay to the end of training")
        if not 0.0 <= self.min_ratio <= 1.0:
            raise UserError(f"schedule.min_ratio={self.min_ratio!r} must be in [0, 1]")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_step(step: int) -> None:
    if step < 1:
        raise UserError(f"step={step!r} must be >= 1 (steps count from 1)")


def inverse_sqrt_lr(step: int, *, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The paper's lr at `step` (from 1): factor * d^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    _check_step(step)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def cosine_decay(progress: float, *, peak: float, min_ratio: float) -> float:
    """Half a cosine from `peak` at progress 0 to min_ratio * peak at progress 1 (clamped to [0, 1])."""
    progress = min(1.0, max(0.0, progress))
    floor = min_ratio * peak
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def linear_decay(progress: float, *, peak: float, min_ratio: float) -> float:
    """A straight line from `peak` at progress 0 to min_ratio * peak at progress 1 (clamped to [0, 1])."""
    progress = min(1.0, max(0.0, progress))
    floor = min_ratio * peak
    return floor + (peak - floor) * (1.0 - progress)


DECAYS: dict[str, Callable[..., float]] = {"cosine": cosine_decay, "linear": linear_decay}


def cosine_lr(step: int, *, peak: float, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warm-up to `peak` at step `warmup`, then cosine decay to min_ratio * peak at step `total`."""
    _check_step(step)
    if step <= warmup:
        return peak * step / warmup
    return cosine_decay((step - warmup) / (total - warmup), peak=peak, min_ratio=min_ratio)


def linear_lr(step: int, *, peak: float, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warm-up to `peak` at step `warmup`, then linear decay to min_ratio * peak at step `total`."""
    _check_step(step)
    if step <= warmup:
        return peak * step / warmup
    return linear_decay((step - warmup) / (total - warmup), peak=peak, min_ratio=min_ratio)


def fitted_lr(step: int, progress: float, *, decay: str, peak: float, warmup: int, min_ratio: float) -> float:
    """The lr fitted to the end of training: peak * min(1, step / warmup) * decay(progress), where
    `progress` in [0, 1] is how much of the run (max_steps or the time budget) is used, and `decay` is
    "cosine" or "linear" (1 at progress 0, min_ratio at progress 1)."""
    _check_step(step)
    ramp = min(1.0, step / warmup) if warmup else 1.0
    return ramp * DECAYS[decay](progress, peak=peak, min_ratio=min_ratio)


def constant_lr(step: int, *, peak: float, warmup: int) -> float:
    """Linear warm-up to `peak` at step `warmup`, then `peak`."""
    _check_step(step)
    return peak * min(1.0, step / warmup) if warmup else peak


def build_scheduler(optimizer: torch.optim.Optimizer, config: ScheduleConfig, *, d_model: int, lr: float,
                    progress: Callable[[int], float] | None = None) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR that sets each group's lr to the schedule, given the optimizer's base lr `lr`
    (`OptimConfig.lr`: the paper schedule's factor, or the cosine / linear / constant peak).

    `progress(step)`, in [0, 1], is how much of the run is used when `step` starts (the training loop
    passes one that reads its clock); cosine and linear without total_steps decay along it, and need it.

    LambdaLR multiplies each group's base lr by lambda(k), k = scheduler steps so far, so lambda(k) is the
    schedule at step k + 1 divided by `lr`. The lambda is a closure, which LambdaLR leaves out of its state
    dict: the state dict holds only the step count and base lrs, and round-trips for resuming."""
    if not lr > 0:
        raise UserError(f"lr={lr!r} must be > 0")
    fitted = config.name in DECAYING and config.total_steps is None
    if fitted and progress is None:
        raise UserError(f"schedule {config.name!r} with total_steps=None decays to the end of training and "
                         "needs progress (the training loop gives it); or set schedule.total_steps")

    def schedule(step: int) -> float:
        if config.name == "inverse_sqrt":
            return inverse_sqrt_lr(step, d_model=d_model, warmup=config.warmup, factor=lr)
        if fitted:
            return fitted_lr(step, progress(step), decay=config.name, peak=lr, warmup=config.warmup,
                             min_ratio=config.min_ratio)
        if config.name in DECAYING:
            by_steps = cosine_lr if config.name == "cosine" else linear_lr
            return by_steps(step, peak=lr, warmup=config.warmup, total=config.total_steps,
                            min_ratio=config.min_ratio)
        return constant_lr(step, peak=lr, warmup=config.warmup)

    def multiplier(k: int) -> float:
        return schedule(k + 1) / lr

    return torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)


__all__ = [
    "SCHEDULES", "ScheduleConfig", "build_scheduler", "constant_lr", "cosine_decay", "cosine_lr", "fitted_lr",
    "inverse_sqrt_lr", "linear_decay", "linear_lr",
]
