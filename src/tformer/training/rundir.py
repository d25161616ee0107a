"""A training run owns its directory: one training at a time (a lock), a finished or interrupted run is not
trained over by accident (refused unless `--resume` or `--overwrite`), and a checkpoint caught half-way
through its save by a crash is recovered on resume.

    check_run_dir(out_dir, resume=, overwrite=)
                                          before anything is built: a fresh run over a run is refused
                                          unless `overwrite`
    hold(out_dir, fresh=, overwrite=)     a context manager held for the whole training: an exclusive lock
                                          (fcntl.flock on OUT_DIR/.lock, released when the process ends,
                                          however it ends: a lock file left by a killed run blocks nothing);
                                          a training stopped by an exception before it made anything to keep
                                          (a logged step, a checkpoint) leaves out_dir as it found it
    holds_run(out_dir)                    what of a run is there (last/, best/, step-*/, metrics.jsonl)
    recover(checkpoint)                   put back OUT_DIR/last from the complete copy a crashed save left

A save (`files.atomic_directory`) writes `.last.tmp-*`, moves the old `last` aside as `.last.old-*` (or as
step-NNNNNNNN with train.keep_last), then renames the new one into place. A crash between those two renames
leaves no `last`, but two complete copies; `recover` takes the newest that verifies against its manifest.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tformer.errors import UserError
from tformer.files import write_atomic
from tformer.manifest import MANIFEST_FILE, verify_checkpoint
from tformer.runs import (
    BEST,
    KEPT_PREFIX,
    LAST,
    LOCK_FILE,
    METRICS_FILE,
    RECIPE_FILE,
    RUN_FILES,
    TENSORBOARD_DIR,
    RunDir,
    is_checkpoint_name,
)

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; training still works, unguarded
    fcntl = None  # type: ignore[assignment]


def holds_run(out_dir: Path) -> list[str]:
    """The parts of a run in `out_dir`: its checkpoints and a non-empty training log."""
    if not out_dir.is_dir():
        return []
    found = [f"{p.name}/" for p in sorted(out_dir.iterdir()) if p.is_dir() and is_checkpoint_name(p.name)]
    log = RunDir(out_dir).metrics
    if log.is_file() and log.stat().st_size > 0:
        found.append(log.name)
    return found


def written_by_a_run(name: str) -> bool:
    """Whether an entry of a run directory named `name` is one a run of this project writes (checkpoints,
    hidden save siblings, the log, the recipe, results)."""
    return (is_checkpoint_name(name) or name == TENSORBOARD_DIR or name in RUN_FILES
            or name.startswith((f".{LAST}.", f".{BEST}.")))


def clear_run(out_dir: Path, *, keep: frozenset[str] = frozenset()) -> None:
    """Delete what a run of this project wrote in `out_dir`, and nothing else (nor the entries named in
    `keep`)."""
    for item in out_dir.iterdir():
        if not written_by_a_run(item.name) or item.name in keep:
            continue
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item)
        else:
            item.unlink()


def check_run_dir(out_dir: str | os.PathLike, *, resume: bool, overwrite: bool = False) -> None:
    """Refuse what a training cannot do in `out_dir`, before anything is built or written: start afresh
    over a run without `overwrite`, or be asked both to continue and to replace it."""
    out_dir = Path(out_dir)
    if resume and overwrite:
        raise UserError("--resume continues the run in out_dir and --overwrite replaces it; give one of them")
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"out_dir={str(out_dir)!r} exists and is not a directory")
    found = holds_run(out_dir)
    if found and not resume and not overwrite:
        raise UserError(f"{out_dir} already holds a run ({', '.join(found)}); continue it with --resume, replace it "
                         "with --overwrite, or choose another out_dir")


@contextmanager
def hold(out_dir: str | os.PathLike, *, fresh: bool = False, overwrite: bool = False) -> Iterator[Path]:
    """Hold `out_dir` for one training: an exclusive lock, refused while another training holds it. A
    `fresh` run creates the directory and checks again, under the lock, that it holds no run (cleared
    with `overwrite`); a resumed one locks a directory that exists and leaves a missing one alone (its
    checkpoint check says what is wrong). The lock file goes when the lock does.

    A training that ends by an exception (a refusal at its first step, a bug, Ctrl-C) before it has made
    anything to keep (a logged step, a checkpoint: `Taken.made_nothing`) takes back what it wrote: out_dir
    is left as it was when the training took it (a directory it created is removed; a resumed run's
    recipe.yaml and metrics.jsonl get their bytes back)."""
    out_dir = Path(out_dir)
    if not fresh and not out_dir.is_dir():
        yield out_dir
        return
    created = _first_missing(out_dir) if fresh else None
    out_dir.mkdir(parents=True, exist_ok=True)
    undone = False
    try:
        with _locked(out_dir):
            if fresh:
                check_run_dir(out_dir, resume=False, overwrite=overwrite)
                if overwrite:
                    clear_run(out_dir)
            taken = Taken(out_dir)
            try:
                yield out_dir
            except BaseException:
                if taken.made_nothing():
                    taken.put_back()
                    undone = True
                raise
    finally:
        if undone and created is not None:  # after the lock, whose file is gone now too
            _remove_empty(out_dir, up_to=created)


class Taken:
    """What a run directory held when a training took it: enough to tell whether the training has made
    anything to keep since, and to put back what it wrote before it had (the loop writes recipe.yaml and
    starts or trims metrics.jsonl before its first step)."""

    REWRITTEN = (RECIPE_FILE, METRICS_FILE)

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.names = frozenset(p.name for p in out_dir.iterdir())
        self.files = {name: _read(out_dir / name) for name in self.REWRITTEN}
        self.saves = _saves(out_dir)

    def made_nothing(self) -> bool:
        """No checkpoint written or replaced, and no record added to metrics.jsonl (a resumed run may have
        trimmed it, to the records up to its checkpoint)."""
        log = _read(RunDir(self.out_dir).metrics) or b""
        return _saves(self.out_dir) == self.saves and (self.files[METRICS_FILE] or b"").startswith(log)

    def put_back(self) -> None:
        clear_run(self.out_dir, keep=self.names)
        for name, data in self.files.items():
            if data is not None:
                write_atomic(self.out_dir / name, data)  # a failure names the file


def _read(path: Path) -> bytes | None:
    """A regular file's bytes; None for anything else (missing, a directory, a link)."""
    return path.read_bytes() if path.is_file() and not path.is_symlink() else None


def _saves(out_dir: Path) -> dict[str, bytes | None]:
    """The checkpoints in `out_dir` (last, best, step-*), each by its manifest: a new save changes it."""
    return {p.name: _read(p / MANIFEST_FILE) for p in out_dir.iterdir() if p.is_dir() and is_checkpoint_name(p.name)}


def _first_missing(path: Path) -> Path | None:
    """The outermost directory of `path` (itself included) that does not exist yet: what `mkdir(parents=True)`
    creates first; None if `path` exists."""
    missing = None
    for directory in (path, *path.parents):
        if directory.exists() or directory.is_symlink():
            break
        missing = directory
    return missing


def _remove_empty(path: Path, *, up_to: Path) -> None:
    """Remove `path` and its parents up to `up_to`, each only while it is empty."""
    for directory in (path, *path.parents):
        try:
            directory.rmdir()
        except OSError:  # not empty (someone else's now), or gone: leave it
            return
        if directory == up_to:
            return


@contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    """An exclusive flock on OUT_DIR/.lock, which holds the owner's pid for the message of the next one.
    Released by removing the file, then closing it; a lock taken on a file that was removed meanwhile is
    taken again on the new one, so two holders can never each hold a different file."""
    if fcntl is None:
        yield
        return
    path = RunDir(out_dir).lock
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise UserError(f"{out_dir} is in use by another training (pid {holder}); wait for it to end, or "
                             "choose another out_dir") from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder we waited on removed it: lock the file there now
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        try:
            os.unlink(path)
        finally:
            os.close(fd)


def recover(checkpoint: str | os.PathLike) -> Path | None:
    """If `checkpoint` (OUT_DIR/last) is missing because a save was interrupted between its renames, move
    the newest complete copy the save left back into place: its new version (`.last.tmp-*`) if complete,
    else the old one (`.last.old-*`, or the newest step-NNNNNNNN kept by train.keep_last, copied). Removes
    the other leftovers of interrupted saves. Returns what was recovered from, or None."""
    checkpoint = Path(checkpoint)
    parent, name = checkpoint.parent, checkpoint.name
    if not parent.is_dir():
        return None
    tmps = sorted(parent.glob(f".{name}.tmp-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    olds = sorted(parent.glob(f".{name}.old-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    chosen = None
    if not checkpoint.exists():
        for candidate in [*tmps, *olds]:
            if _complete(candidate):
                os.replace(candidate, checkpoint)
                chosen = candidate
                break
        else:
            kept = sorted(parent.glob(f"{KEPT_PREFIX}[0-9]*"), reverse=True) if name == LAST else []
            source = next((p for p in kept if _complete(p)), None)
            if source is not None:
                shutil.copytree(source, checkpoint)
                chosen = source
    for leftover in [*tmps, *olds]:
        if leftover != chosen:
            shutil.rmtree(leftover, ignore_errors=True)
    return chosen


def _complete(directory: Path) -> bool:
    try:
        verify_checkpoint(directory)
    except (ValueError, OSError):
        return False
    return True


__all__ = ["LOCK_FILE", "check_run_dir", "clear_run", "hold", "holds_run", "recover", "written_by_a_run"]
