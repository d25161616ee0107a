"""What every task shares: the model part of a recipe, the skeleton a task's training runs through, and
the one way to load a trained checkpoint for use (model, config, tokenizer, checked against each other and
against the command that wants it).

A task (translation, lm, bert, classify) keeps its own part in its module: its data, its batches and loss
(a `training.loop.Task`), how it builds its model and tokenizer (`setup`), and what it does once trained
(`finish`: samples, test scores). `run_task` does the rest the same way for all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from tformer.config import TransformerConfig, family_of
from tformer.data.device import device_of, to_device
from tformer.tokenization import check_vocabulary, load_tokenizer
from tformer.training.checkpoint import load_config, load_model, tokenizer_dir
from tformer.training.distributed import launched_world
from tformer.training.loop import Task, fit
from tformer.training.losses import label_smoothed_nll, nll_sum


@dataclass(kw_only=True)
class ModelSpec:
    """The model a recipe trains: a preset (`models/presets.py`) and nested config values over it. Each
    task's recipe names its default preset (`field(default_factory=lambda: ModelSpec(preset=...))`)."""

    preset: str
    overrides: dict = field(default_factory=dict)  # nested config values over the preset


# --- training -------------------------------------------------------------------------------------------


class Setup(NamedTuple):
    """What a task builds before training: the model, its config, the task the loop runs, the tokenizer."""

    model: nn.Module
    config: TransformerConfig
    task: Task
    tokenizer: Any


def run_task(recipe: Any, setup: Callable[[Any], Setup], *, resume: bool, progress: bool,
             finish: Callable[[dict[str, Any], Setup], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Train (or resume) a recipe the way every task does, and return the loop's final state.

    Seeds torch with train.seed; on resume, reads the tokenizer of OUT_DIR/last (the ids must not change);
    `setup(tokenizer)` builds the task's model, config, data and tokenizer (`tokenizer` is None on a fresh
    run: the task trains its own); `fit` trains, writing recipe.yaml, metrics and checkpoints to OUT_DIR.
    Then, on the main process of a run that was not interrupted, `finish(state, setup)` (if given) does
    the task's last part and returns the state to hand back."""
    out_dir = Path(recipe.out_dir)
    torch.manual_seed(recipe.train.seed)
    built = setup(resumed_tokenizer(out_dir) if resume else None)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = fit(built.model, built.config, built.task, recipe.train, out_dir=out_dir, tokenizer=built.tokenizer,
                resume=resume, progress=progress, recipe=recipe)
    if finish is None or state.get("interrupted") or not launched_world().is_main:
        return state
    return finish(state, built)


def resumed_tokenizer(out_dir: Path) -> Any:
    """The tokenizer saved in OUT_DIR/last: a resumed run must encode text as the run it continues did."""
    directory = tokenizer_dir(out_dir / "last")
    if directory is None:
        raise ValueError(f"cannot resume: no checkpoint with a tokenizer at {out_dir / 'last'} "
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


# --- trained checkpoints --------------------------------------------------------------------------------

# command -> (the kinds of checkpoint it takes, how its refusal of another kind reads)
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "translate": (("seq2seq",), "holds a {config}, not an encoder-decoder; translate needs a seq2seq checkpoint"),
    "evaluate": (("seq2seq",), "holds a {config}, not an encoder-decoder; evaluate needs a seq2seq checkpoint"),
    "generate": (("gpt",), "holds a {config}; generate needs a GPT"),
    "score": (("gpt", "seq2seq"), "holds a {config}; score needs a GPT or an encoder-decoder"),
    "classify": (("bert classifier",), "holds a {model}; classify needs a BertClassifier (train one with task: "
                                       "classify)"),
}


def checkpoint_kind(config: TransformerConfig, model_class: str = "") -> str:
    """What a checkpoint holds, in the words the commands use: its family (seq2seq, gpt, bert), or
    "bert classifier" for a BERT with a classification head."""
    family = family_of(config)
    return "bert classifier" if family == "bert" and model_class == "BertClassifier" else family


def check_kind(path: str | Path, command: str) -> None:
    """A ValueError unless checkpoint `path` holds a kind of model `command` takes, saying what it holds
    and which commands take that. Reads only config.yaml, so a command can check before anything else."""
    config, model_class = load_config(path)
    kind = checkpoint_kind(config, model_class)
    takes, refusal = NEEDS[command]
    if kind in takes:
        return
    held = refusal.format(config=type(config).__name__, model=model_class or kind)
    users = [c for c, (kinds, _) in NEEDS.items() if kind in kinds]
    use = f"tformer {' / '.join(users)}" if users else "fine-tuning a classifier (task: classify, model.init_from)"
    raise ValueError(f"checkpoint {path} {held}; a {kind} checkpoint is for {use}")


def load_checkpoint(path: str | Path, *, command: str | None = None) -> tuple[nn.Module, TransformerConfig, Any]:
    """(model in eval mode, config, tokenizer) of a checkpoint directory, trained here or imported with
    `tformer convert --from-hf`. With `command` (a key of NEEDS), a checkpoint of a kind that command does
    not take is refused first (`check_kind`). The tokenizer must make no id the model has no embedding for
    (an encoder-decoder's one tokenizer serves both sides, so it must fit the smaller vocabulary)."""
    if command is not None:
        check_kind(path, command)
    model, config = load_model(path)
    if tokenizer_dir(path) is None:
        raise ValueError(f"checkpoint {path} has no tokenizer/ directory")
    tokenizer = load_tokenizer(path)
    shared = min(config.vocab_size, getattr(config, "src_vocab_size", None) or config.vocab_size)
    check_vocabulary(tokenizer, shared, where=f"checkpoint {path}")
    return model, config, tokenizer


__all__ = ["ModelSpec", "Setup", "check_kind", "checkpoint_kind", "load_checkpoint", "run_task", "token_loss",
           "token_nll"]
