"""Writing checkpoints, one directory each, atomically, and reading back their training state (reading the
model, config and tokenizer is `tformer.checkpoints`', which inference uses without the training loop).

    <path>/model.safetensors   the weights (safetensors; a tied tensor is stored once, under one name)
    <path>/config.yaml         family, model class and the model config, as plain data
    <path>/trainer.pt          optimizer and scheduler state, the fp16 loss scaler's state (None
                               without one), the caller's state (step, epoch, batch position in the
                               epoch, ...) and the RNG states (python, numpy, torch CPU, CUDA); only
                               when training state is passed
    <path>/tokenizer/          written by the tokenizer's own `save(dir)`, when one is passed
    <path>/manifest.json       every file's size and SHA-256, the tokenizer's included, checked when the
                               file is read back (`tformer.manifest`)

Atomic: everything is written into a hidden sibling directory, each file fsync'd, and only then renamed
onto `<path>` (an existing checkpoint is first renamed aside, then deleted, or kept under another name).
An exception while writing (a full disk) removes the sibling and leaves the old checkpoint as it was; a
crash (power loss, SIGKILL) can leave only a stale `.<name>.tmp-*` sibling behind, never a half-written
`<path>`. A library's own error for a full disk (safetensors, tokenizers) is turned into the OSError it is
(`tformer.ioerrors`), so every write failure reads `cannot write checkpoint <path>: <reason>`. Verified: a
file whose size or hash differs from the manifest (truncated, edited), or one the manifest does not list
(added after the save), is refused with its name, not half-loaded.

Resuming: `model, config = load_model(path)` (or an already built model, passed as `model=` below), build
the optimizer and scheduler as at the start, then `state = load_training_state(path, optimizer=...,
scheduler=...)`, last: building draws random numbers, and restoring the RNG must come after it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Protocol

import safetensors.torch
import torch
from torch import nn

from tformer.checkpoints import (
    CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_DIR,
    TRAINER_FILE,
    checkpoint_file,
    load_config,
    load_model,
    load_weights,
    tied_names,
    tokenizer_dir,
)
from tformer.config import TransformerConfig, family_of
from tformer.configio import dump_yaml, to_dict
from tformer.errors import UserError
from tformer.files import atomic_directory
from tformer.ioerrors import writing
from tformer.manifest import MANIFEST_FILE, verify_checkpoint, write_manifest
from tformer.training.rng import rng_states, set_rng_states


class SavesToDirectory(Protocol):
    def save(self, directory: Path) -> object: ...


# --- saving ---------------------------------------------------------------------------------------------


def save_checkpoint(path: str | os.PathLike, *, model: nn.Module, config: TransformerConfig,
                    optimizer: torch.optim.Optimizer | None = None,
                    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None, state: dict | None = None,
                    tokenizer: SavesToDirectory | None = None, keep_previous_as: str | os.PathLike | None = None,
                    model_state: dict | None = None, optimizer_state: dict | None = None,
                    scaler: torch.amp.GradScaler | None = None) -> None:
    """Write the checkpoint directory `path`, replacing any checkpoint there only once complete (and keeping
    the one it replaces as `keep_previous_as`, if given, instead of deleting it).

    trainer.pt is written when any of optimizer, scheduler or state is given: their states, the RNG
    states, and the state of `scaler` (fp16's loss scale) when it is given and enabled. `state` is the
    loop's own plain data (numbers, strings, None, lists, dicts, tensors), e.g. the step, the epoch and the
    batch position in it; `load_training_state` returns it unchanged.
    `tokenizer.save(dir)` is called with an existing, empty `tokenizer/` directory. `model_state` and
    `optimizer_state` stand in for `model.state_dict()` and `optimizer.state_dict()` when those live sharded
    over several processes (FSDP) and were gathered by the caller.

    A failure to write (full disk, no permission) raises ValueError naming `path` and the reason. A
    non-empty directory at `path` that is not a checkpoint (no config.yaml) is refused, never replaced."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"checkpoint {path}: exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not (path / CONFIG_FILE).is_file():
        raise UserError(f"{path} is a directory of other files, not a checkpoint; a checkpoint replaces only a "
                         "checkpoint: write it to a new or empty directory")
    try:
        with atomic_directory(path, keep_previous_as=keep_previous_as) as tmp:
            _write_files(tmp, model=model, config=config, optimizer=optimizer, scheduler=scheduler, state=state,
                         tokenizer=tokenizer, model_state=model_state, optimizer_state=optimizer_state,
                         scaler=scaler)
    except OSError as e:
        reason = e.strerror or str(e) or errno.errorcode.get(e.errno or 0, type(e).__name__)
        kept = " (the previous one there is kept)" if path.exists() else ""
        raise UserError(f"cannot write checkpoint {path}: {reason}{kept}") from None


def _write_files(directory: Path, *, model: nn.Module, config: TransformerConfig,
                 optimizer: torch.optim.Optimizer | None, scheduler: torch.optim.lr_scheduler.LRScheduler | None,
                 state: dict | None, tokenizer: SavesToDirectory | None, model_state: dict | None,
                 optimizer_state: dict | None, scaler: torch.amp.GradScaler | None) -> None:
    """The checkpoint's files (see the module docstring) into the empty `directory`, the manifest last."""
    with writing(directory / MODEL_FILE):  # safetensors' own error for a full disk, as the OSError it is
        if model_state is None:
            safetensors.torch.save_model(model, str(directory / MODEL_FILE))
        else:
            _save_state(model, model_state, directory / MODEL_FILE)
    meta = {"family": family_of(config), "model": type(model).__name__, "config": to_dict(config)}
    (directory / CONFIG_FILE).write_text(dump_yaml(meta))
    if optimizer is not None or scheduler is not None or state is not None:
        if optimizer_state is None and optimizer is not None:
            optimizer_state = optimizer.state_dict()
        trainer = {
            "optimizer": optimizer_state,
            "scheduler": None if scheduler is None else scheduler.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None and scaler.is_enabled() else None,
            "state": dict(state or {}),
            "rng": rng_states(),
        }
        with open(directory / TRAINER_FILE, "wb") as f:  # a file object: torch lets its OSError through
            torch.save(trainer, f)
    if tokenizer is not None:
        (directory / TOKENIZER_DIR).mkdir()
        with writing(directory / TOKENIZER_DIR):
            tokenizer.save(directory / TOKENIZER_DIR)
    write_manifest(directory)


def _save_state(model: nn.Module, state: dict, file: Path) -> None:
    """`safetensors.torch.save_model` for a state dict held apart from the model: a tensor the model ties
    to others (the output layer sharing the embedding) is stored once, under the name save_model keeps."""
    drop = {n for group in tied_names(model) for n in group[1:]}
    safetensors.torch.save_file({k: v.contiguous() for k, v in state.items() if k not in drop}, str(file))


def load_training_state(path: str | os.PathLike, *, optimizer: torch.optim.Optimizer | None = None,
                        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
                        model: nn.Module | None = None, restore_rng: bool = True,
                        scaler: torch.amp.GradScaler | None = None) -> dict:
    """Restore the optimizer and scheduler (built as before, over the model) and the RNG states from
    trainer.pt, and with `model` also the weights into that model; returns the `state` dict saved. An
    enabled `scaler` gets the saved loss scale (`restore_scaler`)."""
    path = Path(path)
    if model is not None:
        load_weights(model, path)
    trainer = read_trainer(path)
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler)):
        if obj is not None and trainer.get(name) is None:
            raise UserError(f"checkpoint {path}: {TRAINER_FILE} holds no {name} state")
    if optimizer is not None:
        optimizer.load_state_dict(trainer["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(trainer["scheduler"])
    if scaler is not None:
        restore_scaler(scaler, trainer)
    if restore_rng:
        set_rng_states(trainer["rng"])
    return trainer["state"]


def restore_scaler(scaler: torch.amp.GradScaler, trainer: dict) -> None:
    """The saved loss scale into an enabled `scaler`; a checkpoint without one (trained in fp32 or bf16,
    or older than the scaler) leaves it at its initial scale, and a disabled scaler ignores a saved one: a
    run may resume in another precision (the Python API does not check the recipe)."""
    if scaler.is_enabled() and trainer.get("scaler"):
        scaler.load_state_dict(trainer["scaler"])


def read_trainer(path: str | os.PathLike) -> dict:
    """trainer.pt as saved: {"optimizer", "scheduler", "scaler", "state", "rng"} ("scaler" is missing
    from checkpoints older than it)."""
    path = Path(path)
    file = checkpoint_file(path, TRAINER_FILE)
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:
        raise UserError(f"checkpoint {path}: {TRAINER_FILE} is corrupt ({type(e).__name__})") from None


__all__ = [
    "CONFIG_FILE", "MANIFEST_FILE", "MODEL_FILE", "TOKENIZER_DIR", "TRAINER_FILE", "load_config", "load_model",
    "load_training_state", "load_weights", "read_trainer", "restore_scaler", "save_checkpoint", "tokenizer_dir",
    "verify_checkpoint",
]
