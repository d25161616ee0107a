"""`tformer train` with mutated overrides, by property (Hypothesis): starting from the catalogue's tiny recipes
(a translation and a language model over tiny files), one to three `key=value` overrides of the recipe's real
keys, its model's and bogus ones, each set to YAML of any kind (integers huge and negative, floats inf and nan,
tags, strings, flow collections, broken syntax). The contract (`contracts.check_train`): the run trains (stopped
after its first step, to stay fast), or it is refused with exit 2, one line `tformer: error: ...` and the
directory byte for byte as before, or a run that started stops with that line last. Never a traceback.
`python -m benchmarks.fuzz` runs the same property with many more examples."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given, settings

from tests.properties.contracts import check_train, overrides, recipe_keys, world

FEW = settings(max_examples=80, deadline=None, derandomize=True, database=None)


@pytest.fixture(scope="module")
def recipes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    built = world(tmp_path_factory.mktemp("world"))
    return {"translation": built.recipe, "lm": built.lm_recipe}


@pytest.mark.parametrize("task", ["translation", "lm"])
def test_mutated_overrides_train_or_are_refused_in_one_line(task: str, recipes: dict[str, Path],
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    recipe = recipes[task]

    @FEW
    @given(overrides(recipe_keys(recipe)))
    @example(["data.max_len=2"])  # an IndexError at the first batch: every training pair dropped
    @example(["model.overrides.max_len=16"])  # refused at the first step, after recipe.yaml was written
    @example(["train.threads=100000"])  # OpenMP aborted the process
    @example(["data.vocab_size=4294967296"])  # the tokenizer trainer aborted the process from Rust
    @example(["data.vocab_size=9223372036854775807"])  # ... or panicked (a PanicException's traceback)
    def mutated(items: list[str]) -> None:
        check_train(recipe, items, tmp_path_factory.mktemp("case"))

    mutated()
