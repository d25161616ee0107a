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


__all__ = ["UserError", "install_hint"]
