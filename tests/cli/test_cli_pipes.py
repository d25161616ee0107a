"""A reader that leaves early (`tformer recipes list | head -0`) ends the command quietly with 141 (128 +
SIGPIPE, as a shell reports for Unix tools), not with `tformer: error: [Errno 32] Broken pipe`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_closed_stdout_ends_the_command_quietly() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "tformer", "recipes", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # the reader is gone before the command writes its first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""
