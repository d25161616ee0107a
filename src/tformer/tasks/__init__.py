"""Jobs built on the library: each task has a typed recipe (read from YAML plus key=value overrides) and
the functions that train and evaluate it; `base` holds what they share (the model spec and the training
skeleton `run_task`). Using a trained model is `tformer.inference`'s."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tformer.configio import (
    apply_overrides,
    dump_yaml,
    flat_keys,
    from_dict,
    nested_keys,
    nested_matches,
    parse_yaml,
    read_yaml,
    to_dict,
)
from tformer.errors import UserError
from tformer.recipes import resolve
from tformer.tasks.base import ModelSpec, Resume, run_task
from tformer.tasks.bert import PretrainRecipe, train_bert
from tformer.tasks.classify import ClassifyRecipe, train_classifier
from tformer.tasks.lm import LMRecipe, train_lm
from tformer.tasks.translation import TranslationRecipe, train_translation

# task name -> (recipe dataclass, function(recipe, *, resume, progress) -> final training state)
TASKS: dict[str, tuple[type, Callable[..., dict]]] = {
    "translation": (TranslationRecipe, train_translation),
    "lm": (LMRecipe, train_lm),
    "bert": (PretrainRecipe, train_bert),
    "classify": (ClassifyRecipe, train_classifier),
}


def load_recipe(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """A recipe from a YAML file, or a shipped recipe's name (`tformer.recipes`), with `a.b.c=value`
    overrides (values parsed as YAML)."""
    path = resolve(path)
    data = read_yaml(path, what=f"config file {path}")
    if data is None:  # an empty recipe would silently train the defaults
        raise UserError(f"config file {path} is empty; expected a recipe: a mapping of task, data, model, train")
    apply_overrides(data, overrides)
    task = data.get("task", "translation")
    if not isinstance(task, str) or task not in TASKS:
        raise UserError(f"task={task!r} is not one of {', '.join(TASKS)}")
    return from_dict(TASKS[task][0], data)


def resume_of(path: str | Path, overrides: list[str] | tuple[str, ...]) -> Resume:
    """`--resume` of the command `train PATH OVERRIDES...`, as `train` takes it (`tasks.base.Resume`): the keys
    the overrides give, and the recipe at `path` without them (None if it cannot be built alone)."""
    try:
        base = flat_keys(parse_yaml(dump_yaml(to_dict(load_recipe(path))), what="the recipe"))
    except ValueError:  # a recipe that needs its overrides (data.train=...): the run is not described
        base = None
    return Resume(given=tuple(item.partition("=")[0] for item in overrides), base=base)


def meant_key(name: str) -> str | None:
    """The recipe key that `name`, a setting spelt as an option (`--time-budget`, `--out-dir`), most likely
    means (`train.time_budget_min`, `out_dir`), from the translation recipe's keys first, then the other
    tasks'; None when no key is close."""
    name = name.lstrip("-").replace("-", "_")
    for cls, _ in TASKS.values():
        if name in nested_keys(cls):
            return name
        if found := nested_matches(cls, name, n=1):
            return found[0]
    return None


def train(recipe: Any, *, resume: bool | Resume = False, overwrite: bool = False, progress: bool = True) -> dict:
    """Run the training function of the recipe's task (after checking that its device is here, and
    TensorBoard where the recipe asks for it: a run that cannot start leaves nothing behind). `overwrite`
    replaces a run already in out_dir, which is refused otherwise (see `tformer.training.rundir`)."""
    from tformer.data.device import resolve_device
    from tformer.training.distributed import launched_world
    from tformer.training.logger import check_tensorboard

    resolve_device(recipe.train.device, local_rank=launched_world().local_rank)
    if recipe.train.tensorboard:
        check_tensorboard()
    return TASKS[recipe.task][1](recipe, resume=resume, overwrite=overwrite, progress=progress)


__all__ = ["TASKS", "ModelSpec", "Resume", "load_recipe", "meant_key", "resume_of", "run_task", "train"]
