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


class UserError(ValueError):
    """A bad value the user gave (config, file, option, request); the message is one line and names it."""


def install_hint(extra: str) -> str:
    """How to install the optional packages of the extra `extra`, in both forms: for tformer installed from an
    index, and for a clone of its repository (where `tformer[...]` names no package pip can find)."""
    return f"pip install 'tformer[{extra}]', or from a clone of the repository: pip install -e '.[{extra}]'"


__all__ = ["UserError", "install_hint"]
