"""The training loop, shared by every task: micro-batches accumulated into one optimizer step, losses
normalised by the token count of the whole step, clipping, the schedule, logging (progress bar, JSONL,
TensorBoard when installed), periodic evaluation, and the last and best checkpoints, from which a run
resumes exactly (weights, optimizer, schedule, every RNG and the position in the data order).

Work is never lost: checkpoints are atomic and verified (`checkpoint.py`); SIGINT and SIGTERM save `last`
at the end of the step and return (`interrupts.py`); `save_every` bounds what a SIGKILL loses. A step with
a non-finite loss or gradient is skipped and reported; `max_bad_steps` in a row stop the run. Under
torchrun the same loop trains data-parallel (`distributed.py`); only rank 0 writes. `train.precision`
runs the steps under autocast (bf16, or fp16 with a loss scaler whose overflow retries are not bad steps:
`precision.py`); `train.compile` runs them through torch.compile, the loss with the model; evaluation runs
eager, in float32.

A task supplies the data and the loss; see `Task`. The settings are `TrainConfig` (`config.py`), the log
`Logger` (`logger.py`), the run's checkpoints and resuming from them `resume.py`.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from tqdm import tqdm

from tformer.checkpoints import load_weights
from tformer.config import TransformerConfig
from tformer.data.device import device_of, resolve_device, tensors_in, to_device
from tformer.errors import UserError
from tformer.runs import BEST, LAST, RunDir
from tformer.tokenization import Tokenizer
from tformer.training import distributed as dist
from tformer.training.compiling import check_compilable
from tformer.training.config import TrainConfig
from tformer.training.interrupts import Interrupts
from tformer.training.logger import Logger
from tformer.training.memory import keep_freed_memory
from tformer.training.optim import build_optimizer
from tformer.training.precision import Precision, tf32_matmuls
from tformer.training.progress import ProgressBar, Throughput
from tformer.training.resume import Checkpoints, check_resumable, restore, set_next_lr
from tformer.training.schedules import build_scheduler
from tformer.training.threads import ThreadTuner, training_threads

HIGHER_IS_BETTER = ("bleu", "chrf", "accuracy", "agreement")


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
        tokenizer: Tokenizer | None = None, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train `model` on `task` and return the final state (step, elapsed seconds, metrics, `stopped`: why
    it stopped, "max_steps", "time budget" or the signal's name, and `interrupted`: the signal's name if
    SIGINT or SIGTERM stopped it). Writes out_dir/metrics.jsonl and the out_dir/last and out_dir/best
    checkpoints (`runs.RunDir` names them); the recipe beside them is the caller's to write."""
    run = _start(model, config, task, train, out_dir=Path(out_dir), tokenizer=tokenizer, resume=resume)
    run.echo = run.world.is_main and not progress  # no bar to show the metrics: print them, for batch jobs
    bar = ProgressBar(run.state, max_steps=train.max_steps, budget_min=train.time_budget_min,
                      enabled=progress and run.world.is_main, lines=run.echo)
    if run.world.is_main:
        print(budget_line(run.state["step"], train), flush=True)
    run.model.train()
    with Interrupts() as stop:
        _train(run, task, train, data=run.data, bar=bar, stop=stop)
    run.state.setdefault("stopped", "max_steps")  # resumed at or past max_steps: nothing was left to do
    bar.close()
    if run.log is not None:
        run.log.close()
    dist.teardown(run.world)
    run.model.eval()
    return run.state


@dataclass
class _Run:
    """What one call of `fit` holds while it trains."""

    model: nn.Module  # the model trained (under torchrun: wrapped for DDP or FSDP)
    whole: nn.Module  # the model evaluated and saved
    loss_of: Callable[[Any], Tensor]  # a micro-batch (on the device) -> the task's loss of `model` on it
    data: EpochReader  # the run's place in the data order (in `state`)
    precision: Precision
    world: dist.World
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    state: dict[str, Any]  # step, epoch, batch, best, elapsed, metrics, stopped: what a checkpoint records
    log: Logger | None  # rank 0 only
    checkpoints: Checkpoints
    out_dir: Path
    echo: bool = False  # print each evaluation's metrics as one line on stdout (the progress bar is off)


def _start(model: nn.Module, config: TransformerConfig, task: Task, train: TrainConfig, *, out_dir: Path,
           tokenizer: Tokenizer, resume: bool) -> _Run:
    """Place the model, wrap it under torchrun, build the optimizer and schedule, and on `resume` restore
    them and the loop state from out_dir/last; open the log (rank 0)."""
    keep_freed_memory()  # every step reuses the pages of the step before (see memory.py)
    world = dist.launched_world()
    device = resolve_device(train.device, local_rank=world.local_rank)  # under torchrun: this rank's GPU
    precision = Precision(train.precision, device, fsdp=world.is_distributed and train.distributed == "fsdp")
    if train.compile:
        check_compilable(device)  # a missing compiler: refused now, not with torch's traceback at the first step
    model.to(device)
    if resume:
        check_resumable(out_dir, config, train)
        load_weights(model, RunDir(out_dir).last)  # before wrapping, so every rank starts from the same weights
    else:
        torch.manual_seed(train.seed + world.rank)  # rank 0 draws as a single process would
    model, whole, world = dist.setup(model, train.distributed)  # train `model`, evaluate and save `whole`
    optimizer = build_optimizer(model, train.optim)
    state: dict[str, Any] = {"step": 0, "epoch": 0, "batch": 0, "best": None, "elapsed": 0.0}
    scheduler = build_scheduler(optimizer, train.schedule, d_model=config.d_model, lr=train.optim.lr,
                                progress=lambda step: run_progress(step, state["elapsed"], train))
    if resume:
        state.update(restore(RunDir(out_dir).last, model, optimizer, scheduler, train, world, scaler=precision.scaler))
        set_next_lr(optimizer, scheduler)
    log = (Logger(out_dir, resume_at=state["step"] if resume else None, tensorboard=train.tensorboard)
           if world.is_main else None)
    checkpoints = Checkpoints(out_dir, model=model, whole=whole, optimizer=optimizer, scheduler=scheduler,
                              config=config, tokenizer=tokenizer, train=train, world=world,
                              last_step=state["step"] if resume else None, scaler=precision.scaler)
    data = EpochReader(task, state)
    return _Run(model=model, whole=whole, loss_of=_loss_of(task, model, train.compile, world, batches=data.batches),
                data=data, precision=precision, world=world, optimizer=optimizer, scheduler=scheduler, state=state,
                log=log, checkpoints=checkpoints, out_dir=out_dir)


def _loss_of(task: Task, model: nn.Module, compile: bool, world: dist.World, *,
             batches: Sequence[Any] = ()) -> Callable[[Any], Tensor]:
    """The steps' loss of a micro-batch. With `compile`, one torch.compile of the forward and the loss
    together, so that the loss's log-softmax over the vocabulary fuses with the output layer instead of
    materialising (tokens, V) float32 tensors (as nanoGPT, whose model returns its loss); under torchrun the
    wrapped model alone is compiled, the way torch.compile documents for DDP and FSDP. Either way `model`'s
    own module is called, and `whole` stays eager, so saved keys have no `_orig_mod.`.

    Compiled once: the dims that differ between `batches` (an epoch's; for translation, the batch size and
    the lengths) are marked dynamic from the first step, where torch would compile for the first shape and
    again, dynamic, at the second (each compilation a minute of a GPU's budget). Tasks whose batches all
    have one shape keep static shapes."""
    if not compile:
        return lambda batch: task.loss(model, batch)
    if world.is_distributed:
        compiled = torch.compile(model)
        return lambda batch: task.loss(compiled, batch)
    compiled = torch.compile(lambda batch: task.loss(model, batch))
    dynamic = varying_dims(batches)
    if not any(dynamic):
        return compiled

    def loss(batch: Any) -> Tensor:
        for tensor, dims in zip(tensors_in(batch), dynamic, strict=False):
            for dim in dims:
                torch._dynamo.maybe_mark_dynamic(tensor, dim)  # no error where a size must stay static
        return compiled(batch)

    return loss


def varying_dims(batches: Sequence[Any]) -> list[list[int]]:
    """For each tensor of a batch (`tensors_in` order), the dims whose size is not the same in all `batches`."""
    shapes = [[t.shape for t in tensors_in(b)] for b in batches]
    if not shapes:
        return []
    return [[d for d in range(len(shape)) if any(len(other) > i and other[i][d:d + 1] != shape[d:d + 1]
                                                 for other in shapes)]
            for i, shape in enumerate(shapes[0])]


def _train(run: _Run, task: Task, train: TrainConfig, *, data: EpochReader, bar: ProgressBar,
           stop: Interrupts) -> None:
    """Optimizer steps until max_steps, the time budget or a signal; sets state["stopped"] (and
    state["interrupted"] for a signal). A step with a non-finite loss or gradient is skipped, not counted.
    `train.threads` / `tune_threads` set torch's CPU threads for the steps (threads.py); on a GPU, float32
    matmuls use TF32 (precision.py)."""
    device = device_of(run.model)
    if train.compile and run.world.is_main and run.state["step"] < train.max_steps:  # else the bar sits at 0
        tqdm.write("tformer: train.compile: the first step compiles the model and its loss (torch.compile; a "
                   "minute or more on a cold cache, counted in the time budget)", file=sys.stderr)
    with training_threads(train.threads, train.tune_threads, on_cpu=device.type == "cpu") as tuner, \
            tf32_matmuls(device):
        _steps(run, task, train, data=data, bar=bar, stop=stop, tuner=tuner)


def _steps(run: _Run, task: Task, train: TrainConfig, *, data: EpochReader, bar: ProgressBar, stop: Interrupts,
           tuner: ThreadTuner | None) -> None:
    state, world = run.state, run.world
    started, window = time.perf_counter() - state["elapsed"], Throughput(time.perf_counter)
    bad_steps: list[int] = []
    while state["step"] < train.max_steps:
        micro = dist.shard(data.take(train.accum_steps * world.size), world)
        if tuner is not None:
            tuner.before_step()
        step_started, scale = time.perf_counter(), run.precision.scale()
        mean_loss, total, grad_norm = _step(run.model, task, micro, run.optimizer, clip_norm=train.optim.clip_norm,
                                            world=world, precision=run.precision, loss_of=run.loss_of)
        if tuner is not None:
            tuner.after_step(total, time.perf_counter() - step_started)
        finite = math.isfinite(mean_loss) and math.isfinite(grad_norm)
        if not finite and run.precision.retried(mean_loss, scale):
            if run.log is not None:  # fp16's loss scaler backed off: expected, retried, not a bad step
                run.log.write({"step": state["step"] + 1, "skipped": f"fp16 gradient overflow at loss scale {scale:g}"})
            continue
        if not finite:
            bad_steps.append(state["step"] + 1)
            _report_bad_step(bad_steps, mean_loss, grad_norm, train, run.log, run.out_dir)
            continue
        bad_steps.clear()
        state["step"] += 1
        window.add(total)
        # the ranks agree on the time and on stopping (the latest clock and any signal decide for all)
        state["elapsed"], signum = dist.all_reduce([time.perf_counter() - started, float(stop.signal or 0)],
                                                   world, op="max")
        lr = run.scheduler.get_last_lr()[0]  # the lr this step used
        run.scheduler.step()  # the next step's lr, from the step count and the clock just read
        rate = None
        if run.log is not None and (state["step"] % train.log_every == 0 or state["step"] == train.max_steps):
            rate = window.rate()
            window.restart()
            record = {"step": state["step"], "loss": mean_loss, "lr": lr, "grad_norm": grad_norm,
                      "tokens_per_s": rate, "elapsed_s": state["elapsed"]}
            if run.precision.scaler.is_enabled():
                record["loss_scale"] = scale
            run.log.write(record if tuner is None else {**record, "threads": tuner.threads})
        bar.show(state, loss=mean_loss, lr=lr, tokens_per_s=rate)
        if _evaluate_or_stop(run, task, train, window=window, signum=int(signum), stop=stop):
            break


def _evaluate_or_stop(run: _Run, task: Task, train: TrainConfig, *, window: Throughput, signum: int,
                      stop: Interrupts) -> bool:
    """After a counted step: evaluate (and save) when due, else save `last` when due; True when the run
    stops here, with the reason in state["stopped"]."""
    state = run.state
    out_of_time = train.time_budget_min is not None and state["elapsed"] >= 60 * train.time_budget_min
    done = state["step"] == train.max_steps or out_of_time
    if state["step"] % train.eval_every == 0 or done:
        dist.refresh(run.whole, run.model)
        _evaluate(run.whole, task, train, state, run.log, run.checkpoints, echo=run.echo)
        run.model.train()
        window.restart()  # tokens/s counts training time only
    elif train.save_every is not None and state["step"] % train.save_every == 0:
        run.checkpoints.save(LAST, state)
    if done:
        state["stopped"] = "max_steps" if state["step"] == train.max_steps else "time budget"
        return True
    if train.patience is not None and state.get("evals_since_best", 0) >= train.patience:
        state["stopped"], state["patience_metric"] = "patience", train.best_metric  # `best`: where it stopped improving
        return True
    if signum:
        with stop.shielded():  # a second Ctrl-C now would only lose the step the first one saves
            run.checkpoints.save(LAST, state)
        state["interrupted"] = state["stopped"] = signal.Signals(signum).name
        return True
    return False


def run_progress(step: int, elapsed: float, train: TrainConfig) -> float:
    """How much of the run is used when `step` starts, `elapsed` seconds in: the larger of step / max_steps
    and elapsed / the time budget, so 1 at whichever end comes first (what a schedule fitted to the end of
    training decays along)."""
    used = step / train.max_steps
    if train.time_budget_min is not None:
        used = max(used, elapsed / (60.0 * train.time_budget_min))
    return min(1.0, used)


def budget_line(step: int, train: TrainConfig) -> str:
    """What ends the run, said as it starts: e.g. `training from step 0 until step 100000 (train.max_steps) or
    2 min (train.time_budget_min; the clock runs from the first step and counts the evaluations, not the
    set-up before it)`."""
    line = f"training from step {step} until step {train.max_steps} (train.max_steps)"
    if train.time_budget_min is not None:
        line += (f" or {train.time_budget_min:g} min (train.time_budget_min; the clock runs from the first step "
                 "and counts the evaluations, not the set-up before it)")
    return line


def eval_line(step: int, elapsed: float, metrics: dict[str, float]) -> str:
    """One evaluation as one line, e.g. `eval step 500 (3.2 min): valid_loss 2.3456, bleu 12.3400`."""
    return f"eval step {step} ({elapsed / 60:.1f} min): " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())


def stop_summary(state: dict[str, Any]) -> str:
    """One line for the person who ran it: e.g. `stopped at step 1234 after 20.0 min: time budget reached`."""
    reason = state.get("stopped", "max_steps")
    why = f"{reason} reached" if reason in ("max_steps", "time budget") else f"{reason} received"
    if reason == "patience":
        why = (f"patience reached ({state.get('evals_since_best')} evaluations without a better "
               f"{state.get('patience_metric')})")
    return f"stopped at step {state['step']} after {state['elapsed'] / 60:.1f} min: {why}"


class EpochReader:
    """The loop's position in the data order, kept in `state` (epoch, batch index within it) so that a
    checkpoint records it: `take(n)` returns the next n micro-batches, running into the next epoch."""

    def __init__(self, task: Task, state: dict[str, Any]) -> None:
        self.task, self.state = task, state
        self.batches = task.batches(state["epoch"])

    def take(self, n: int) -> list[Any]:
        taken, state = [], self.state
        while len(taken) < n:
            if state["batch"] >= len(self.batches):
                state["epoch"], state["batch"] = state["epoch"] + 1, 0
                self.batches = self.task.batches(state["epoch"])
            taken.append(self.batches[state["batch"]])
            state["batch"] += 1
        return taken


def _step(model: nn.Module, task: Task, micro: list[Any], optimizer: torch.optim.Optimizer, *,
          clip_norm: float | None, world: dist.World, precision: Precision | None = None,
          loss_of: Callable[[Any], Tensor] | None = None) -> tuple[float, int, float]:
    """One optimizer step of `model` over this rank's micro-batches: each loss, `loss_of(batch)` (the task's
    loss of `model`, a sum over its tokens; the run's is compiled with train.compile, see `_loss_of`; default
    `task.loss(model, batch)`), is divided by the token count of the whole step on every rank, so the gradient
    equals that of one big batch's mean however the tokens are split. (DDP averages the ranks' gradients,
    hence the factor world.size.) Returns (mean loss, tokens, gradient norm); the optimizer does not step if
    either is not finite. Forward and loss run under `precision`'s autocast (default: float32); under fp16
    the loss is scaled before backward and the gradients unscaled before clipping, and the scaler's scale
    updated."""
    precision = precision or Precision("fp32", device_of(model))
    loss_of = loss_of or _loss_of(task, model, False, world)
    scaler = precision.scaler  # disabled (a pass-through) unless fp16
    optimizer.zero_grad(set_to_none=True)
    device = device_of(model)
    local = sum(task.n_tokens(b) for b in micro)
    total = int(dist.all_reduce([float(local)], world)[0])
    losses = []
    for i, batch in enumerate(micro):
        last = i == len(micro) - 1
        with nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync():  # all-reduce once
            with precision.autocast():
                loss = loss_of(to_device(batch, device))
            scaler.scale(loss / total * world.size).backward()
        losses.append(loss.detach().double())
    scaler.unscale_(optimizer)
    norm = _clip(model, clip_norm)
    # the host reads the device once a step, here: on a GPU each read waits for everything queued before it
    loss_sum, grad_norm = torch.stack([sum(losses), norm.to(losses[0].device, torch.float64)]).tolist()
    loss_sum = dist.all_reduce([loss_sum], world)[0]
    if math.isfinite(loss_sum) and math.isfinite(grad_norm):
        scaler.step(optimizer)
    scaler.update()  # an overflow (non-finite gradient) halves the scale
    return loss_sum / total, total, grad_norm


def _report_bad_step(bad_steps: list[int], loss: float, grad_norm: float, train: TrainConfig,
                     log: Logger | None, out_dir: Path) -> None:
    step = bad_steps[-1]
    what = f"loss {loss}" if not math.isfinite(loss) else f"gradient norm {grad_norm}"
    if log is not None:
        log.write({"step": step, "skipped": what})
        tqdm.write(f"tformer: step {step} skipped: non-finite {what}", file=sys.stderr)
    if len(bad_steps) >= train.max_bad_steps:
        raise UserError(f"stopping at step {step}: {len(bad_steps)} tries in a row had a non-finite loss or "
                           f"gradient (train.max_bad_steps={train.max_bad_steps}); lower optim.lr or lengthen the "
                           f"warm-up; {_saved(out_dir)}")


def _saved(out_dir: Path) -> str:
    """Where the run's work is kept, for a message: `last` only if it exists."""
    last = RunDir(out_dir).last
    return f"the last checkpoint is {last}" if last.is_dir() else "no checkpoint was saved (none was due yet)"


def _evaluate(model: nn.Module, task: Task, train: TrainConfig, state: dict, log: Logger | None,
              checkpoints: Checkpoints, *, echo: bool = False) -> None:
    """Every rank evaluates the whole model (identical metrics, so that the ranks agree on `best`); with
    `echo`, the metrics are printed as one line on stdout (`eval_line`)."""
    model.eval()
    try:
        metrics = task.evaluate(model)
    except Exception as e:  # keep the steps trained so far; --resume continues once the cause is fixed
        checkpoints.save(LAST, state)
        note = (f"the evaluation at step {state['step']} failed; the steps trained so far are saved in "
                f"{RunDir(checkpoints.out_dir).last}")
        if hasattr(e, "add_note"):  # Python 3.11+ prints it under the traceback; 3.10 has no notes
            e.add_note(note)
        raise
    if log is not None:
        log.write({"step": state["step"], **{f"eval/{k}": v for k, v in metrics.items()}})
    if echo:
        print(eval_line(state["step"], state["elapsed"], metrics), flush=True)
    value = metrics.get(train.best_metric)
    state["metrics"] = metrics
    if value is not None:  # a metric the task does not report never runs out of patience
        state["evals_since_best"] = state.get("evals_since_best", 0) + 1
    if value is not None and math.isfinite(value):
        sign = 1.0 if train.best_metric in HIGHER_IS_BETTER else -1.0
        if state["best"] is None or sign * value > sign * state["best"]:
            state["best"], state["evals_since_best"] = value, 0
            checkpoints.save(BEST, state)
    if train.average_last is not None:  # before `last`: a run resumed from `last` has every evaluation kept
        checkpoints.save_average(state, train.average_last)
    checkpoints.save(LAST, state)


def _clip(model: nn.Module, clip_norm: float | None) -> Tensor:
    """Clip the global gradient norm to `clip_norm` (None: only measure it); returns the norm before, a ()
    tensor on the gradients' device (read by the caller with the loss, in one transfer)."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return torch.zeros(())
    norm = torch.nn.utils.clip_grad_norm_(params, clip_norm if clip_norm is not None else math.inf)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm
