"""User text, one item a line: the one reader of a file (or stdin) of sentences to translate, texts to
classify, lines to score; and the check, made before a long job starts, that the file its results go to
can be written. Both fail with a ValueError of one line naming the file and what is wrong."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def read_lines(path: str | os.PathLike | None) -> list[str]:
    """The lines of a UTF-8 file without their line ends, or of stdin when `path` is None."""
    if path is None:
        return [line.rstrip("\n") for line in sys.stdin]
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ValueError(f"input file {path} does not exist") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"input file {path} is not UTF-8 (byte {e.start})") from None


def check_writable(path: str | os.PathLike, *, what: str) -> None:
    """A ValueError unless a file can be written at `path` (named `what` in the message, e.g. "--output"):
    not a directory, and the closest existing ancestor a directory this process may write in."""
    path = Path(path)
    nearest = next(p for p in path.parents if p.exists())  # the closest existing ancestor
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory; give a file path")
    if not nearest.is_dir():
        raise ValueError(f"{what} {path}: {nearest} is a file; give a file path in a directory")
    if not os.access(nearest, os.W_OK):
        raise ValueError(f"{what} {path}: directory {nearest} is not writable")


__all__ = ["check_writable", "read_lines"]
