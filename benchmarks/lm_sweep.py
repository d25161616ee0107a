"""Short character-level GPT runs on the Bible that differ in one thing (the attention kind in `quality.py`,
the positions in `extrapolation.py`): the recipe every run shares, training one run from scratch, running
every variant so that one failure keeps the others' results, and writing the results and the table.

    short_run(config, steps=, block=, max_len=, batch=, eval_tokens=)   the dotted overrides every run shares
    recipe_with(config, overrides)      the recipe, read as `tformer train CONFIG key=value ...` would read it
    train_fresh(recipe, progress=)      (final state, seconds): trained from scratch, its run directory replaced
    each(names, run, key=)              one row per name: {key: name, **run(name)} or {key: name, "error": ...}
    write_results(out, info, rows, table)  OUT/results.json and OUT/table.md
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from benchmarks.common import write_json
from tformer import recipes
from tformer.tasks import load_recipe
from tformer.tasks.lm import LMRecipe, train_lm

CONFIG = recipes.path("gpt-bible")  # src/tformer/recipes/gpt-bible.yaml
MODEL = {"d_model": 128, "n_heads": 4, "d_ff": 512, "n_layers": 4}  # the model every variant changes one thing of


def short_run(config: Path, *, steps: int, block: int, max_len: int, batch: int, eval_tokens: int) -> dict[str, Any]:
    """Dotted recipe keys -> values, the same for every variant: `steps` steps of `batch` x `block` tokens,
    one evaluation at the end, the preset's warm-up fraction, a cosine decay ending at the last step."""
    schedule = load_recipe(config).train.schedule
    warmup = min(round(steps * schedule.warmup / schedule.total_steps), steps - 1)
    return {
        "data.block_size": block,
        "data.batch_size": batch,
        "data.eval_tokens": eval_tokens,
        **{f"model.overrides.{k}": v for k, v in MODEL.items()},
        "model.overrides.max_len": max_len,
        "train.max_steps": steps,
        "train.time_budget_min": None,
        "train.eval_every": steps,
        "train.schedule.warmup": warmup,
        "train.schedule.total_steps": steps,
        "sample.prompts": [],
    }


def recipe_with(config: Path, overrides: dict[str, Any]) -> LMRecipe:
    """The recipe with `overrides` applied, as `tformer train CONFIG key=value ...` would read it."""
    return load_recipe(config, [f"{key}={json.dumps(value)}" for key, value in overrides.items()])


def train_fresh(recipe: LMRecipe, *, progress: bool) -> tuple[dict[str, Any], float]:
    """Train from scratch (no stale checkpoint or log from an earlier run): the final state and seconds."""
    shutil.rmtree(recipe.out_dir, ignore_errors=True)
    start = time.perf_counter()
    state = train_lm(recipe, progress=progress)
    return state, time.perf_counter() - start


def error_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def each(names: Iterable[str], run: Callable[[str], dict[str, Any]], *, key: str) -> list[dict[str, Any]]:
    """Run every name; a failure becomes its row's "error" and the others still run."""
    rows = []
    for name in names:
        print(f"--- {key}: {name}", file=sys.stderr)
        try:
            rows.append({key: name, **run(name)})
        except Exception as e:  # one broken variant must not lose the others' results
            rows.append({key: name, "error": error_line(e)})
            print(f"{name} failed: {rows[-1]['error']}", file=sys.stderr)
    return rows


def write_results(out: Path, info: dict[str, Any], rows: list[dict[str, Any]], table: str) -> None:
    write_json(out / "results.json", {**info, "results": rows})
    (out / "table.md").write_text(table + "\n")
    print(f"\nwrote {out / 'results.json'} and {out / 'table.md'}", file=sys.stderr)
