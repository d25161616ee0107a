"""Writing files and directories so that they are never seen half-written: the package's one atomic writer.

    write_atomic(path, data)    one file: a temporary file beside it, flushed to disk, renamed over it (a
                                rename within one directory is atomic); recipes, logs trimmed on resume
    write_output(path, data)    a file the user named (`--output`, `--out`): - is standard output;
                                write_atomic for a regular file (through a symbolic link, to its target),
                                written in place for a FIFO, a device or a pipe (`--output >(cmd)`);
                                translations, pictures, reports, recipes
    check_output(path)          the same target checked before any work: one line for an empty name, a
                                directory, a name ending in / (a folder), a folder that cannot hold it
    check_output_dir(path)      a folder the user named for several files (`--out-dir`, `convert --out`)
    atomic_directory(path)      a whole directory: written into a hidden sibling, every file and directory
                                in it fsync'd, then swapped into place (through a symbolic link, at its
                                target); checkpoints (`training.checkpoint`) and the exports (`interop`)
    sha256(file)                a file's digest, read in chunks (checkpoint manifests)
    standard_output()           sys.stdout, or one line saying it is closed (`tformer ... >&-`)

Every target a user names is treated alike by every command: - is standard output (a folder cannot be);
a symbolic link stays a link and its target is written (a dangling one names the file or folder to
make); a FIFO, a device (/dev/null) or a pipe is written in place, never replaced; an existing file keeps
its permission bits; a missing folder on the way is made. A write that fails (a full disk, a file-size limit,
/dev/full) raises the OSError naming the file written (`ioerrors.writing`): "standard output" for -, the
directory for `atomic_directory`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from tformer.errors import UserError
from tformer.ioerrors import writing

try:
    import fcntl
except ImportError:  # not on Windows: replacing and reading a directory are not ordered there
    fcntl = None  # type: ignore[assignment]

STDOUT = "-"  # the name a user gives for standard output
STDOUT_NAME = "standard output"  # how an error names it


def write_atomic(path: str | os.PathLike, data: str | bytes, *, mode: int | None = None) -> Path:
    """Write `data` (text as UTF-8) to `path`, creating its directory; returns the path. The file gets the
    permission bits `mode` (None: those of an ordinary new file). On any failure the temporary file is
    removed and the exception (an OSError for a full disk or no permission) goes on, with whatever was at
    `path` before left as it was."""
    path = Path(path)
    folder = Path(os.path.realpath(path.parent)) if path.parent.is_symlink() else path.parent
    folder.mkdir(parents=True, exist_ok=True)  # a folder named by a dangling link: its target is made
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with writing(path), os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask if mode is None else mode)  # not mkstemp's 0600
        with writing(path):
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_output(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8) to the file a user named, respecting what is there; returns the path.

    "-" is standard output (text through `sys.stdout`, bytes through its buffer; flushed). A FIFO, a
    character device (/dev/null, a terminal) or a pipe named /dev/fd/N (bash's `>(cmd)`) is opened and
    written in place: there is nothing to rename, and a reader waits on that very file. A symbolic link
    stays a link: its target is written. A regular file (or a new one) is written with `write_atomic`,
    keeping an existing file's permission bits, so it is never seen half-written (a hard link to the old
    file keeps the old text). An empty name, or one ending in a slash, is refused (`check_output_name`)."""
    check_output_name(path, what="output file")
    if os.fspath(path) == STDOUT:
        _to_stdout(data)
        return Path(STDOUT)
    path = Path(path)
    if is_special_file(path):
        with writing(path), open(path, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        return path
    mode = stat.S_IMODE(os.stat(path).st_mode) if path.exists() else None
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    write_atomic(target, data, mode=mode)
    return path


def _to_stdout(data: str | bytes) -> None:
    out = standard_output()
    with writing(STDOUT_NAME):  # /dev/full, a file-size limit: named, as a file is
        if isinstance(data, str):
            out.write(data)
        else:  # a picture: the bytes as they are, after any text already written
            out.flush()
            out.buffer.write(data)
        out.flush()


def standard_output() -> TextIO:
    """`sys.stdout`; a UserError when the process was started with it closed (`tformer ... >&-`: Python then
    has no sys.stdout), so that the command says so in one line instead of failing on its first write."""
    if sys.stdout is None or getattr(sys.stdout, "closed", False):
        raise UserError(f"{STDOUT_NAME} is closed (was the command run with >&-?); give an output file with "
                        "-o FILE, or leave standard output open")
    return sys.stdout


def check_output_name(path: str | os.PathLike, *, what: str, folder: bool = False) -> None:
    """Refuse a name that cannot be an output (a UserError naming `what`, e.g. "--output"): an empty one
    (or only spaces), "-" for a `folder` (standard output holds one stream, not files), and for a file a
    name ending in a slash that is no existing folder (a slash names a folder; a file is never made there)."""
    name = os.fspath(path)
    if not name.strip():
        allowed = "a folder name (. for this folder)" if folder else f"a file name or {STDOUT} for standard output"
        raise UserError(f"{what} {name!r} is empty; give {allowed}")
    if folder and name == STDOUT:
        raise UserError(f"{what} {STDOUT} would be standard output, which cannot hold a folder of files; give a "
                        f"folder name (./{STDOUT} for a folder named {STDOUT})")
    if not folder and name.endswith(("/", os.sep)) and not os.path.isdir(name):
        raise UserError(f"{what} {name} ends with a slash, so it names a folder, and there is no such folder; "
                        "give a file name")


def check_output(path: str | os.PathLike, *, what: str = "--output",
                 inputs: Sequence[str | os.PathLike | None] = ()) -> None:
    """Refuse, before any work, a file a user named that `write_output` could not write, with one line
    naming `what`: "-" (standard output) passes; a FIFO, a device or a pipe this process may write passes;
    else the name (`check_output_name`), then, following a symbolic link to its target, not a directory,
    and the closest existing folder above it one this process may write in (missing folders are made). An
    output that is one of the command's `inputs` (the same file, by any name or link) is refused too: writing
    it would replace what was read with what was made of it."""
    check_output_name(path, what=what)
    if os.fspath(path) == STDOUT:
        standard_output()
        return
    _check_not_input(Path(path), inputs, what=what)
    path = Path(path)
    if is_special_file(path):
        if not os.access(path, os.W_OK):
            raise UserError(f"{what} {path} is not writable")
        return
    if path.is_dir():
        raise UserError(f"{what} {path} is a directory; give a file path")
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    nearest = next(p for p in target.parents if p.exists())  # the closest existing ancestor
    if not nearest.is_dir():
        raise UserError(f"{what} {path}: {nearest} is a file; give a file path in a directory")
    if not os.access(nearest, os.W_OK):
        raise UserError(f"{what} {path}: directory {nearest} is not writable")


def _check_not_input(path: Path, inputs: Sequence[str | os.PathLike | None], *, what: str) -> None:
    for given in inputs:
        if given is None or os.fspath(given) == STDOUT or not path.exists() or not Path(given).exists():
            continue
        if os.path.samefile(path, given) and not is_special_file(path):
            raise UserError(f"{what} {path} is the input {given}: writing it would replace what is read; give "
                            "another output file")


def check_output_dir(path: str | os.PathLike, *, what: str = "--out-dir") -> None:
    """Refuse, before any work, a folder a user named for several files, with one line naming `what`: an
    empty name, "-", and anything there that is no folder (a file, a FIFO, a device, a link to one). A
    missing folder, or a dangling link (its target), is made when the first file is written."""
    check_output_name(path, what=what, folder=True)
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{what} {path} is not a folder; give a folder (a missing one is made)")


def is_special_file(path: str | os.PathLike) -> bool:
    """Whether `path` is (or links to) something `write_output` writes in place: not a regular file, not
    a directory, and there."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def is_stream(path: str | os.PathLike) -> bool:
    """Whether `path` is standard output ("-") or a special file (`is_special_file`): a target whose name
    says nothing of the format wanted, so a picture or a page written there takes its command's default."""
    return os.fspath(path) == STDOUT or is_special_file(path)


@contextmanager
def atomic_directory(path: str | os.PathLike, *, keep_previous_as: str | os.PathLike | None = None,
                     keep_other_files: bool = False) -> Iterator[Path]:
    """Yield a new, empty directory to write into; when the block ends, publish it as `path`.

    The directory is a hidden sibling, `.<name>.tmp-<random>`. Publishing fsyncs every file and directory
    in it, then renames it onto `path`; an existing `path` is first renamed aside, then deleted, or kept
    as `keep_previous_as` if given. With `keep_other_files`, the files and folders of the existing `path`
    that the block did not write are copied in first, so that they survive the swap.

    An exception in the block or while publishing (a full disk) removes the sibling and leaves the old
    `path` as it was, and goes on, as the OSError it carries when it carries one (`ioerrors.writing`: a
    library's own exception, shutil's list of failures), naming `path` when it names no file; a crash (power
    loss, SIGKILL) can leave only a stale sibling behind, never a half-written `path`. A symbolic link at
    `path` stays a link: its target (made if dangling) is the directory written."""
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    try:
        with writing(path):  # a library's own error for a full disk (tokenizers, shutil's list), as its OSError
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
    first and deleted after, or kept as `keep_previous_as` (and moved back if the second rename fails). The
    two renames of a replacement hold `swap_lock(path)`, so that a reader holding it shared (a checkpoint
    loaded while a training saves it) sees the old directory whole or the new one whole."""
    old = None
    with swap_lock(path, shared=False):
        if path.exists():
            old = Path(keep_previous_as) if keep_previous_as else \
                path.parent / f".{path.name}.old-{uuid.uuid4().hex[:12]}"
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


@contextmanager
def swap_lock(path: str | os.PathLike, *, shared: bool) -> Iterator[None]:
    """The lock that orders replacing the directory `path` (exclusive: the renames of `atomic_directory`)
    against reading it (shared: a whole read, `checkpoints.read_consistently`): an advisory lock on the
    directory that holds it (a run's directory for its `last` and `best`), so nothing is left beside it. Where
    that directory cannot be opened or locked (a system without flock), it goes on without the lock."""
    try:
        fd = os.open(Path(path).absolute().parent, os.O_RDONLY)
    except OSError:
        fd = None
    if fd is None or fcntl is None:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        except OSError:  # a file system without locks
            pass
        yield
    finally:
        os.close(fd)  # closing releases the lock


def sha256(file: Path) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


__all__ = ["STDOUT", "STDOUT_NAME", "atomic_directory", "check_output", "check_output_dir", "check_output_name",
           "fsync_dir", "fsync_tree", "is_special_file", "is_stream", "sha256", "standard_output", "swap_lock",
           "write_atomic",
           "write_output"]
