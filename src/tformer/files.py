"""Writing a file so that it is never seen half-written: a temporary file beside it, flushed to disk, then
renamed over it (a rename within one directory is atomic). The one place every command writes files
through (translations, recipes, logs trimmed on resume, pictures, reports); checkpoint directories use
the same idea for a whole directory (`training.checkpoint`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8) to `path`, creating its directory; returns the path. On any failure the
    temporary file is removed and the exception (an OSError for a full disk or no permission) goes on,
    with whatever was at `path` before left as it was."""
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
        os.chmod(tmp, 0o666 & ~umask)  # the permissions of an ordinary new file, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


__all__ = ["write_atomic"]
