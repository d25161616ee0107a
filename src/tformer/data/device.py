"""Moving batches to the model's device: every task's batch is a dataclass (or tuple, list, dict) of
tensors and plain values, built on the CPU by the data code; training and evaluation move it where the
model is, here, rather than each task knowing about devices."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

import torch
from torch import nn

T = TypeVar("T")


def to_device(obj: T, device: torch.device | str) -> T:
    """`obj` with every tensor in it on `device` (dataclasses, tuples, lists and dicts are rebuilt; other
    values kept). Tensors already there are returned as they are, so on the CPU this copies nothing."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: to_device(getattr(obj, f.name), device)
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a NamedTuple
        return type(obj)(*(to_device(x, device) for x in obj))
    if isinstance(obj, list | tuple):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def device_of(model: nn.Module) -> torch.device:
    """Where the model's parameters are (the CPU for a model without any)."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def resolve_device(name: str, *, local_rank: int = 0, what: str = "train.device") -> torch.device:
    """"auto": a GPU when torch sees one (under torchrun, the one numbered by the process's local rank),
    else the CPU; "cpu", "cuda" or "cuda:N" as given. A ValueError for a GPU that is not there, naming the
    setting as `what` (the recipe key, or a command's option)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"{what}={name!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"{what}={name!r} is not allowed; use auto, cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{what}={name!r} but torch sees no GPU here; use cpu or auto")
        device = torch.device("cuda", local_rank if device.index is None else device.index)
        torch.cuda.set_device(device)
    return device


__all__ = ["device_of", "resolve_device", "to_device"]
