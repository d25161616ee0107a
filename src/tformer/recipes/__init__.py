"""The YAML recipes that ship inside the package (this folder), found by name as torchtune's `tune ls/cp` do.

    names()                  the shipped recipes' names: demo, gpt-bible, ... (file names without .yaml)
    summary(name)            its first comment line (what `tformer recipes list` prints beside the name)
    path(name)               the shipped file of recipe `name` (".yaml" optional)
    resolve(arg)             what `tformer train ARG` / `tformer demo ARG` read: an existing file, else a
                             shipped recipe's name; a bare name that is neither is an error listing the names
    copy(name, dest)         the recipe written to `dest` to edit: a file (through `files.write_output`, as
                             every command's output), a folder to put NAME.yaml in, or - for stdout

Every problem is a one-line ValueError naming the bad value and the known names.
"""

from __future__ import annotations

import os
from pathlib import Path

from tformer.errors import UserError

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
        raise UserError(f"no shipped recipe named {name!r}; known: {', '.join(names())}")
    return HERE / f"{stem}{SUFFIX}"


def resolve(arg: str | os.PathLike) -> Path:
    """`arg` itself when it exists or is a path with a folder (`runs/x.yaml`: reading it gives its own
    errors), else the shipped recipe of that name."""
    given = Path(arg)
    if given.exists() or "/" in str(arg) or os.sep in str(arg) or not str(arg):
        return given
    stem = given.name.removesuffix(SUFFIX)
    if stem not in names():
        raise UserError(f"{str(arg)!r} is neither a recipe file nor a shipped recipe; shipped recipes: "
                         f"{', '.join(names())} (tformer recipes list)")
    return HERE / f"{stem}{SUFFIX}"


def copy(name: str, dest: str | os.PathLike, *, overwrite: bool = False) -> Path | None:
    """Write recipe `name` to `dest` through the one output writer (`files.write_output`), and return the
    path written: "-" is standard output (returns None); a folder gets NAME.yaml; a FIFO, a device or a pipe
    is written in place, a symbolic link's target is written (the link stays), a file keeps its permission
    bits. Anything already at the path (a file, a link, dangling or not, a FIFO, a device) is refused unless
    `overwrite`; so are an empty `dest` and a folder that does not exist (a trailing slash names a folder)."""
    from tformer.files import is_special_file, write_output

    source = path(name)
    text = source.read_bytes()
    dest = os.fspath(dest)
    if dest == "-":
        write_output(dest, text)
        return None
    if not dest.strip():
        raise UserError(f"DEST {dest!r} is empty; give a file to write, a folder, or - for standard output")
    target = Path(dest)
    if dest.endswith(("/", os.sep)) and not target.is_dir():
        raise UserError(f"cannot write into {dest}: no such folder; create it, or give a file name")
    if target.is_dir():
        target = target / source.name
    if (target.exists() or target.is_symlink()) and not overwrite:
        raise UserError(f"{target} already exists; add --overwrite to replace it")
    written = Path(os.path.realpath(target)) if target.is_symlink() else target
    if not is_special_file(target) and not written.parent.is_dir():
        raise UserError(f"cannot write {target}: folder {written.parent} does not exist")
    write_output(target, text)
    return target


__all__ = ["copy", "names", "path", "resolve", "summary"]
