"""`TrainConfig`: the `train:` section of every recipe, what the loop (`loop.fit`) reads; checked when built."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tformer.configio import check_finite
from tformer.errors import UserError
from tformer.training import distributed as dist
from tformer.training.optim import OptimConfig
from tformer.training.precision import PRECISIONS
from tformer.training.schedules import ScheduleConfig

# torch.set_num_threads asks OpenMP for that many threads at once: a count the system cannot create aborts the
# process (libgomp "Thread creation failed", no Python exception), so train.threads is bounded; more threads
# than cores only slows a step down.
MAX_THREADS = 1024

@dataclass(kw_only=True)
class TrainConfig:
    seed: int = 0
    max_steps: int = 1000  # optimizer steps
    time_budget_min: float | None = None  # stop after this many minutes of training, whatever the step
    accum_steps: int = 1  # micro-batches per optimizer step (per rank under torchrun)
    label_smoothing: float = 0.1
    eval_every: int = 500
    log_every: int = 10
    save_every: int | None = None  # write `last` every this many steps; None: at each evaluation
    keep_last: int = 1  # `last` and the keep_last - 1 checkpoints before it (as step-NNNNNNNN/)
    max_bad_steps: int = 5  # steps in a row with a non-finite loss or gradient before the run stops
    distributed: str = "ddp"  # under torchrun: "ddp" (a replica per rank) or "fsdp" (fully sharded)
    device: str = "auto"  # "auto" (a GPU if torch sees one, else the CPU), "cpu", "cuda" or "cuda:N"
    precision: str = "auto"  # fp32, bf16 or fp16 (autocast, fp16 loss-scaled); auto: bf16 on a GPU with it, else fp32
    compile: bool = False  # run the training steps through torch.compile (evaluation and saving stay eager)
    threads: int | None = None  # torch's intra-op CPU threads; None: torch's default (one per core)
    tune_threads: bool = False  # retime 1, 2, 4 ... threads during training and keep the fastest (threads.py)
    best_metric: str = "valid_loss"  # chooses the `best` checkpoint; bleu, chrf, accuracy, agreement: higher is better
    patience: int | None = None  # stop after this many evaluations in a row without a better best_metric; None: never
    average_last: int | None = None  # also write out_dir/averaged: the mean weights of the last N evaluations
    tensorboard: bool = False  # also log to out_dir/tensorboard (needs the tensorboard package: tformer[tb])
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)

    def __post_init__(self) -> None:
        check_finite(self, where="train.")
        for name in ("max_steps", "accum_steps", "eval_every", "log_every", "keep_last", "max_bad_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"train.{name}={value!r} must be a positive integer")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**63:
            raise UserError(f"train.seed={self.seed!r} must be an integer in [0, 2**63) (torch and numpy seeds)")
        if self.threads is not None and (not isinstance(self.threads, int) or isinstance(self.threads, bool)
                                         or not 1 <= self.threads <= MAX_THREADS):
            raise UserError(f"train.threads={self.threads!r} must be an integer in [1, {MAX_THREADS}] or null "
                             "(torch's default: one per core)")
        for name in ("save_every", "patience", "average_last"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise UserError(f"train.{name}={value!r} must be a positive integer or null")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise UserError(f"train.label_smoothing={self.label_smoothing!r} must be in [0, 1)")
        if self.time_budget_min is not None and not self.time_budget_min > 0:
            raise UserError(f"train.time_budget_min={self.time_budget_min!r} must be > 0")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", str(self.device)):
            raise UserError(f"train.device={self.device!r} is not allowed; use auto, cpu, cuda or cuda:N")
        if self.precision not in PRECISIONS:
            raise UserError(f"train.precision={self.precision!r} is not allowed; choose one of {', '.join(PRECISIONS)}")
        if not isinstance(self.compile, bool):
            raise UserError(f"train.compile={self.compile!r} must be true or false")
        if self.distributed not in dist.STRATEGIES:
            allowed = ", ".join(dist.STRATEGIES)
            raise UserError(f"train.distributed={self.distributed!r} is not allowed; choose one of {allowed}")


__all__ = ["TrainConfig"]
