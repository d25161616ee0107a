"""benchmarks/__init__.py is the index of the package: it names every module of benchmarks/ once, and
nothing else, each with where its results go, and every docs/bench/ path it names exists."""

import re
from pathlib import Path

import benchmarks

ROOT = Path(__file__).resolve().parents[2]
ENTRY = re.compile(r"^    (\w+) ")  # an entry's first line; its continuation lines are indented further


def entries() -> dict[str, str]:
    """Module name -> its entry's text (the first line and its continuation lines)."""
    out: dict[str, str] = {}
    name = None
    for line in benchmarks.__doc__.splitlines():
        if match := ENTRY.match(line):
            name = match.group(1)
            assert name not in out, f"{name} is listed twice"
            out[name] = line
        elif name and line.startswith(" " * 5):
            out[name] += " " + line.strip()
        else:
            name = None
    return out


def test_the_index_names_every_module_and_nothing_else() -> None:
    modules = {p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__"}
    listed = set(entries())
    assert listed - modules == set(), "listed but not a module of benchmarks/"
    assert modules - listed == set(), "modules of benchmarks/ missing from the index"


def test_each_entry_says_where_its_results_go() -> None:
    assert [name for name, text in entries().items() if "->" not in text] == []


def test_every_results_path_the_index_names_exists() -> None:
    paths = {m.rstrip(".,)") for m in re.findall(r"docs/bench/[\w./-]*", benchmarks.__doc__)}
    assert paths, "the index names no result under docs/bench/"
    assert sorted(p for p in paths if not (ROOT / p).exists()) == []
