"""The operating system's error behind a library's failure to write a file, as the OSError it is.

safetensors and Hugging Face `tokenizers` write in Rust and report a full disk as their own exception
("Error while serializing: I/O error: No space left on device (os error 28) at path ..."); `torch.save` given
a path reports it as "[enforce fail at inline_container.cc:672] ...", with no errno at all (given a Python
file object, it lets the OSError of the file's `write` through, so we give it one). `writing(file)` turns the
first kind back into `OSError(errno, strerror, file)`, so that every writer of the package fails the same way
on ENOSPC, EIO or EACCES and its caller (`training.checkpoint.save_checkpoint`, `interop.hf.write_checkpoint`)
says it in one line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OS_ERROR = re.compile(r"\(os error (\d+)\)")


@contextmanager
def writing(file: str | os.PathLike) -> Iterator[None]:
    """Run a library's write of `file`; an exception that carries an OS error number becomes that OSError
    (naming `file`); any other goes on as it is."""
    try:
        yield
    except OSError:
        raise
    except Exception as e:
        error = os_error_of(e, file)
        if error is None:
            raise
        raise error from None


def os_error_of(e: BaseException, file: str | os.PathLike) -> OSError | None:
    """The OSError behind `e`: `e` itself, the one it was raised from or during, or the `(os error N)` its
    message names (Rust's std::io::Error); None when there is none."""
    for cause in (e, e.__cause__, e.__context__):
        if isinstance(cause, OSError):
            return cause
    found = OS_ERROR.search(str(e))
    if found is None:
        return None
    number = int(found.group(1))
    return OSError(number, os.strerror(number), str(Path(file)))


__all__ = ["os_error_of", "writing"]
