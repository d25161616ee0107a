"""Jobs built on the library: each task has a typed recipe (read from YAML plus key=value overrides) and
the functions that train and use it; `base` holds what they share (the model spec, the training skeleton
`run_task`, and `load_checkpoint`, the one way to load a trained model with its config and tokenizer)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tformer.config import from_dict
from tformer.tasks.base import ModelSpec, load_checkpoint, run_task
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
    """A recipe from a YAML file, with `a.b.c=value` overrides (values parsed as YAML)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"config file {path} is not UTF-8 (byte {e.start})") from None
    except yaml.YAMLError as e:
        raise ValueError(f"config file {path} is not valid YAML ({yaml_problem(e)})") from None
    if data is None:  # an empty recipe would silently train the defaults
        raise ValueError(f"config file {path} is empty; expected a recipe: a mapping of task, data, model, train")
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of keys, not {type(data).__name__}")
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not key=value (e.g. train.max_steps=100)")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise ValueError(f"override {item!r}: the value is not valid YAML ({yaml_problem(e)})") from None
        set_dotted(data, key, parsed)
    task = data.get("task", "translation")
    if not isinstance(task, str) or task not in TASKS:
        raise ValueError(f"task={task!r} is not one of {', '.join(TASKS)}")
    return from_dict(TASKS[task][0], data)


def train(recipe: Any, *, resume: bool = False, progress: bool = True) -> dict:
    """Run the training function of the recipe's task (after checking that its device is here: a run that
    cannot start leaves nothing behind)."""
    from tformer.data.device import resolve_device
    from tformer.training.distributed import launched_world

    resolve_device(recipe.train.device, local_rank=launched_world().local_rank)
    return TASKS[recipe.task][1](recipe, resume=resume, progress=progress)


def yaml_problem(e: yaml.YAMLError) -> str:
    """Where and what a YAML error is, on one line: 'line 2, column 1: expected ...'."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(e).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def set_dotted(data: dict, key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"override {key!r}: {part!r} is not a section")
    node[last] = value


__all__ = ["TASKS", "ModelSpec", "load_checkpoint", "load_recipe", "run_task", "train"]
