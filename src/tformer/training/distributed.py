"""Data-parallel training on `torch.distributed`, as started by torchrun:

    torchrun --nproc_per_node=N -m tformer train CONFIG.yaml

torchrun sets RANK, WORLD_SIZE and the rendezvous address in each process's environment; `setup` joins the
process group (gloo on CPU, nccl when the model is on a GPU) and wraps the model in
DistributedDataParallel (every rank holds the whole model; gradients are averaged by all-reduce during
backward) or, with train.distributed=fsdp, shards every block's parameters, gradients and optimizer state
over the ranks (FSDP2 `fully_shard`, for a model that does not fit one device).

Every rank computes the same epoch order from (seed, epoch) and reads its own micro-batches of each step
(see `shard`); only rank 0 evaluates, logs and writes checkpoints, which always hold the whole model and
optimizer, so a run saved with N ranks resumes with M.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from tformer.data.device import device_of
from tformer.errors import UserError

STRATEGIES = ("ddp", "fsdp")


@dataclass(frozen=True)
class World:
    """Where this process stands: rank in 0..size-1. A single process is World(0, 1)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0  # the rank among this machine's processes: which GPU it drives

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.size > 1


def launched_world() -> World:
    """The world torchrun describes in the environment, or a single process."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return World()
    return World(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")))


def setup(model: nn.Module, strategy: str) -> tuple[nn.Module, nn.Module, World]:
    """Join the process group torchrun describes (if any) and wrap `model` for it: (model to train, model
    to evaluate and save, world). A single process gets `model` back twice, unchanged; DDP trains the
    wrapper and evaluates the module inside; FSDP trains the sharded model and evaluates a whole copy
    (sharding saves the gradients' and optimizer's memory, three quarters of Adam's training state; decoding
    calls the model's parts one by one, which sharded modules do not support)."""
    world = launched_world()
    if not world.is_distributed:
        return model, model, world
    if strategy not in STRATEGIES:
        raise UserError(f"train.distributed={strategy!r} is not allowed; choose one of {', '.join(STRATEGIES)}")
    device = device_of(model)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if strategy == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids), model, world
    from torch.distributed.fsdp import fully_shard

    replica = copy.deepcopy(model)
    for block in _blocks(model):  # shard block by block, so only one block is gathered at a time
        fully_shard(block)
    fully_shard(model)
    return model, replica, world


def refresh(replica: nn.Module, model: nn.Module) -> None:
    """Copy the trained weights into the evaluation copy: a no-op unless `model` is FSDP-sharded, whose
    shards are gathered (every rank must call it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        replica.load_state_dict(get_model_state_dict(model, options=StateDictOptions(full_state_dict=True)))


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated layers of every stack (the units FSDP gathers one at a time)."""
    return [layer for module in model.modules() if isinstance(module, nn.ModuleList) for layer in module]


def shard(batches: list[Any], world: World) -> list[Any]:
    """This rank's micro-batches of one step: a step takes accum_steps * world.size consecutive micro-batches
    of the epoch order, and rank r reads every size-th one from r on. One process with accum_steps = A * N
    sees the same micro-batches as N ranks with accum_steps = A."""
    return batches[world.rank :: world.size]


def all_reduce(values: list[float], world: World, *, op: str = "sum") -> list[float]:
    """Element-wise sum (op="sum") or maximum (op="max") over the ranks; the values themselves on a single
    process."""
    if not world.is_distributed:
        return values
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return t.tolist()


def barrier(world: World) -> None:
    if world.is_distributed:
        dist.barrier()


def gather_objects(obj: Any, world: World) -> list[Any]:
    """[obj of rank 0, obj of rank 1, ...] on every rank ([obj] on a single process)."""
    if not world.is_distributed:
        return [obj]
    out: list[Any] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Tensor], dict] | None:
    """(model state dict, optimizer state dict) of the whole model on CPU, in the layout a single process
    saves (`optimizer.state_dict()` numbers parameters in group order), or None when nothing is sharded
    (not FSDP). Every rank must call it; rank 0 gets the states."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        return None
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(model, options=options)
    by_name = get_optimizer_state_dict(model, optimizer, options=options)
    if not by_name:  # ranks other than 0 receive nothing
        return weights, {}
    names = [name for group in _group_names(model, optimizer) for name in group]
    groups = [{**g, "params": list(range(start, start + len(g["params"])))}
              for g, start in zip(by_name["param_groups"], _starts(by_name["param_groups"]), strict=True)]
    state = {i: by_name["state"][name] for i, name in enumerate(names) if name in by_name["state"]}
    return weights, {"state": state, "param_groups": groups}


def load_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, saved: dict) -> None:
    """Load an optimizer state saved by a single process (or by `full_state`) into `optimizer`, sharding
    it when the model is FSDP-sharded."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        optimizer.load_state_dict(saved)
        return
    names = [name for group in _group_names(model, optimizer) for name in group]
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in saved["param_groups"]]
    state = {names[i]: value for i, value in saved["state"].items()}
    set_optimizer_state_dict(model, optimizer, {"state": state, "param_groups": groups},
                             options=StateDictOptions(full_state_dict=True))


def _group_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[list[str]]:
    name_of = {id(p): name for name, p in model.named_parameters()}
    return [[name_of[id(p)] for p in group["params"]] for group in optimizer.param_groups]


def _starts(groups: list[dict]) -> list[int]:
    starts, n = [], 0
    for g in groups:
        starts.append(n)
        n += len(g["params"])
    return starts


def teardown(world: World) -> None:
    """End the process group once every rank is done with it (a run that ended normally): a rank that
    destroys it while another still works (rank 0 writing the last checkpoint) could hang in the shutdown,
    about one run in forty with gloo."""
    if world.is_distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


__all__ = ["STRATEGIES", "World", "all_reduce", "barrier", "full_state", "gather_objects", "launched_world",
           "load_optimizer_state", "refresh", "setup", "shard", "teardown"]
