"""SIGINT (Ctrl-C) and SIGTERM (a scheduler's or torchrun's stop) during training: the loop finishes the
step it is in, saves a checkpoint and returns, instead of dying with its work since the last checkpoint.
A second SIGINT stops at once (KeyboardInterrupt), for a user who does not want to wait.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType


class Interrupts:
    """Within `with Interrupts() as stop:`, SIGINT and SIGTERM set `stop.signal` (the signal's number)
    instead of killing the process; the old handlers come back on exit. Outside the main thread, where
    Python cannot install handlers, it records nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signal: int | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signal == signal.SIGINT:
            raise KeyboardInterrupt  # asked twice: stop now
        self.signal = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal is not None else ""

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


__all__ = ["Interrupts"]
