"""Connections a server holds: how many, how long one may take to send its request's headers, and what
happens when the process runs out of file descriptors.

uvicorn's HTTP/1.1 protocol (h11) has no deadline for headers: a connection that sends a request line and
one header, then nothing, is held until the client leaves, and a thousand of them use up the process's open
files. `guarded_h11` returns its subclass with

- a deadline for headers: from the moment a connection opens, or the previous response ends, its next
  request line and headers must be in within `header_timeout` seconds (however slowly they trickle), else a
  408 {"error": one line} and the connection is closed. (The body's deadline is `doors.Guard`'s.)
- a cap on connections: one over `max_connections` is answered 503 at once and closed, so the open files
  never run out under a flood and the connections already in are served.

Should they run out all the same (EMFILE: the model's own files, a low `ulimit -n`), asyncio stops
accepting for a second and tries again, reporting each failure with a traceback; `OutOfFiles` turns that
report into one line a minute, and the server goes on with the connections it has.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

LOG = logging.getLogger("tformer.serve")
OUT_OF = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)  # what asyncio retries an accept after
REASONS = {408: b"Request Timeout", 503: b"Service Unavailable"}


def open_files_limit() -> int | None:
    """The process's soft limit on open files (`ulimit -n`); None where there is none or no way to ask."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else soft


def connection_cap(limit: int | None, open_files: int | None) -> int:
    """`limit`, or the default: half the open-file limit (the other half for the model's files, the
    accepts in flight and the rest of the process), at most 1000 and at least 16."""
    if limit is not None:
        return limit
    return 1000 if open_files is None else max(16, min(1000, open_files // 2))


def refuse(transport: asyncio.Transport, status: int, message: str) -> None:
    """Answer {"error": message} and close, outside h11: no request is under way to answer in its turn."""
    body = json.dumps({"error": message}, separators=(",", ":")).encode()  # as FastAPI's answers
    head = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, REASONS[status], len(body)))
    transport.write(head + body)
    transport.close()


def guarded_h11(*, header_timeout: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline for each request's headers and a cap on connections (a class,
    as uvicorn.Config's `http` takes one)."""

    class GuardedH11(H11Protocol):
        clock: asyncio.TimerHandle | None = None  # set while the next request's headers are awaited

        def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
            super().connection_made(transport)  # type: ignore[arg-type]
            if len(self.connections) > max_connections:  # this one included
                return refuse(self.transport, 503, f"this server holds {max_connections} connections already "
                                                   "(--max-connections); try again shortly")
            self.follow()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self.follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.follow()

        def connection_lost(self, exc: Exception | None) -> None:
            self.stop_clock()
            super().connection_lost(exc)

        def follow(self) -> None:
            """Keep the clock running while a request's headers are awaited (not restarting it as they
            trickle in); stop it once they are in."""
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                if self.clock is None:
                    self.clock = self.loop.call_later(header_timeout, self.headers_late)
            else:
                self.stop_clock()

        def stop_clock(self) -> None:
            if self.clock is not None:
                self.clock.cancel()
                self.clock = None

        def headers_late(self) -> None:
            self.clock = None
            if not self.transport.is_closing():
                refuse(self.transport, 408, f"the request's line and headers did not arrive within "
                                            f"{header_timeout:g} s (--header-timeout)")

    return GuardedH11


class OutOfFiles:
    """An event loop's exception handler that reports an accept refused for want of file descriptors in one
    line (at most one a minute) instead of a traceback a second, and passes everything else on."""

    def __init__(self, *, every_s: float = 60.0) -> None:
        self.every_s = every_s
        self.last: float | None = None
        self.previous: Any = None  # the handler it replaced (None: the loop's default)

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        self.previous = loop.get_exception_handler()
        loop.set_exception_handler(self)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if isinstance(error, OSError) and error.errno in OUT_OF and "accept" in context.get("message", ""):
            now = time.monotonic()
            if self.last is None or now - self.last >= self.every_s:
                self.last = now
                LOG.warning("tformer serve: cannot accept connections: %s (%s); retrying each second (raise "
                            "`ulimit -n`, or lower --max-connections)", os.strerror(error.errno),
                            errno.errorcode.get(error.errno, error.errno))
            return
        if self.previous is not None:
            self.previous(loop, context)
        else:
            loop.default_exception_handler(context)


__all__ = ["OutOfFiles", "connection_cap", "guarded_h11", "open_files_limit", "refuse"]
