"""The training loop, shared by every task: micro-batches accumulated into one optimizer step, losses
normalised by the token count of the whole step, clipping, the schedule, logging (progress bar, JSONL,
TensorBoard when installed), periodic evaluation, and the last and best checkpoints, from which a run
resumes exactly (weights, optimizer, schedule, every RNG and the position in the data order).

A task supplies the data and the loss; see `Task`.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from tqdm import tqdm

from tformer.config import TransformerConfig
from tformer.training.checkpoint import load_training_state, save_checkpoint
from tformer.training.optim import OptimConfig, build_optimizer
from tformer.training.schedules import ScheduleConfig, build_scheduler


@dataclass(kw_only=True)
class TrainConfig:
    seed: int = 0
    max_steps: int = 1000  # optimizer steps
    time_budget_min: float | None = None  # stop after this many minutes of training, whatever the step
    accum_steps: int = 1  # micro-batches per optimizer step
    label_smoothing: float = 0.1
    eval_every: int = 500
    log_every: int = 10
    best_metric: str = "valid_loss"  # chooses the `best` checkpoint; "bleu" and "accuracy" count higher as better
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)

    def __post_init__(self) -> None:
        for name in ("max_steps", "accum_steps", "eval_every", "log_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"train.{name}={value!r} must be a positive integer")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"train.label_smoothing={self.label_smoothing!r} must be in [0, 1)")
        if self.time_budget_min is not None and not self.time_budget_min > 0:
            raise ValueError(f"train.time_budget_min={self.time_budget_min!r} must be > 0")


HIGHER_IS_BETTER = ("bleu", "chrf", "accuracy")


class Task(Protocol):
    """What the loop needs from a task (translation, language modelling, BERT)."""

    def batches(self, epoch: int) -> list[Any]:
        """The micro-batches of one epoch, in a fixed order for (seed, epoch)."""

    def n_tokens(self, batch: Any) -> int:
        """Target tokens in a micro-batch (the loss normaliser)."""

    def loss(self, model: nn.Module, batch: Any) -> Tensor:
        """The loss summed over the batch's target tokens."""

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Validation metrics, e.g. valid_loss, bleu."""


def fit(model: nn.Module, config: TransformerConfig, task: Task, train: TrainConfig, *, out_dir: Path,
        tokenizer: Any = None, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train `model` on `task` and return the final state (step, metrics). Writes out_dir/metrics.jsonl,
    out_dir/last and out_dir/best checkpoints."""
    out_dir = Path(out_dir)
    optimizer = build_optimizer(model, train.optim)
    scheduler = build_scheduler(optimizer, train.schedule, d_model=config.d_model, lr=train.optim.lr)
    state: dict[str, Any] = {"step": 0, "epoch": 0, "batch": 0, "best": None, "elapsed": 0.0}
    if resume:
        if not (out_dir / "last").is_dir():
            raise ValueError(f"cannot resume: no checkpoint at {out_dir / 'last'}")
        state.update(load_training_state(out_dir / "last", optimizer=optimizer, scheduler=scheduler,
                                         model=model))
    else:
        torch.manual_seed(train.seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = Logger(out_dir, append=resume)  # a fresh run starts a fresh log
    epoch_batches = task.batches(state["epoch"])

    def next_batches(n: int) -> list[Any]:
        nonlocal epoch_batches
        taken = []
        while len(taken) < n:
            if state["batch"] >= len(epoch_batches):
                state["epoch"], state["batch"] = state["epoch"] + 1, 0
                epoch_batches = task.batches(state["epoch"])
            taken.append(epoch_batches[state["batch"]])
            state["batch"] += 1
        return taken

    def save(name: str) -> None:
        save_checkpoint(out_dir / name, model=model, config=config, optimizer=optimizer, scheduler=scheduler,
                        state=dict(state), tokenizer=tokenizer)

    bar = tqdm(total=train.max_steps, initial=state["step"], disable=not progress, dynamic_ncols=True)
    started, tokens_seen, window_start = time.perf_counter() - state["elapsed"], 0, time.perf_counter()
    model.train()
    while state["step"] < train.max_steps:
        micro = next_batches(train.accum_steps)
        total = sum(task.n_tokens(b) for b in micro)
        mean_loss, grad_norm = _step(model, task, micro, total, optimizer, clip_norm=train.optim.clip_norm)
        scheduler.step()
        state["step"] += 1
        state["elapsed"] = time.perf_counter() - started
        tokens_seen += total
        bar.update(1)
        if state["step"] % train.log_every == 0 or state["step"] == train.max_steps:
            now = time.perf_counter()
            rate = tokens_seen / max(now - window_start, 1e-9)
            tokens_seen, window_start = 0, now
            record = {"step": state["step"], "loss": mean_loss, "lr": scheduler.get_last_lr()[0],
                      "grad_norm": grad_norm, "tokens_per_s": rate, "elapsed_s": state["elapsed"]}
            log.write(record)
            bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}", tok_s=f"{rate:.0f}")
        out_of_time = train.time_budget_min is not None and state["elapsed"] >= 60 * train.time_budget_min
        if state["step"] % train.eval_every == 0 or state["step"] == train.max_steps or out_of_time:
            _evaluate(model, task, train, state, log, save)
            model.train()
            window_start = time.perf_counter()  # tokens/s counts training time only
        if out_of_time:
            break
    bar.close()
    log.close()
    model.eval()
    return state


def _step(model: nn.Module, task: Task, micro: list[Any], total: int, optimizer: torch.optim.Optimizer, *,
          clip_norm: float | None) -> tuple[float, float]:
    """One optimizer step over the micro-batches: each loss (a sum over its tokens) is divided by the token
    count of all of them, so the gradient equals that of one big batch's mean. Returns (mean loss, grad norm)."""
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for batch in micro:
        loss = task.loss(model, batch)
        (loss / total).backward()
        loss_sum += loss.item()
    grad_norm = _clip(model, clip_norm)
    optimizer.step()
    return loss_sum / total, grad_norm


def _evaluate(model: nn.Module, task: Task, train: TrainConfig, state: dict, log: Logger, save: Any) -> None:
    model.eval()
    metrics = task.evaluate(model)
    log.write({"step": state["step"], **{f"eval/{k}": v for k, v in metrics.items()}})
    value = metrics.get(train.best_metric)
    if value is not None and math.isfinite(value):
        sign = 1.0 if train.best_metric in HIGHER_IS_BETTER else -1.0
        if state["best"] is None or sign * value > sign * state["best"]:
            state["best"] = value
            save("best")
    state["metrics"] = metrics
    save("last")


def _clip(model: nn.Module, clip_norm: float | None) -> float:
    params = [p for p in model.parameters() if p.grad is not None]
    if clip_norm is None:
        return float(torch.norm(torch.stack([p.grad.norm() for p in params]))) if params else 0.0
    return float(torch.nn.utils.clip_grad_norm_(params, clip_norm))


class Logger:
    """Metrics to out_dir/metrics.jsonl, one JSON object a line, and to TensorBoard when it is installed."""

    def __init__(self, out_dir: Path, *, append: bool) -> None:
        self.file = open(out_dir / "metrics.jsonl", "a" if append else "w")  # noqa: SIM115
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out_dir / "tensorboard"))
        except ImportError:  # tensorboard is optional
            self.tb = None

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float):
                    self.tb.add_scalar(key, value, record["step"])

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()
