"""Reading a checkpoint directory back: its config, its model with the weights, where its tokenizer is.

    <path>/model.safetensors   the weights (a tied tensor stored once, under one of its names)
    <path>/config.yaml         family, model class and the model config, as plain data
    <path>/tokenizer/          the tokenizer's own files
    <path>/manifest.json       every file's size and SHA-256, checked as each file is read (`tformer.manifest`)
    <path>/trainer.pt          training state, read by `training.checkpoint` only

Writing a checkpoint, and its training state, is `training.checkpoint`'s; this module sits below both
training and inference, so that using a trained model never imports the training loop.

A checkpoint read while a training saves it anew (`run/last`) is read whole, old or new, never mixed
(`read_consistently`): a save writes a new directory and swaps it in (`files.atomic_directory`), and a read
that the swap overtook, failing on the old manifest against a new file or finding the directory moved aside
for an instant, is read again, once the new one is in place.

Weights saved under older state-dict names load under today's through one table, `RENAMED`: the loader
renames the file's keys before they reach the model, and the modules themselves know only today's names.
"""

from __future__ import annotations

import glob
import os
import reprlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import safetensors
import safetensors.torch
import torch
from torch import nn

import tformer.models
from tformer.config import FAMILIES, ModelConfig
from tformer.configio import from_dict, read_yaml, renamed_keys
from tformer.errors import UserError
from tformer.files import swap_lock
from tformer.manifest import MANIFEST_FILE, TOKENIZER_DIR, verify_checkpoint, verify_file
from tformer.models.presets import build_model
from tformer.runs import RunDir

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.yaml"
TRAINER_FILE = "trainer.pt"

# A layer's state-dict names that changed, old -> new, as they follow a layer's index (`...layers.3.<old>`):
# the mixer of a layer was `self_attn` and its norm `attn_norm` until the mixer could be a state-space block.
RENAMED = {"self_attn.": "mixer.", "attn_norm.": "mixer_norm."}
READ_TRIES = 5  # reads of a checkpoint that saves keep replacing, before the last one's failure is raised
SAVE_WAIT_S = 10.0  # how long a read waits for a save that moved the old checkpoint aside to rename the new in
T = TypeVar("T")


def read_consistently(path: str | os.PathLike, read: Callable[[], T]) -> T:
    """`read()` of the checkpoint directory `path`, read again when a save replaced `path` while it ran: a
    failure then (an old manifest against a new file, a file missing while the directory was moved aside) is
    no fault of the checkpoint, and a success may hold parts of both. A failure while nothing replaced
    `path` is raised at once, as is any failure of the last of READ_TRIES reads. A save by this package holds
    `files.swap_lock` while it replaces `path`, and a read holds it shared, so that a read goes again only
    past a save of another kind (or the first of a new directory)."""
    for _ in range(READ_TRIES - 1):
        failure = None
        with swap_lock(path, shared=True):  # no save replaces `path` meanwhile (a save by this package)
            before = _identity(path)
            try:
                result = read()
            except (UserError, OSError) as e:
                failure = e
            else:
                if _identity(path) == before:
                    return result
        if failure is not None and not _replaced(path, before):  # waits outside the lock for a save under way
            raise failure
    return read()


def _identity(path: str | os.PathLike) -> tuple[int, ...] | None:
    """What tells one directory at `path` from the next a save puts there (None: nothing there now)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def _replaced(path: str | os.PathLike, before: tuple[int, ...] | None) -> bool:
    """Whether another directory is at `path` than `before`; while a save has moved the old one aside and
    not yet renamed the new one in (its hidden `.<name>.tmp-*` sibling), wait up to SAVE_WAIT_S for it."""
    path = Path(path)
    deadline = time.monotonic() + SAVE_WAIT_S
    while _identity(path) is None and time.monotonic() < deadline and any(
            path.parent.glob(f".{glob.escape(path.name)}.tmp-*")):
        time.sleep(0.005)
    return _identity(path) != before


def load_config(path: str | os.PathLike) -> tuple[ModelConfig, str]:
    """(the model config, the saved model's class name) from `<path>/config.yaml`. A key the config class has
    renamed since the checkpoint was saved is read under its new name (`configio.renamed_keys`)."""
    path = Path(path)
    meta = _read_yaml(path)
    family, model = meta.get("family"), meta.get("model") or ""
    if not isinstance(family, str) or family not in FAMILIES:  # a list or a mapping is no family either
        known = ", ".join(FAMILIES)
        raise UserError(f"checkpoint {path}: {CONFIG_FILE} has family={reprlib.repr(family)}; known: {known}")
    if not isinstance(model, str):
        raise UserError(f"checkpoint {path}: {CONFIG_FILE} has model={reprlib.repr(model)}; expected the name of "
                         "a model class, e.g. GPT")
    try:
        config = from_dict(FAMILIES[family], renamed_keys(FAMILIES[family], meta.get("config") or {}))
    except ValueError as e:
        raise UserError(f"checkpoint {path}: {CONFIG_FILE}: {e}") from None
    return config, model


def load_model(path: str | os.PathLike, *,
               device: str | torch.device = "cpu") -> tuple[nn.Module, ModelConfig]:
    """Rebuild the model from config.yaml and load its weights; returns (model in eval mode, config).

    The model is `build_model(config)` (EncoderDecoder, BertForPretraining, GPT), or the saved class if
    config.yaml names another model of `tformer.models` (a BertClassifier, a bare Bert). Tied weights come
    back tied: they are one tensor in the model, and the file holds it once."""
    path = Path(path)

    def read() -> tuple[nn.Module, ModelConfig]:
        config, class_name = load_config(path)
        model = build_saved(path, config, class_name).to(device)
        load_weights(model, path)
        return model.eval(), config

    return read_consistently(path, read)


def load_weights(model: nn.Module, path: str | os.PathLike) -> None:
    """Copy `<path>/model.safetensors` into `model` in place (on the model's device), old names renamed
    (`RENAMED`); every key must match but the tied copies the file stores once."""
    path = Path(path)
    weights = checkpoint_file(path, MODEL_FILE)
    device = next(iter(model.state_dict().values())).device
    where = f"checkpoint {path}: cannot load {MODEL_FILE} into {type(model).__name__}"
    try:
        state = renamed(safetensors.torch.load_file(str(weights), device=str(device)))
    except Exception as e:  # a corrupt file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{where}: {first}") from None
    problem = _mismatch(model, {name: list(t.shape) for name, t in state.items()})
    if problem:
        raise UserError(f"{where}: {problem}")
    if (bad := first_non_finite(state)) is not None:
        raise UserError(f"checkpoint {path}: {MODEL_FILE} holds non-finite values (NaN or infinity) in {bad}: the "
                         "weights are corrupt or training diverged; load another checkpoint (an earlier step-*)")
    model.load_state_dict(state, strict=False)  # `_mismatch` found every key the model needs


def first_non_finite(state: dict[str, torch.Tensor]) -> str | None:
    """The name of the first floating-point tensor of `state` holding a NaN or an infinity (None if none does):
    a model computes nothing from such weights (a beam search finds no hypothesis, greedy an empty line)."""
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return name
    return None


def renamed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with each key of a layer that `RENAMED` lists under its new name (the others as they are)."""
    def new_name(key: str) -> str:
        head, sep, tail = key.partition(".layers.")
        index, dot, rest = tail.partition(".")
        for old, new in RENAMED.items() if sep and dot and index.isdigit() else ():
            if rest.startswith(old):
                return f"{head}{sep}{index}.{new}{rest[len(old):]}"
        return key

    return {new_name(key): value for key, value in state.items()}


def _mismatch(model: nn.Module, stored: dict[str, list[int]]) -> str | None:
    """What differs between the file's tensors (name -> shape) and the model's, in a few words (None if
    nothing does): size mismatches first, then missing and unexpected names. A tied parameter is missing
    only when none of its names is in the file."""
    ours = {name: list(t.shape) for name, t in model.state_dict().items()}
    sizes = [(n, stored[n], ours[n]) for n in stored if n in ours and stored[n] != ours[n]]
    if sizes:
        name, a, b = sizes[0]
        return (f"{len(sizes)} size mismatch{'es' if len(sizes) > 1 else ''}, the first: {name} is {a} in the "
                f"file but {b} in the model (weights of another architecture or size?)")
    covered = {n for group in tied_names(model) if set(group) & stored.keys() for n in group}
    missing = sorted(set(ours) - set(stored) - covered)
    unexpected = sorted(set(stored) - set(ours))
    parts = [f"{len(missing)} missing (first: {missing[0]})"] if missing else []
    parts += [f"{len(unexpected)} unexpected (first: {unexpected[0]})"] if unexpected else []
    return "weights " + ", ".join(parts) if parts else None


def tied_names(model: nn.Module) -> list[list[str]]:
    """Names of each parameter shared by several modules, sorted (the file stores the tensor once)."""
    groups: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    return [sorted(g) for g in groups.values() if len(g) > 1]


def build_saved(path: str | os.PathLike, config: ModelConfig, class_name: str) -> nn.Module:
    """The model config.yaml describes, weights not loaded: `build_model(config)`, or the class it names."""
    model = build_model(config)
    if class_name and class_name != type(model).__name__:
        cls = getattr(tformer.models, class_name, None) if class_name in tformer.models.__all__ else None
        if cls is None:
            known = ", ".join(tformer.models.__all__)
            raise UserError(f"checkpoint {path}: {CONFIG_FILE} names model {class_name!r}; known: {known}")
        model = cls(config)
    return model


def tokenizer_dir(path: str | os.PathLike) -> Path | None:
    """`<path>/tokenizer`, to pass to the tokenizer class's `load`, or None if the checkpoint has none."""
    directory = Path(path) / TOKENIZER_DIR
    return directory if directory.is_dir() else None


def checkpoint_file(path: Path, name: str) -> Path:
    """`<path>/<name>`, checked against the manifest (`manifest.verify_file`: listed, size, SHA-256); a
    ValueError naming the checkpoint if there is no such directory or file; for a run directory given in
    place of one of its checkpoints, the message names the checkpoint meant (`run_checkpoint`), and for
    another program's model, what it is (`refuse_foreign`)."""
    if not path.is_dir():
        raise UserError(f"checkpoint {path}: no such directory")
    file = path / name
    if not file.is_file():
        refuse_foreign(path)
        meant = run_checkpoint(path)
        hint = f"; {path} is a run directory: did you mean {meant}?" if meant is not None else ""
        raise UserError(f"checkpoint {path}: missing {name}{hint}")
    verify_file(path, name)
    return file


def refuse_foreign(path: Path) -> None:
    """A UserError saying what `path`, a directory without a file a checkpoint needs, is instead: a
    CTranslate2 model (model.bin; `tformer convert --to-ct2` also leaves a config.yaml there), or a Hugging
    Face one (config.json, no config.yaml)."""
    if (path / "model.bin").is_file() and not (path / MODEL_FILE).is_file():
        raise UserError(f"{path} is a CTranslate2 model (model.bin); tformer reads its own checkpoints, or Hugging "
                        "Face ones converted with tformer convert --from-hf DIR --out CHECKPOINT")
    if (path / "config.json").is_file() and not (path / CONFIG_FILE).is_file():
        raise UserError(f"{path} is a Hugging Face model (config.json); convert it first: tformer convert "
                        f"--from-hf {path} --out CHECKPOINT")


def verify_source(path: str | os.PathLike) -> Path:
    """Check a whole checkpoint that a command reads to write another (`tformer average`, `convert --to-hf`,
    `--to-ct2`) against its manifest (`manifest.verify_checkpoint`: every file there, listed and unchanged),
    before anything is read: the new checkpoint gets a manifest of its own, which would certify an edited or
    added file of the source as saved. A checkpoint without a manifest is read unchecked, as loading does."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"checkpoint {path}: no such directory")
    if (path / MANIFEST_FILE).is_file():
        verify_checkpoint(path)
    return path


def run_checkpoint(path: Path) -> Path | None:
    """The checkpoint a user most likely meant by naming the run directory `path`: `path/best`, else
    `path/last` (None if it holds neither)."""
    return RunDir(path).trained()


def _read_yaml(path: Path) -> dict:
    file = checkpoint_file(path, CONFIG_FILE)
    meta = read_yaml(file, what=f"checkpoint {path}: {CONFIG_FILE}")
    if meta is None:
        raise UserError(f"checkpoint {path}: {CONFIG_FILE} is empty")
    return meta


__all__ = ["CONFIG_FILE", "MANIFEST_FILE", "MODEL_FILE", "RENAMED", "TOKENIZER_DIR", "TRAINER_FILE", "build_saved",
           "checkpoint_file", "first_non_finite", "refuse_foreign",
           "load_config", "load_model", "load_weights", "read_consistently", "renamed", "tied_names", "tokenizer_dir",
           "verify_source"]
