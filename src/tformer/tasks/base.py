"""What every task shares: the model part of a recipe, and the skeleton a task's training runs through
(loading a trained checkpoint for use is `tformer.inference`'s).

A task (translation, lm, bert, classify) keeps its own part in its module: its data, its batches and loss
(a `training.loop.Task`), how it builds its model and tokenizer (`setup`), and what it does once trained
(`finish`: samples, test scores). `run_task` does the rest the same way for all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
import yaml
from torch import Tensor, nn

from tformer.checkpoints import TRAINER_FILE, tokenizer_dir
from tformer.config import ModelConfig
from tformer.configio import check_choice, dump_yaml, flat_keys, parse_yaml, read_yaml, shown, to_dict
from tformer.data.device import device_of, to_device
from tformer.errors import UserError
from tformer.models.calc import model_summary
from tformer.runs import RunDir
from tformer.tokenization import Tokenizer, load_tokenizer
from tformer.training.checkpoint import read_trainer
from tformer.training.distributed import launched_world
from tformer.training.loop import Task, fit
from tformer.training.losses import label_smoothed_nll, nll_sum
from tformer.training.rundir import check_run_dir, hold, recover


@dataclass(kw_only=True)
class ModelSpec:
    """The model a recipe trains: a preset (`models/presets.py`) and nested config values over it. Each
    task's recipe names its default preset (`field(default_factory=lambda: ModelSpec(preset=...))`)."""

    preset: str
    overrides: dict = field(default_factory=dict)  # nested config values over the preset


def check_recipe(recipe: Any) -> None:
    """What every task's recipe must hold, checked when it is built (its `__post_init__`), so that nothing
    that could fail at the first evaluation fails after the training it would lose: an `out_dir` that names
    a directory (an empty one would train into the current directory), and a `train.best_metric` among the
    metrics the task's evaluation reports (the recipe class's METRICS), else no `best` is ever chosen."""
    if not isinstance(recipe.out_dir, str) or not recipe.out_dir.strip():
        raise UserError(f"out_dir={shown(recipe.out_dir)} must name a directory for the run (e.g. "
                         f"runs/{recipe.task}); use . for the current directory")
    check_choice("train.best_metric", recipe.train.best_metric, type(recipe).METRICS)


# A resumed run continues the one in OUT_DIR exactly, so its recipe may differ from the saved recipe.yaml only
# in when the run stops, logs, evaluates and saves, where and on how many threads it runs (train.accum_steps is
# per rank, so it changes with the number of ranks, which a resumed run may change), and how it decodes or
# samples afterwards (a key here, or under a section ending in "."). The model is checked against the
# checkpoint's own config (`training.resume.check_resumable`); anything else (the learning rate and schedule, the
# seed, the data) would silently not apply, or apply to half a run, so it is refused.
RESUME_MAY_CHANGE = ("out_dir", "train.max_steps", "train.time_budget_min", "train.eval_every", "train.log_every",
                     "train.save_every", "train.keep_last", "train.max_bad_steps", "train.device", "train.distributed",
                     "train.threads", "train.tune_threads", "train.accum_steps", "train.tensorboard", "model.",
                     "decode.", "sample.")


def check_resumed_recipe(out_dir: Path, recipe: Any) -> None:
    """Refuse to resume the run in `out_dir` with a recipe that changes what it trains: one line naming every
    changed key with its old and new value. A run without recipe.yaml (trained through the Python API
    without one) is not checked."""
    run = RunDir(out_dir)
    path = run.recipe
    if not path.is_file():
        return
    saved = flat_keys(read_yaml(path, what=f"cannot resume: {path}") or {})
    now = flat_keys(parse_yaml(dump_yaml(to_dict(recipe)), what="the recipe"))  # as recipe.yaml would hold it
    changed = [key for key in sorted(saved.keys() & now.keys()) if saved[key] != now[key] and not _may_change(key)]
    if changed:
        what = "; ".join(f"{key} {shown(saved[key])} -> {shown(now[key])}" for key in changed)
        raise UserError(f"cannot resume {run.last} with a changed recipe ({what}): a resumed run trains as "
                         f"{path} says; only when it stops, logs, evaluates and saves may change; start a new "
                         "out_dir for the new settings")


def _may_change(key: str) -> bool:
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in RESUME_MAY_CHANGE)


@dataclass(frozen=True)
class Resume:
    """`--resume` as a command gives it: the dotted keys its overrides set now (`given`), and the recipe they
    were applied to, flat, as recipe.yaml would hold it (`base`; None if it cannot be built alone). Passed as
    `resume=` (it is true, as `resume=True` is), it makes a resumed run say how the run was made and keeps a
    setting the run was made with from changing unasked: a key of RESUME_MAY_CHANGE (a time budget, a step
    count, a decoding setting) whose saved value differs from this command's must be given now, with the old
    value to continue as made or a new one to change it. `resume=True` (the Python API, whose recipe is given
    whole) changes them as the recipe says."""

    given: tuple[str, ...]
    base: dict[str, Any] | None

    def gives(self, key: str) -> bool:
        return any(key == g or key.startswith(f"{g}.") for g in self.given)


def setting(key: str, value: Any) -> str:
    """`key=value` as an override would give it (`train.time_budget_min=2`, `decode.beam=4`)."""
    if value is _UNSET:
        return f"{key} unset"
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30).strip()
    return f"{key}={text.removesuffix('...').strip()}"


_UNSET = object()


def resumed_line(out_dir: Path, recipe: Any, resume: Resume | bool) -> str:
    """The line a resumed run starts with, `resuming runs/x at step N (of the run made with KEY=VALUE ...)`,
    after the checks a `Resume` asks for (its docstring); with a `Resume`, a run that is finished under this
    recipe's max_steps and time budget, which would train no step, is refused too. A UserError names the keys
    and what to give."""
    run, train = RunDir(out_dir), recipe.train
    trainer = run.last / TRAINER_FILE
    if not trainer.is_file():  # no such checkpoint: `check_resumable` says so
        return f"resuming {out_dir}"
    saved = flat_keys(read_yaml(run.recipe, what=f"cannot resume: {run.recipe}") or {}) if run.recipe.is_file() else {}
    made = ""
    if isinstance(resume, Resume) and saved:
        now = flat_keys(parse_yaml(dump_yaml(to_dict(recipe)), what="the recipe"))
        unasked = [k for k in sorted(saved.keys() | now.keys()) if k != "out_dir" and _may_change(k)
                   and saved.get(k, _UNSET) != now.get(k, _UNSET) and not resume.gives(k)]
        if unasked:
            was = " ".join(setting(k, saved.get(k, _UNSET)) for k in unasked)
            would = " ".join(setting(k, now.get(k, _UNSET)) for k in unasked)
            raise UserError(f"cannot resume {out_dir} as given: the run was made with {was}, and this command would "
                            f"continue it with {would}; give {was} to continue it as it was made, or the new "
                            "value to change it")
        if resume.base is not None:
            made = " ".join(setting(k, saved.get(k, _UNSET)) for k in sorted(saved.keys() | resume.base.keys())
                            if saved.get(k, _UNSET) != resume.base.get(k, _UNSET))
            made = f" (of the run made with {made or 'the recipe as it is'})"
    state = read_trainer(run.last)["state"]
    step, minutes = state["step"], state.get("elapsed", 0.0) / 60
    if not isinstance(resume, Resume):  # the Python API's resume=True: the loop returns at once, "stopped" says why
        return f"resuming {out_dir} at step {step}"
    if step >= train.max_steps:
        raise UserError(f"{out_dir} is finished: it reached step {step}, its train.max_steps; to train on, give a "
                        f"larger one, e.g. train.max_steps={2 * step}")
    if train.time_budget_min is not None and minutes >= train.time_budget_min:
        raise UserError(f"{out_dir} is finished: it stopped at step {step} after {minutes:.1f} min, its time budget "
                        f"(train.time_budget_min={train.time_budget_min:g}) spent; to train on, give a larger one, "
                        f"e.g. train.time_budget_min={2 * train.time_budget_min:g}")
    return f"resuming {out_dir} at step {step}{made}"


# --- training -------------------------------------------------------------------------------------------


class Setup(NamedTuple):
    """What a task builds before training: the model, its config, the task the loop runs, the tokenizer."""

    model: nn.Module
    config: ModelConfig
    task: Task
    tokenizer: Tokenizer


def run_task(recipe: Any, setup: Callable[[Any], Setup], *, resume: bool | Resume, progress: bool,
             overwrite: bool = False,
             finish: Callable[[dict[str, Any], Setup], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Train (or resume) a recipe the way every task does, and return the loop's final state.

    Seeds torch with train.seed; on resume, reads the tokenizer of OUT_DIR/last (the ids must not change);
    `setup(tokenizer)` builds the task's model, config, data and tokenizer (`tokenizer` is None on a fresh
    run: the task trains its own); the main process writes the recipe to OUT_DIR/recipe.yaml, and `fit`
    trains, writing metrics and checkpoints to OUT_DIR.
    Then, on the main process of a run that was not interrupted, `finish(state, setup)` (if given) does
    the task's last part and returns the state to hand back. The main process prints the model's size and
    training FLOPs per token at its context (`models.calc.model_summary`) before training starts.

    The main process holds OUT_DIR for the whole training (`rundir`): no fresh run over an existing one
    unless `overwrite` (refused before anything is built), no second training at once (a lock), and a
    `last` that a crash caught mid-save recovered before a resume reads it."""
    out_dir = Path(recipe.out_dir)
    run = RunDir(out_dir)
    main = launched_world().is_main
    if main:
        check_run_dir(out_dir, resume=resume, overwrite=overwrite)
    with ExitStack() as held:
        if resume and main:
            held.enter_context(hold(out_dir))
            for checkpoint in (run.last, run.best):
                recover(checkpoint)
        if resume:
            check_resumed_recipe(out_dir, recipe)
            line = resumed_line(out_dir, recipe, resume)
            if main:
                print(line, flush=True)
        torch.manual_seed(recipe.train.seed)
        built = setup(resumed_tokenizer(out_dir) if resume else None)
        if main:  # what the run costs, before it starts
            print(model_summary(built.model, seq_len=built.config.max_len), flush=True)
        if main and not resume:
            held.enter_context(hold(out_dir, fresh=True, overwrite=overwrite))
        out_dir.mkdir(parents=True, exist_ok=True)
        if main:  # under `hold`: a training that fails before its first step puts the old one back
            run.write_recipe(recipe)
        state = fit(built.model, built.config, built.task, recipe.train, out_dir=out_dir,
                    tokenizer=built.tokenizer, resume=resume, progress=progress)
        if finish is None or state.get("interrupted") or not main:
            return state
        return finish(state, built)


def resumed_tokenizer(out_dir: Path) -> Any:
    """The tokenizer saved in OUT_DIR/last: a resumed run must encode text as the run it continues did."""
    last = RunDir(out_dir).last
    directory = tokenizer_dir(last)
    if directory is None:
        raise UserError(f"cannot resume: no checkpoint with a tokenizer at {last} "
                         "(train without --resume to start afresh)")
    return load_tokenizer(directory)


# --- next-token objectives -----------------------------------------------------------------------------

Forward = Callable[[nn.Module, Any], tuple[Tensor, Tensor]]  # (model, batch) -> logits (B, T, V), targets (B, T)


def token_loss(model: nn.Module, batch: Any, forward: Forward, *, smoothing: float, pad_id: int) -> Tensor:
    """The label-smoothed cross entropy summed over a batch's target tokens, padding left out: the training
    loss of every task that predicts each next token (translation, language modelling)."""
    logits, targets = forward(model, batch)
    loss, _ = label_smoothed_nll(logits, targets, smoothing=smoothing, ignore_index=pad_id)
    return loss


@torch.inference_mode()
def token_nll(model: nn.Module, batches: list[Any], forward: Forward, *, pad_id: int) -> tuple[float, int]:
    """(summed negative log-likelihood in nats, target tokens) over validation batches, padding left out;
    each batch is moved to the model's device first."""
    total, count = 0.0, 0
    for batch in batches:
        logits, targets = forward(model, to_device(batch, device_of(model)))
        nll, n = nll_sum(logits, targets, ignore_index=pad_id)
        total, count = total + float(nll), count + int(n)
    return total, count


__all__ = ["RESUME_MAY_CHANGE", "ModelSpec", "Resume", "Setup", "check_recipe", "check_resumed_recipe", "resumed_line",
           "run_task", "setting", "token_loss", "token_nll"]
