"""A run directory, the one place that names what a training run keeps in it, and the one reader of the
recipe it was trained with.

    recipe.yaml              the recipe as trained (written by the task that trains it)
    metrics.jsonl            the training loop's log, one JSON object a line
    last/ best/              the loop's checkpoints (`tformer.checkpoints`); step-NNNNNNNN/ kept by
                             train.keep_last; .last.tmp-*, .last.old-* left by an interrupted save
    evals/ averaged/         train.average_last: the weights of the last evaluations and their mean
    tensorboard/             train.tensorboard's event files
    <split>.json <split>.hyp the scores on a split once trained, and its translations one a line
    samples.txt              a language model's samples once trained
    report.html              `tformer report`'s page (not the run's: kept when the run is replaced)
    .lock                    held by the training that owns the directory (`training.rundir`)

This module sits below training, tasks and inference alike (it imports only files, configio and errors),
so that reading a run's recipe beside a checkpoint never imports the training loop.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tformer.configio import dump_yaml, from_dict, read_yaml, to_dict
from tformer.errors import UserError
from tformer.files import write_atomic

C = TypeVar("C")

RECIPE_FILE = "recipe.yaml"
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.txt"
LOCK_FILE = ".lock"
REPORT_FILE = "report.html"
LAST, BEST = "last", "best"
KEPT_PREFIX = "step-"  # step-NNNNNNNN/: a `last` kept by train.keep_last
EVALS_DIR, AVERAGED_DIR, TENSORBOARD_DIR = "evals", "averaged", "tensorboard"
RESULT_SPLITS = ("test", "valid")  # the splits a run scores once trained
RESULTS_SUFFIX, HYPOTHESES_SUFFIX = ".json", ".hyp"
RUN_FILES = (METRICS_FILE, RECIPE_FILE, SAMPLES_FILE,
             *(f"{split}{suffix}" for split in RESULT_SPLITS for suffix in (RESULTS_SUFFIX, HYPOTHESES_SUFFIX)))


@dataclass(frozen=True)
class RunDir:
    """The directory `path` of one training run: the path of each thing a run keeps there (see the module
    docstring), and its recipe read back (`read_recipe`, `section`, `settings`)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))  # a str or any os.PathLike is taken too

    @classmethod
    def of_checkpoint(cls, checkpoint: str | os.PathLike) -> RunDir:
        """The run a checkpoint directory (RUN_DIR/last, RUN_DIR/best) belongs to: its parent, resolved."""
        return cls(Path(checkpoint).resolve().parent)

    # --- names -----------------------------------------------------------------------------------------

    @property
    def recipe(self) -> Path:
        return self.path / RECIPE_FILE

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def samples(self) -> Path:
        return self.path / SAMPLES_FILE

    @property
    def lock(self) -> Path:
        return self.path / LOCK_FILE

    @property
    def last(self) -> Path:
        return self.path / LAST

    @property
    def best(self) -> Path:
        return self.path / BEST

    @property
    def preferred(self) -> tuple[Path, Path]:
        """The checkpoints a user of the trained run means, in order: best/, else last/."""
        return self.best, self.last

    def trained(self) -> Path | None:
        """The first of `preferred` that is a directory; None if the run holds neither."""
        return next((checkpoint for checkpoint in self.preferred if checkpoint.is_dir()), None)

    def kept(self, step: int) -> Path:
        """step-NNNNNNNN/: the `last` of `step`, kept by train.keep_last."""
        return self.path / f"{KEPT_PREFIX}{step:08d}"

    @property
    def evals(self) -> Path:
        return self.path / EVALS_DIR

    @property
    def averaged(self) -> Path:
        return self.path / AVERAGED_DIR

    @property
    def tensorboard(self) -> Path:
        return self.path / TENSORBOARD_DIR

    @property
    def report(self) -> Path:
        """report.html: `tformer report`'s page, by default."""
        return self.path / REPORT_FILE

    def results(self, split: str) -> Path:
        """<split>.json: the scores on `split` once trained."""
        return self.path / f"{split}{RESULTS_SUFFIX}"

    def hypotheses(self, split: str) -> Path:
        """<split>.hyp: the translations of `split`, one a line."""
        return self.path / f"{split}{HYPOTHESES_SUFFIX}"

    # --- the recipe ------------------------------------------------------------------------------------

    def write_recipe(self, recipe: Any) -> Path:
        """recipe.yaml: the recipe dataclass as plain YAML, written atomically."""
        return write_atomic(self.recipe, dump_yaml(to_dict(recipe)))

    def read_recipe(self) -> dict | None:
        """recipe.yaml as plain data ({} for an empty file), or None if the run has none; a UserError naming
        the file for one that is not YAML, or not a mapping of sections."""
        if not self.recipe.is_file():
            return None
        with self._reading():
            return read_yaml(self.recipe, what="the file") or {}

    def section(self, name: str) -> dict:
        """The mapping under `name` in recipe.yaml: {} without the file, the section, or with an empty one; a
        UserError naming the file for one that is not a mapping."""
        data = (self.read_recipe() or {}).get(name) or {}
        if not isinstance(data, dict):
            raise self._invalid(f"{name}: expected a mapping, got {type(data).__name__}")
        return data

    def settings(self, cls: type[C], name: str | None = None) -> C | None:
        """The recipe as dataclass `cls`, or with `name` its section of that name (e.g. `decode` as a
        DecodeConfig); None if the run has no recipe.yaml. An unknown key or a bad value: a UserError naming
        the file."""
        if not self.recipe.is_file():
            return None
        data = self.section(name) if name is not None else self.read_recipe() or {}
        with self._reading():
            return from_dict(cls, data, where=f"{name}." if name is not None else "")

    def _invalid(self, reason: str) -> UserError:
        return UserError(f"{self.recipe} (the run's recipe beside the checkpoint) is not a valid recipe: {reason}")

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Any problem with recipe.yaml's contents as one line naming the file."""
        try:
            yield
        except (ValueError, TypeError) as e:
            raise self._invalid(" ".join(str(e).split()) or type(e).__name__) from None


def is_checkpoint_name(name: str) -> bool:
    """Whether an entry of a run directory named `name` is one of its checkpoints (last, best, step-*)."""
    return name in (LAST, BEST) or name.startswith(KEPT_PREFIX)


__all__ = ["AVERAGED_DIR", "BEST", "EVALS_DIR", "KEPT_PREFIX", "LAST", "LOCK_FILE", "METRICS_FILE", "RECIPE_FILE",
           "RUN_FILES", "SAMPLES_FILE", "TENSORBOARD_DIR", "RunDir", "is_checkpoint_name"]
