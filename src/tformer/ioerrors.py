"""The operating system's error behind a failure to write a file, as one OSError that names the file.

Python's own `write` and `flush` report a full disk as `OSError(28, 'No space left on device')` with no file
name (the file was opened earlier, under its name); shutil's `copytree` gathers each file's failure into one
`shutil.Error` holding a list; safetensors and Hugging Face `tokenizers` write in Rust and report a full disk
as their own exception ("Error while serializing: I/O error: No space left on device (os error 28) at path
..."); `torch.save` given a path reports it as "[enforce fail at inline_container.cc:672] ...", with no errno
at all (given a Python file object, it lets the OSError of the file's `write` through, so we give it one).

`writing(file)` turns each of these into `OSError(errno, strerror, file)`, so that every writer of the package
fails the same way on ENOSPC, EFBIG, EIO or EACCES, and the command line says it in one line, `PATH: REASON`
(`tformer.cli.main`); a directory's writers (`files.atomic_directory`: checkpoints, exports) say
`cannot write PATH: REASON`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OS_ERROR = re.compile(r"\(os error (\d+)\)")  # Rust's std::io::Error
ERRNO = re.compile(r"\[Errno (\d+)\]")  # Python's OSError as text (shutil.Error's list holds it so)


@contextmanager
def writing(file: str | os.PathLike) -> Iterator[None]:
    """Run a write of `file`; an exception that carries an OS error number becomes that OSError, naming `file`
    when it names no file itself; any other goes on as it is."""
    try:
        yield
    except Exception as e:
        error = os_error_of(e, file)
        if error is None or error is e:
            raise
        raise error from None


def os_error_of(e: BaseException, file: str | os.PathLike) -> OSError | None:
    """The OSError behind `e`, with its number, its reason and a file name (`file` when it names none): `e`
    itself, the one it was raised from or during (not one it was raised `from None` over: a message of its
    own, such as a UserError's), the first failure of a `shutil.Error`, or the `(os error N)` its message
    names; None when there is none."""
    if isinstance(e, shutil.Error):
        return _first_of(e, file)
    for cause in (e, e.__cause__, None if e.__suppress_context__ else e.__context__):
        if isinstance(cause, OSError) and not isinstance(cause, shutil.Error):
            if cause.filename is not None or cause.errno is None:
                return cause
            return OSError(cause.errno, cause.strerror or os.strerror(cause.errno), os.fspath(file))
    found = OS_ERROR.search(str(e))
    return None if found is None else _numbered(int(found.group(1)), file)


def _first_of(e: shutil.Error, file: str | os.PathLike) -> OSError:
    """shutil.Error([(source, destination, "[Errno 28] No space left on device: ..."), ...]) as the OSError of
    its first failure, naming that destination."""
    failures = e.args[0] if e.args and isinstance(e.args[0], list) else []
    for failure in failures:
        if isinstance(failure, tuple) and len(failure) == 3 and (found := ERRNO.search(str(failure[2]))):
            return _numbered(int(found.group(1)), failure[1])
    return OSError(None, str(e), os.fspath(file))


def _numbered(number: int, file: str | os.PathLike) -> OSError:
    return OSError(number, os.strerror(number), str(Path(file)))


__all__ = ["os_error_of", "writing"]
