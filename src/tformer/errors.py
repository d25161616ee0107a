"""What the user can fix, told apart from what is our fault.

`UserError` is raised where the package checks what it was given: a config value, a file, a prompt, a
request's field, an option out of range. Its message is one line that names the bad value and what is
allowed. The two boundaries catch only it (and OSError, the system's word on a path or a full disk):

    tformer CLI   `tformer: error: <message>`, exit code 2
    tformer serve a 4xx JSON answer {"error": "<message>"}

Anything else is a fault of the package (or of torch under it) and is reported as one: the CLI shows its
traceback, the server answers 500 and logs the traceback. A caller of the Python API that misuses a
function (a tensor of the wrong shape, a cache of another model) gets a plain ValueError or TypeError,
as from any library.

UserError is a ValueError, so `except ValueError` in callers' code keeps catching it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# What torch, OpenBLAS and the C++ runtime say when an allocation fails (a RuntimeError, not a MemoryError)
ALLOCATION_FAILED = re.compile(r"can't allocate memory|could not allocate|failed to allocate|cannot allocate memory|"
                               r"out of memory|std::bad_alloc|failed to map segment", re.IGNORECASE)
ASKED = re.compile(r"allocate (\d+) bytes|allocate ([\d.]+ [KMGT]i?B)", re.IGNORECASE)


class OutOfMemory(MemoryError):
    """An allocation failed while the package was doing a step it names (`allocating`): one line, e.g. "out of
    memory while decoding batch 3 (it asked for 2.0 GiB more); ...". A MemoryError, not a UserError: the server
    answers it as a failure of its own (500), the CLI as one line and exit code 2."""


def is_allocation_failure(e: BaseException) -> bool:
    """Whether `e` says that memory ran out: a MemoryError, torch's OutOfMemoryError, or a RuntimeError
    whose message is an allocator's ("DefaultCPUAllocator: can't allocate memory", "std::bad_alloc")."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    return isinstance(e, RuntimeError) and ALLOCATION_FAILED.search(str(e)) is not None


def out_of_memory(e: BaseException, step: str | None = None) -> str:
    """The one line for the allocation failure `e`: the step it happened in (when known) and the size asked
    for (when the allocator said it), and what to do."""
    if isinstance(e, OutOfMemory):
        return str(e)
    found = ASKED.search(str(e))
    asked = ""
    if found is not None:
        asked = f" (it asked for {int(found.group(1)) / 2**30:.1f} GiB more)" if found.group(1) else \
            f" (it asked for {found.group(2)} more)"
    during = f" while {step}" if step else ""
    return (f"out of memory{during}{asked}; give it less at a time (--batch-size, shorter lines), a smaller model, "
            "or more memory (ulimit -v, the machine's)")


@contextmanager
def allocating(step: str) -> Iterator[None]:
    """Run a step of work that may run out of memory: an allocation failure in it (`is_allocation_failure`)
    becomes an `OutOfMemory` naming `step` ("loading the model", "decoding batch 3"); anything else goes on as
    it is."""
    try:
        yield
    except OutOfMemory:
        raise
    except (MemoryError, RuntimeError) as e:
        if not is_allocation_failure(e):
            raise
        raise OutOfMemory(out_of_memory(e, step)) from None


def too_low_for_torch(e: BaseException) -> str | None:
    """The one line for an import of torch that failed with `e` under a memory limit (`ulimit -v`: torch's
    libraries cannot be mapped, "failed to map segment", a MemoryError, "std::bad_alloc"); None for any other
    failure."""
    if not (is_allocation_failure(e) or isinstance(e, ImportError) and ALLOCATION_FAILED.search(str(e))):
        return None
    said = next((line.strip() for line in str(e).splitlines() if ALLOCATION_FAILED.search(line)), "") or \
        (str(e).strip().splitlines() or ["out of memory"])[0]
    return f"the memory limit is too low to load torch ({type(e).__name__}: {said}); raise it (ulimit -v) or " \
           "free memory"


def torch_failed_to_load(e: BaseException) -> None:
    """Raise for the import of tformer's names (and torch under them) that failed with `e`: under a memory
    limit, one line (`too_low_for_torch`), `tformer: error: ...` and exit code 2 when the command line is
    running, an ImportError of that line for a program that imports tformer. Any other failure goes on as it is."""
    message = too_low_for_torch(e)
    if message is None:
        raise e
    argv = list(getattr(sys, "orig_argv", sys.argv))
    running_cli = sys.argv[0].endswith("tformer") or any(argv[i:i + 2] == ["-m", "tformer"] for i in range(len(argv)))
    if running_cli:
        print(f"tformer: error: {message}", file=sys.stderr)
        raise SystemExit(2)
    raise ImportError(message) from None


class UserError(ValueError):
    """A bad value the user gave (config, file, option, request); the message is one line and names it."""


def install_hint(extra: str) -> str:
    """How to install the optional packages of the extra `extra`: the packages themselves, as the installed
    tformer's metadata lists them (`pip install 'ctranslate2>=4.7'`), which serves however tformer was
    installed (from an index, `pip install .`, or editable from a clone); without that metadata (a source
    tree run as it is), the extra."""
    import re
    from importlib.metadata import PackageNotFoundError, requires

    try:
        listed = requires("tformer") or []
    except PackageNotFoundError:
        listed = []
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    packages = [r.split(";", 1)[0].replace(" ", "") for r in listed if marker.search(r)]
    if not packages:
        return f"pip install 'tformer[{extra}]'"
    return f"pip install {' '.join(repr(p) for p in packages)} (tformer's [{extra}] extra)"


__all__ = ["OutOfMemory", "UserError", "allocating", "install_hint", "is_allocation_failure", "out_of_memory",
           "torch_failed_to_load"]
