"""What makes a training run resumable: the loop's checkpoints (out_dir/last, out_dir/best, and the
step-NNNNNNNN/ copies `train.keep_last` keeps), the check that a resumed run trains the same model, and
restoring the optimizer, schedule, RNG and loop state from out_dir/last (`loop.fit` calls these)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tformer.checkpoints import load_config
from tformer.config import ModelConfig
from tformer.configio import flat_keys, to_dict
from tformer.errors import UserError
from tformer.runs import KEPT_PREFIX, LAST, RunDir
from tformer.tokenization import Tokenizer
from tformer.training import distributed as dist
from tformer.training.average import EvalAverages
from tformer.training.checkpoint import read_trainer, restore_scaler, save_checkpoint
from tformer.training.config import TrainConfig
from tformer.training.rng import rng_states, set_rng_states


class Checkpoints:
    """out_dir/last and out_dir/best for the loop. Every rank calls `save` (FSDP gathers the shards there);
    rank 0 writes. `last` is written at most once a step; with train.keep_last > 1 the checkpoint it
    replaces is kept as step-NNNNNNNN/ and the oldest beyond keep_last are deleted."""

    def __init__(self, out_dir: Path, *, model: nn.Module, whole: nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: torch.optim.lr_scheduler.LRScheduler, config: ModelConfig, tokenizer: Tokenizer | None,
                 train: TrainConfig, world: dist.World, last_step: int | None,
                 scaler: torch.amp.GradScaler | None = None) -> None:
        self.out_dir, self.model, self.whole, self.scaler = out_dir, model, whole, scaler
        self.optimizer, self.scheduler = optimizer, scheduler
        self.config, self.tokenizer, self.train, self.world = config, tokenizer, train, world
        self.last_step = last_step  # the step `last` holds (None: none written by this run or its predecessor)

    def save(self, name: str, state: dict[str, Any]) -> None:
        if name == LAST and self.last_step == state["step"]:
            return  # saved at this step already (an evaluation, then a signal): the same state
        gathered = dist.full_state(self.model, self.optimizer)
        ranks_rng = dist.gather_objects(rng_states(), self.world)
        if self.world.is_main:
            keep = None
            if name == LAST and self.train.keep_last > 1 and self.last_step is not None:
                keep = RunDir(self.out_dir).kept(self.last_step)
            save_checkpoint(self.out_dir / name, model=self.whole, config=self.config, optimizer=self.optimizer,
                            scheduler=self.scheduler, state={**state, "world_rng": ranks_rng},
                            tokenizer=self.tokenizer, keep_previous_as=keep,
                            model_state=gathered and gathered[0], optimizer_state=gathered and gathered[1],
                            scaler=self.scaler)
            if name == LAST:
                _prune(self.out_dir, self.train.keep_last - 1)
        if name == LAST:
            self.last_step = state["step"]
        dist.barrier(self.world)


    def save_average(self, state: dict[str, Any], n: int) -> None:
        """out_dir/averaged: the mean weights of this evaluation and the n - 1 before it (`average.py`)."""
        gathered = dist.full_state(self.model, self.optimizer)
        if self.world.is_main:
            weights = gathered[0] if gathered else self.whole.state_dict()
            EvalAverages(self.out_dir, n).add(state["step"], weights, model=self.whole, config=self.config,
                                              tokenizer=self.tokenizer)
        dist.barrier(self.world)


def check_resumable(out_dir: Path, config: ModelConfig, train: TrainConfig) -> None:
    """Refuse to resume out_dir/last with a model config other than the one it was trained with, naming the
    first field that differs (training settings such as max_steps may change; the model may not), or with a
    file the resumed training will read that cannot be read (train.average_last's evals/): refused when the
    run starts, before a step is trained, not when the file is first needed."""
    last = RunDir(out_dir).last
    if not last.is_dir():
        raise UserError(f"cannot resume: no checkpoint at {last} (train without --resume to start afresh)")
    saved, _ = load_config(last)
    if type(saved) is not type(config):
        raise UserError(f"cannot resume {last}: it holds a {type(saved).__name__}, the recipe builds a "
                         f"{type(config).__name__}")
    old, new = flat_keys(to_dict(saved)), flat_keys(to_dict(config))
    for key in sorted(old.keys() | new.keys()):
        if old.get(key) != new.get(key):
            raise UserError(f"cannot resume {last}: model {key} is {old.get(key)!r} in the checkpoint but "
                             f"{new.get(key)!r} in the recipe; keep the model settings, or start a new out_dir")
    if train.average_last is not None:
        EvalAverages(out_dir, train.average_last).check()


def restore(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
             scheduler: torch.optim.lr_scheduler.LRScheduler, train: TrainConfig, world: dist.World, *,
             scaler: torch.amp.GradScaler | None = None) -> dict:
    """The optimizer, schedule, loss scale (fp16) and RNG states from a checkpoint's trainer.pt (the
    weights are loaded already); returns the loop state. With as many ranks as saved it, each rank gets its
    own RNG back; with another number, rank 0 gets the saved one and the others a seed derived from it."""
    trainer = read_trainer(path)
    dist.load_optimizer_state(model, optimizer, trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])
    if scaler is not None:
        restore_scaler(scaler, trainer)
    state = dict(trainer["state"])
    ranks_rng = state.pop("world_rng", None) or [trainer["rng"]]
    if len(ranks_rng) == world.size:
        set_rng_states(ranks_rng[world.rank])
    else:
        set_rng_states(ranks_rng[0])
        if world.rank > 0:
            torch.manual_seed(train.seed + 1_000_003 * world.rank + state["step"])
    return state


def set_next_lr(optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LambdaLR) -> None:
    """The lr of the next step under this run's settings, not the one the checkpoint computed under its
    own: a resumed run may have another max_steps or time budget, which a fitted schedule follows. With
    the same settings it is the same number (LambdaLR's own expression)."""
    lrs = [base * fn(scheduler.last_epoch) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)]
    for group, lr in zip(optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    scheduler._last_lr = lrs


def _prune(out_dir: Path, keep: int) -> None:
    """Delete all but the newest `keep` of out_dir/step-NNNNNNNN/."""
    old = sorted(out_dir.glob(f"{KEPT_PREFIX}[0-9]*"))
    for path in old[: max(len(old) - keep, 0)]:
        shutil.rmtree(path, ignore_errors=True)


__all__ = ["Checkpoints", "check_resumable", "restore", "set_next_lr"]
