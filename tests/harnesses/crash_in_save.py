"""Run `tformer` and SIGKILL it at one chosen moment inside one chosen save of OUT_DIR/last: the crash a
power cut or an OOM killer deals a checkpoint write, placed exactly instead of by chance.

    python -m tests.harnesses.crash_in_save --save N --at POINT -- train recipe.yaml out_dir=... [--resume]

The moments of a save (`tformer.files.atomic_directory`), in order:
    written     every file of the new checkpoint is in `.last.tmp-*`, nothing flushed to disk yet
    flushed     the new checkpoint is fsync'd, the old `last` still in place
    aside       the old `last` renamed to `.last.old-*` (or step-NNNNNNNN): for a moment there is no `last`
    published   the new checkpoint renamed to `last`, the old one still beside it
    removed     the old one deleted: the save is done

`kill_resume.py --save-crashes` and tests/training/test_crash_safety.py resume after each and check that
the run ends with the weights of a run never interrupted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

POINTS = ("written", "flushed", "aside", "published", "removed")


class Crash:
    """Counts the saves of `last` and kills this process at `point` of the `save`-th one (1-based)."""

    def __init__(self, save: int, point: str) -> None:
        self.save, self.point, self.seen = save, point, 0

    def at(self, point: str) -> None:
        if point == "written":
            self.seen += 1
        if point == self.point and self.seen == self.save:
            os.kill(os.getpid(), signal.SIGKILL)


def is_last(path: object, prefix: str) -> bool:
    return Path(str(path)).name.startswith(prefix)


def install(crash: Crash) -> None:
    """Wrap what `tformer.files` calls during a save; every call still does its work first (or after
    `written`, which is the moment before the flush)."""
    import tformer.files as files

    def fsync_tree(root: Path) -> None:
        if is_last(root, ".last.tmp-"):
            crash.at("written")
        original_fsync(root)
        if is_last(root, ".last.tmp-"):
            crash.at("flushed")

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        original_replace(src, dst, *args, **kwargs)
        if Path(str(src)).name == "last":
            crash.at("aside")
        elif is_last(src, ".last.tmp-") and Path(str(dst)).name == "last":
            crash.at("published")

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        original_rmtree(path, *args, **kwargs)
        if is_last(path, ".last.old-"):
            crash.at("removed")

    original_fsync: Callable[[Path], None] = files.fsync_tree
    original_replace, original_rmtree = os.replace, shutil.rmtree
    files.fsync_tree = fsync_tree
    os.replace = replace
    shutil.rmtree = rmtree


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--save", type=int, required=True, help="which save of last (1 = the first)")
    p.add_argument("--at", choices=POINTS, required=True, help="the moment of that save")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then tformer's arguments")
    args = p.parse_args(argv)
    install(Crash(args.save, args.at))
    from tformer.cli import main as tformer

    return tformer(args.command[1:] if args.command[:1] == ["--"] else args.command)


if __name__ == "__main__":
    sys.exit(main())
