"""Moving batches to the model's device: every task's batch is a dataclass (or tuple, list, dict) of
tensors and plain values, built on the CPU by the data code; training and evaluation move it where the
model is, here, rather than each task knowing about devices."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from tformer.errors import UserError

T = TypeVar("T")


def to_device(obj: T, device: torch.device | str) -> T:
    """`obj` with every tensor in it on `device` (dataclasses, tuples, lists and dicts are rebuilt; other
    values kept). Tensors already there are returned as they are, so on the CPU this copies nothing. To a
    GPU, a CPU tensor goes through pinned memory without waiting: a plain copy from pageable memory makes
    the host wait until the device has run everything queued before it, as a DataLoader with
    pin_memory=True avoids."""
    to_gpu = torch.device(device).type == "cuda"

    def move(t: torch.Tensor) -> torch.Tensor:
        if to_gpu and t.device.type == "cpu":
            return t.pin_memory().to(device, non_blocking=True)
        return t.to(device)

    return map_tensors(obj, move)


def tensors_in(obj: object) -> list[torch.Tensor]:
    """Every tensor in a batch, in `map_tensors`' order: the same positions for every batch of one task."""
    found: list[torch.Tensor] = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        found.append(t)
        return t

    map_tensors(obj, keep)
    return found


def map_tensors(obj: T, fn: Callable[[torch.Tensor], torch.Tensor]) -> T:
    """`obj` with `fn` applied to every tensor in it, in a fixed order (dataclasses, tuples, lists and dicts
    are rebuilt; other values kept)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: map_tensors(getattr(obj, f.name), fn)
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a NamedTuple
        return type(obj)(*(map_tensors(x, fn) for x in obj))
    if isinstance(obj, list | tuple):
        return type(obj)(map_tensors(x, fn) for x in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return obj


def device_of(model: nn.Module) -> torch.device:
    """Where the model's parameters are (the CPU for a model without any)."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def resolve_device(name: str, *, local_rank: int = 0, what: str = "train.device", mps: bool = False) -> torch.device:
    """"auto": a GPU when torch sees one (under torchrun, the one numbered by the process's local rank),
    else (with `mps`, for inference) Apple's GPU when there is one, else the CPU; "cpu", "cuda", "cuda:N" or
    (with `mps`) "mps" as given. A ValueError for a device that is not there, naming the setting as `what`
    (the recipe key, or a command's option)."""
    allowed = "auto, cpu, cuda, cuda:N or mps" if mps else "auto, cpu, cuda or cuda:N"
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if mps and _mps_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"{what}={name!r} is not a device; use {allowed}") from None
    if device.type not in (("cpu", "cuda", "mps") if mps else ("cpu", "cuda")):
        raise UserError(f"{what}={name!r} is not allowed; use {allowed}")
    if device.type == "mps" and not _mps_available():
        raise UserError(f"{what}={name!r} but torch sees no Apple GPU (MPS) here; use cpu or auto")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"{what}={name!r} but torch sees no GPU here; use cpu or auto")
        index = local_rank if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise UserError(f"{what}={name!r} but torch sees {torch.cuda.device_count()} GPU(s) here "
                             f"(cuda:0 .. cuda:{torch.cuda.device_count() - 1})")
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
    return device


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(name: str, *, what: str = "--dtype") -> torch.dtype:
    """The floating-point type a model runs in for inference, by name: float32, bfloat16 or float16 (both
    half types run on the CPU too, slowly; bfloat16 keeps float32's range, float16 does not)."""
    if name not in DTYPES:
        raise UserError(f"{what}={name!r} is not allowed; use {', '.join(DTYPES)}")
    return DTYPES[name]


def place(model: nn.Module, *, device: str = "cpu", dtype: str = "float32") -> nn.Module:
    """`model` moved to `device` (as `resolve_device(mps=True)` reads it) with its floating-point weights in
    `dtype`; the names are checked by `check_placement` (call it before a long load to fail first). A model
    larger than a GPU's free memory is refused before it is moved (`check_room`)."""
    where, kind = check_placement(device=device, dtype=dtype)
    if where.type == "cuda":
        tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}.values()
        needed = sum(t.numel() * (kind.itemsize if t.is_floating_point() else t.element_size()) for t in tensors)
        check_room(needed, where, what="the model needs {size} for its weights")
    return model.to(device=where, dtype=kind)


GIB = 2**30


def free_memory(device: torch.device) -> int | None:
    """The bytes `device` can still allocate, as far as the system says: a GPU's free memory; for the CPU the
    memory available (/proc/meminfo's MemAvailable, else the free pages), less where a cgroup's memory.max or
    the process's address-space limit (`ulimit -v`) leaves less; None where it cannot be known (mps)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    room = [n for n in (_available_ram(), _cgroup_room(), _address_space_room()) if n is not None]
    return min(room) if room else None


def check_room(needed: int, device: torch.device, *, what: str) -> None:
    """A UserError when `needed` bytes are more than `device` has free (`free_memory`): `what`, with
    {size} for the size needed, then the size there is, e.g. "the model needs 152.6 GiB for its weights
    (d_ff=40000000), more than the 22.1 GiB this machine has free"."""
    free = free_memory(device)
    if free is None or needed <= free:
        return
    there = "this machine" if device.type == "cpu" else str(device)
    raise UserError(f"{what.format(size=f'{needed / GIB:.1f} GiB')}, more than the {free / GIB:.1f} GiB {there} "
                    "has free")


def _available_ram() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):  # not a POSIX system
        return None


def _cgroup_room() -> int | None:
    """What a cgroup v2 memory limit leaves (memory.max less memory.current); None without one."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        return None if limit == "max" else max(0, int(limit) - int(used))
    except (OSError, ValueError):
        return None


def _address_space_room() -> int | None:
    """What `ulimit -v` (RLIMIT_AS) leaves this process: the limit less its address space now."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY:
            return None
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return max(0, limit - int(line.split()[1]) * 1024)
        return limit
    except (ImportError, OSError, ValueError, IndexError):
        return None


def check_placement(*, device: str, dtype: str) -> tuple[torch.device, torch.dtype]:
    """The device and dtype an inference command names (`--device`, `--dtype`), checked."""
    return resolve_device(device, what="--device", mps=True), resolve_dtype(dtype)


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


__all__ = ["DTYPES", "GIB", "check_placement", "check_room", "device_of", "free_memory", "place", "resolve_device",
           "resolve_dtype", "to_device"]
