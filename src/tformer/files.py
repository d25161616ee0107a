"""Writing files and directories so that they are never seen half-written: the package's one atomic writer.

    write_atomic(path, data)    one file: a temporary file beside it, flushed to disk, renamed over it (a
                                rename within one directory is atomic); recipes, logs trimmed on resume
    write_output(path, data)    a file the user named (`--output`, `--out`): write_atomic for a regular file
                                (through a symbolic link, to its target), written in place for a FIFO, a
                                device or a pipe (`--output >(cmd)`); translations, pictures, reports
    atomic_directory(path)      a whole directory: written into a hidden sibling, every file and directory
                                in it fsync'd, then swapped into place; checkpoints (`training.checkpoint`)
                                and the Hugging Face export (`interop.hf`)
    sha256(file)                a file's digest, read in chunks (checkpoint manifests)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: str | bytes, *, mode: int | None = None) -> Path:
    """Write `data` (text as UTF-8) to `path`, creating its directory; returns the path. The file gets the
    permission bits `mode` (None: those of an ordinary new file). On any failure the temporary file is
    removed and the exception (an OSError for a full disk or no permission) goes on, with whatever was at
    `path` before left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask if mode is None else mode)  # not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_output(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8) to the file a user named, respecting what is there; returns the path.

    A FIFO, a character device (/dev/null, a terminal) or a pipe named /dev/fd/N (bash's `>(cmd)`) is
    opened and written in place: there is nothing to rename, and a reader waits on that very file. A
    symbolic link stays a link: its target is written. A regular file (or a new one) is written with
    `write_atomic`, keeping an existing file's permission bits, so it is never seen half-written (a hard
    link to the old file keeps the old text)."""
    path = Path(path)
    if is_special_file(path):
        with open(path, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        return path
    mode = stat.S_IMODE(os.stat(path).st_mode) if path.exists() else None
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    write_atomic(target, data, mode=mode)
    return path


def is_special_file(path: str | os.PathLike) -> bool:
    """Whether `path` is (or links to) something `write_output` writes in place: not a regular file, not
    a directory, and there."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


@contextmanager
def atomic_directory(path: str | os.PathLike, *, keep_previous_as: str | os.PathLike | None = None,
                     keep_other_files: bool = False) -> Iterator[Path]:
    """Yield a new, empty directory to write into; when the block ends, publish it as `path`.

    The directory is a hidden sibling, `.<name>.tmp-<random>`. Publishing fsyncs every file and directory
    in it, then renames it onto `path`; an existing `path` is first renamed aside, then deleted, or kept
    as `keep_previous_as` if given. With `keep_other_files`, the files and folders of the existing `path`
    that the block did not write are copied in first, so that they survive the swap.

    An exception in the block or while publishing (a full disk) removes the sibling and leaves the old
    `path` as it was, and goes on; a crash (power loss, SIGKILL) can leave only a stale sibling behind,
    never a half-written `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    try:
        yield tmp
        if keep_other_files and path.is_dir():
            _copy_missing(path, tmp)
        fsync_tree(tmp)
        _swap_into_place(tmp, path, keep_previous_as)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing left once published


def _copy_missing(old: Path, new: Path) -> None:
    """Copy into `new` what `old` has and `new` does not (top-level names)."""
    for item in old.iterdir():
        if (new / item.name).exists():
            continue
        if item.is_dir():
            shutil.copytree(item, new / item.name)
        else:
            shutil.copy2(item, new / item.name)


def fsync_tree(root: Path) -> None:
    """Flush every file and directory under `root` to disk, so that a rename publishes complete data."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(Path(dirpath))


def fsync_dir(directory: Path) -> None:
    """Flush a directory's entries (a rename in it) to disk."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # platforms that cannot open a directory (Windows): nothing to flush
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _swap_into_place(tmp: Path, path: Path, keep_previous_as: str | os.PathLike | None = None) -> None:
    """rename(tmp, path); a non-empty directory cannot be renamed over, so an old one is moved aside
    first and deleted after, or kept as `keep_previous_as` (and moved back if the second rename fails)."""
    old = None
    if path.exists():
        old = Path(keep_previous_as) if keep_previous_as else path.parent / f".{path.name}.old-{uuid.uuid4().hex[:12]}"
        if old.exists():
            shutil.rmtree(old)
        os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        if old is not None:
            os.replace(old, path)
        raise
    fsync_dir(path.parent)
    if old is not None and not keep_previous_as:
        shutil.rmtree(old, ignore_errors=True)


def sha256(file: Path) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


__all__ = ["atomic_directory", "fsync_dir", "fsync_tree", "is_special_file", "sha256", "write_atomic",
           "write_output"]
