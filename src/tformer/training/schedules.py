"""Learning-rate schedules, as pure functions of the step and as a `LambdaLR` over an optimizer.

The paper's schedule (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762, sec. 5.3, eq. 3):

    lr(step) = factor * d^-0.5 * min(step^-0.5, step * warmup^-1.5)

linear warm-up for `warmup` steps, then decay with the inverse square root of the step; the two branches
meet at step = warmup, the peak, factor * (d * warmup)^-0.5. Steps count from 1 (the first update).

Cosine (Loshchilov & Hutter 2017, https://arxiv.org/abs/1608.03983, without restarts): linear warm-up to
`peak`, then half a cosine down to min_ratio * peak at `total`, held there after.

Constant: linear warm-up to the base learning rate, then flat.

With `build_scheduler` the lr used by the k-th optimizer step (k = 1, 2, ...) is the schedule at step k:
build the scheduler before the first step and call `scheduler.step()` after every `optimizer.step()`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SCHEDULES = ("inverse_sqrt", "cosine", "constant")


@dataclass(kw_only=True)
class ScheduleConfig:
    name: str = "inverse_sqrt"
    warmup: int = 4000
    total_steps: int | None = None  # the end of the cosine decay; needed by "cosine" only
    min_ratio: float = 0.0  # cosine: the final lr as a fraction of the peak

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            allowed = ", ".join(SCHEDULES)
            raise ValueError(f"schedule.name={self.name!r} is not allowed; choose one of {allowed}")
        if not _is_int(self.warmup) or self.warmup < 0:
            raise ValueError(f"schedule.warmup={self.warmup!r} must be an integer >= 0")
        if self.name == "inverse_sqrt" and self.warmup < 1:
            raise ValueError(f"schedule.warmup={self.warmup!r} must be >= 1 for the inverse_sqrt schedule")
        if self.total_steps is not None and (not _is_int(self.total_steps) or self.total_steps < 1):
            raise ValueError(f"schedule.total_steps={self.total_steps!r} must be a positive integer or null")
        if self.name == "cosine" and (self.total_steps is None or self.total_steps <= self.warmup):
            raise ValueError(
                f"schedule.total_steps={self.total_steps!r} must be set and > warmup={self.warmup} "
                "for the cosine schedule"
            )
        if not 0.0 <= self.min_ratio <= 1.0:
            raise ValueError(f"schedule.min_ratio={self.min_ratio!r} must be in [0, 1]")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_step(step: int) -> None:
    if step < 1:
        raise ValueError(f"step={step!r} must be >= 1 (steps count from 1)")


def inverse_sqrt_lr(step: int, *, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The paper's lr at `step` (from 1): factor * d^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    _check_step(step)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def cosine_lr(step: int, *, peak: float, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warm-up to `peak` at step `warmup`, then cosine decay to min_ratio * peak at step `total`."""
    _check_step(step)
    if step <= warmup:
        return peak * step / warmup
    progress = min(1.0, (step - warmup) / (total - warmup))
    floor = min_ratio * peak
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def constant_lr(step: int, *, peak: float, warmup: int) -> float:
    """Linear warm-up to `peak` at step `warmup`, then `peak`."""
    _check_step(step)
    return peak * min(1.0, step / warmup) if warmup else peak


def build_scheduler(optimizer: torch.optim.Optimizer, config: ScheduleConfig, *, d_model: int,
                    lr: float) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR that sets each group's lr to the schedule, given the optimizer's base lr `lr`
    (`OptimConfig.lr`: the paper schedule's factor, or the cosine / constant peak).

    LambdaLR multiplies each group's base lr by lambda(k), k = scheduler steps so far, so lambda(k) is the
    schedule at step k + 1 divided by `lr`. The lambda is a closure, which LambdaLR leaves out of its state
    dict: the state dict holds only the step count and base lrs, and round-trips for resuming."""
    if not lr > 0:
        raise ValueError(f"lr={lr!r} must be > 0")

    def schedule(step: int) -> float:
        if config.name == "inverse_sqrt":
            return inverse_sqrt_lr(step, d_model=d_model, warmup=config.warmup, factor=lr)
        if config.name == "cosine":
            return cosine_lr(step, peak=lr, warmup=config.warmup, total=config.total_steps,
                             min_ratio=config.min_ratio)
        return constant_lr(step, peak=lr, warmup=config.warmup)

    def multiplier(k: int) -> float:
        return schedule(k + 1) / lr

    return torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)


__all__ = [
    "SCHEDULES", "ScheduleConfig", "build_scheduler", "constant_lr", "cosine_lr", "inverse_sqrt_lr",
]
