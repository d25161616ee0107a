"""SIGINT (Ctrl-C) and SIGTERM (a scheduler's or torchrun's stop) during training: the loop finishes the
step it is in, saves a checkpoint and returns, instead of dying with its work since the last checkpoint.
A second SIGINT stops at once, for a user who does not want to wait: it goes to the handler that was there
before (Python's raises KeyboardInterrupt; the command line's, `tformer.__main__`, raises it once and
ignores the SIGINTs after it, so the way out prints one line, never a traceback). While the checkpoint of the
stop is written (`shielded`), further SIGINTs are ignored: that save is what the first one asked for.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any


class Interrupts:
    """Within `with Interrupts() as stop:`, SIGINT and SIGTERM set `stop.signal` (the signal's number)
    instead of killing the process; the old handlers come back on exit. Outside the main thread, where
    Python cannot install handlers, it records nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signal: int | None = None
        self._old: dict[int, Any] = {}
        self._shielded = False

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signal == signal.SIGINT:  # asked twice: stop now, unless saving
            if not self._shielded:
                _previous(self._old.get(signum))(signum, frame)
            return
        self.signal = signum

    @contextlib.contextmanager
    def shielded(self) -> Iterator[None]:
        """Within it, a second SIGINT is ignored (the checkpoint the first one asked for is being written)."""
        self._shielded = True
        try:
            yield
        finally:
            self._shielded = False

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal is not None else ""

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def _previous(handler: Any) -> Callable[[int, FrameType | None], None]:
    """What a handler signal.signal returned does when called: a Python function itself; SIG_IGN nothing;
    SIG_DFL (or a handler installed outside Python, None) Python's default, KeyboardInterrupt."""
    if callable(handler):
        return handler
    if handler == signal.SIG_IGN:
        return lambda signum, frame: None
    return signal.default_int_handler


__all__ = ["Interrupts"]
