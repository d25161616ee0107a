"""The files of a Hugging Face checkpoint directory, reached one way: confined to the directory, each
read with its failures turned into one line naming the file.

    hf_file(directory, name)   `directory`/`name`, a regular file inside the directory: no absolute name,
                               no `..`, no link to elsewhere (but a Hugging Face cache's snapshot, whose
                               files are links into the cache's `blobs/`)
    read_config(directory)     config.json: a JSON object whose `model_type` is a string
    weight_files(directory)    the weights: model.safetensors, or the shards an `*.index.json` names in
                               its `weight_map` (a mapping of weight name -> shard file, each confined)
    load_tensors(file)         one weights file; a corrupt safetensors file, or a `pytorch_model.bin` that
                               holds more than tensors (pickled code is never run: `weights_only`), is
                               refused with one line

An index is data someone else wrote: a shard named `/etc/passwd` or `../../outside.safetensors` is refused,
not opened. `interop.hf` reads every file through here, and so does `tformer convert` for tokenizer.json.
"""

from __future__ import annotations

import json
import os
import reprlib
from pathlib import Path, PurePosixPath

import torch
from safetensors.torch import load_file
from torch import Tensor

from tformer.errors import UserError

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
# What a checkpoint's weights may be stored as, in the order we look for them.
WEIGHT_FILES = (WEIGHTS, "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def hf_file(directory: str | os.PathLike, name: object, *, named_by: str | os.PathLike | None = None) -> Path:
    """`directory`/`name` if it is a regular file inside `directory`; a ValueError otherwise (naming
    `named_by`, the index that named the file, if given). A missing file is a FileNotFoundError."""
    directory = Path(directory)
    where = f"{named_by} names" if named_by else f"{directory}:"
    if not isinstance(name, str) or not name:
        raise UserError(f"{where} {reprlib.repr(name)}, which is not a file name")
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if name.startswith(("/", "\\")) or ".." in parts or (len(name) > 1 and name[1] == ":"):
        raise UserError(f"{where} {name!r}, which is outside {directory}; a checkpoint's files must lie inside "
                         "its directory")
    file = directory / name
    real = file.resolve()
    if not any(real.is_relative_to(root) for root in _allowed_roots(directory)):
        raise UserError(f"{file} is a link to {real}, outside {directory}; a checkpoint's files must lie "
                         "inside its directory")
    if not real.exists():
        raise UserError(f"{where} {name!r}, which does not exist" if named_by else f"{file} does not exist")
    if not real.is_file():
        raise UserError(f"{file} is not a regular file")
    return file


def _allowed_roots(directory: Path) -> list[Path]:
    """Where a file of `directory` may really lie: in it, and for a snapshot of the Hugging Face cache
    (`models--x/snapshots/<rev>/`, whose files are links to `models--x/blobs/<hash>`) in its blobs."""
    root = directory.resolve()
    roots = [root]
    if root.parent.name == "snapshots":
        roots.append(root.parent.parent / "blobs")
    return roots


def read_json(file: Path) -> object:
    try:
        return json.loads(file.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(f"{file} is not valid JSON (not UTF-8: byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{file} is not valid JSON ({e})") from None


def read_config(directory: str | os.PathLike, *, supported: tuple[str, ...]) -> dict:
    """config.json as a dict, its `model_type` one of `supported`."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"{directory} is not a directory; expected a Hugging Face checkpoint directory "
                         f"with {CONFIG} and {WEIGHTS}")
    if not (directory / CONFIG).exists():
        raise UserError(f"{directory} has no {CONFIG}; expected a Hugging Face checkpoint directory "
                         f"with {CONFIG} and {WEIGHTS}")
    file = hf_file(directory, CONFIG)
    config = read_json(file)
    if not isinstance(config, dict):
        raise UserError(f"{file} must hold a JSON object, not {type(config).__name__}")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in supported:
        raise UserError(f"{file}: model_type={reprlib.repr(model_type)} is not supported; "
                         f"supported: {', '.join(sorted(supported))}")
    return config


def weight_files(directory: str | os.PathLike) -> list[Path]:
    """The files holding the weights: the first of WEIGHT_FILES there, or the shards its index names."""
    directory = Path(directory)
    for name in WEIGHT_FILES:
        if (directory / name).exists() or (directory / name).is_symlink():
            file = hf_file(directory, name)
            return _shards(file) if name.endswith(".index.json") else [file]
    raise UserError(f"{directory} has no weights; expected one of {', '.join(WEIGHT_FILES)}")


def _shards(index: Path) -> list[Path]:
    """The distinct shard files `index`'s weight_map names, each confined to the index's directory."""
    data = read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserError(f"{index}: expected a JSON object with a non-empty \"weight_map\" "
                         f"(weight name -> shard file), found weight_map={reprlib.repr(weight_map)}")
    shards = []
    for weight, shard in weight_map.items():
        if not isinstance(shard, str):
            raise UserError(f"{index}: weight_map maps {weight!r} to {reprlib.repr(shard)}; expected a shard "
                             "file name")
        if shard not in shards:
            shards.append(shard)
    return [hf_file(index.parent, shard, named_by=index) for shard in sorted(shards)]


def load_tensors(file: Path) -> dict[str, Tensor]:
    """The tensors of one weights file (safetensors, or a `torch.save` file read with `weights_only`)."""
    if file.suffix == ".safetensors":
        try:
            return load_file(file)
        except Exception as e:  # safetensors' SafetensorError, or an OSError of the read
            raise UserError(f"{file} is not a valid safetensors file ({_first_line(e)})") from None
    try:
        tensors = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError (objects or code, refused and never run; or garbage), RuntimeError
        reason = _torch_reason(e)
        if "unsupported global" in reason.lower():
            raise UserError(f"{file} holds pickled objects or code beside its tensors, which are not loaded "
                             f"({reason}); use its model.safetensors instead") from None
        raise UserError(f"{file} is not a valid weights file ({reason})") from None
    if not isinstance(tensors, dict) or not all(isinstance(v, Tensor) for v in tensors.values()):
        raise UserError(f"{file} holds a {type(tensors).__name__}, not a mapping of weight names to tensors")
    return tensors


def _torch_reason(e: BaseException) -> str:
    """The line of torch.load's error that says what is wrong, without its advice to load the file with
    `weights_only=False` (which would run whatever code it holds)."""
    boilerplate = ("Weights only load failed", "Check the documentation", "Please file an issue")
    lines = [line.strip() for line in str(e).splitlines() if line.strip() and not line.startswith(boilerplate)]
    return lines[0][:200] if lines else type(e).__name__


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


__all__ = ["CONFIG", "WEIGHTS", "WEIGHT_FILES", "hf_file", "load_tensors", "read_config", "read_json",
           "weight_files"]
