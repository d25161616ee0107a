"""The YAML recipes that ship inside the package (this folder), found by name as torchtune's `tune ls/cp` do.

    names()                  the shipped recipes' names: demo, gpt-bible, ... (file names without .yaml)
    summary(name)            its first comment line (what `tformer recipes list` prints beside the name)
    path(name)               the shipped file of recipe `name` (".yaml" optional)
    resolve(arg)             what `tformer train ARG` / `tformer demo ARG` read: an existing file, else a
                             shipped recipe's name; a bare name that is neither is an error listing the names
    copy(name, dest)         the recipe written to `dest` (a file, or a folder to put NAME.yaml in) to edit

Every problem is a one-line ValueError naming the bad value and the known names.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUFFIX = ".yaml"


def names() -> list[str]:
    return sorted(p.name.removesuffix(SUFFIX) for p in HERE.glob(f"*{SUFFIX}"))


def summary(name: str) -> str:
    """The text of the recipe's first comment line ("" for a recipe that starts with no comment)."""
    for line in path(name).read_text(encoding="utf-8").splitlines():
        if line.strip():
            return line.strip().removeprefix("#").strip() if line.lstrip().startswith("#") else ""
    return ""


def path(name: str) -> Path:
    stem = name.removesuffix(SUFFIX)
    if stem not in names():
        raise ValueError(f"no shipped recipe named {name!r}; known: {', '.join(names())}")
    return HERE / f"{stem}{SUFFIX}"


def resolve(arg: str | os.PathLike) -> Path:
    """`arg` itself when it exists or is a path with a folder (`runs/x.yaml`: reading it gives its own
    errors), else the shipped recipe of that name."""
    given = Path(arg)
    if given.exists() or "/" in str(arg) or os.sep in str(arg) or not str(arg):
        return given
    stem = given.name.removesuffix(SUFFIX)
    if stem not in names():
        raise ValueError(f"{str(arg)!r} is neither a recipe file nor a shipped recipe; shipped recipes: "
                         f"{', '.join(names())} (tformer recipes list)")
    return HERE / f"{stem}{SUFFIX}"


def copy(name: str, dest: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write recipe `name` to `dest` (into it as NAME.yaml when `dest` is a folder), atomically; an
    existing file is refused unless `overwrite`. Returns the path written."""
    from tformer.files import write_atomic

    source = path(name)
    target = Path(dest)
    if target.is_dir():
        target = target / source.name
    if target.exists() and not overwrite:
        raise ValueError(f"{target} already exists; add --overwrite to replace it")
    if not target.parent.is_dir():
        raise ValueError(f"cannot write {target}: folder {target.parent} does not exist")
    return write_atomic(target, source.read_bytes())


__all__ = ["copy", "names", "path", "resolve", "summary"]
