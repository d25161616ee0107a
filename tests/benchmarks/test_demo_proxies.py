"""benchmarks.demo_proxies: every variant is a valid recipe (demo-20 plus its overrides), and each one changes
what it names."""

from pathlib import Path

import pytest

from benchmarks.demo_proxies import BASE, VARIANTS, _train_cmd
from tformer.configio import to_dict
from tformer.tasks import load_recipe


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_is_the_base_recipe_with_its_overrides(name: str) -> None:
    base, varied = to_dict(load_recipe(BASE)), to_dict(load_recipe(BASE, VARIANTS[name]))
    changed = {f"{section}.{key}" for section in base for key in (base[section] if isinstance(base[section], dict)
               else {}) if base[section][key] != varied[section][key]}
    assert changed or name == "base"
    touched = {".".join(o.split("=")[0].split(".")[:2]) for o in VARIANTS[name]}
    assert changed <= touched  # nothing else moved


def test_a_proxy_is_a_fixed_number_of_steps_on_one_thread(tmp_path: Path) -> None:
    cmd = _train_cmd("muon", VARIANTS["muon"], 2500, tmp_path, seed=1)
    assert cmd[cmd.index("train") + 1] == BASE == "demo-20"
    recipe = load_recipe(BASE, [a for a in cmd if "=" in a and not a.startswith("-")])
    assert recipe.train.max_steps == 2500 and recipe.train.time_budget_min is None
    assert recipe.train.threads == 1 and not recipe.train.tune_threads and recipe.train.seed == 1
    assert recipe.train.optim.name == "muon" and recipe.out_dir == str(tmp_path / "muon")
