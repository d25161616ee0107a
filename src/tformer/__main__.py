"""`python -m tformer` (and `torchrun -m tformer`) run the command line; so does the `tformer` script
(`run`, pyproject.toml's [project.scripts]).

Ctrl-C at any moment prints one line, `tformer: interrupted`, and exits with 130, as a shell reports a
command SIGINT ended: `run` installs the handling before anything heavy is imported (`import tformer` imports
no torch), so an interrupt while torch loads is caught as one while a command runs. The first SIGINT raises
KeyboardInterrupt; the ones after it are ignored, and so is every SIGINT once the command has returned, so
a Ctrl-C pressed again while the process winds down (a checkpoint being saved, threads joined, atexit
handlers) cannot end it with a traceback. (A training run handles SIGINT itself while it trains, saving the
step it stopped at: `training.interrupts`.)
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

EXIT_INTERRUPTED = 130  # 128 + SIGINT


class InterruptOnce:
    """A SIGINT handler that raises KeyboardInterrupt the first time and ignores every SIGINT after it."""

    def __init__(self) -> None:
        self.fired = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not self.fired:
            self.fired = True
            raise KeyboardInterrupt


def run() -> int:
    """The `tformer` command, its arguments from sys.argv; the exit code."""
    handler = InterruptOnce()
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        signal.signal(signal.SIGINT, handler)
    try:
        try:
            from tformer.cli import main
        except (ImportError, MemoryError, RuntimeError) as e:  # torch under a memory limit too low: one line
            if handler.fired:  # the interrupt came first, and a later import failed on what it left half done
                raise KeyboardInterrupt from None
            from tformer.errors import torch_failed_to_load

            torch_failed_to_load(e)
        if handler.fired:  # torch's extension imports numpy and drops its errors, a KeyboardInterrupt included
            raise KeyboardInterrupt
        return main()  # a Ctrl-C while a command runs is reported there, as this does
    except KeyboardInterrupt:  # while the command line was imported or parsed its arguments
        print("tformer: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        handler.fired = True  # the way out (threads joined, atexit handlers) is not interrupted
        if main_thread:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(run())
