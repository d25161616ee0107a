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
- a lingering close: an answer that ends its connection before the request's body is all in (a 413 for a
  body over the limit, a refusal at the doors) is sent, then the server shuts down its writing side and
  reads and drops what the client still sends, until the client closes, has sent nothing for
  `LINGER_IDLE_S` or `LINGER_MAX_S` have passed; only then is the socket closed. Closed at once, the unread
  bytes would make the kernel reset the connection, and a client still sending its body would see the reset
  instead of the answer.

Should they run out all the same (EMFILE: the model's own files, a low `ulimit -n`), asyncio stops
accepting for a second and tries again, reporting each failure with a traceback; `OutOfFiles` turns that
report into one line a minute, and the server goes on with the connections it has. asyncio's selector loop
also tries each of up to `backlog` (2048) accepts of a wakeup after the first has failed, each failure
scheduling a retry of its own: 2048 retries a second, which keep the loop busy and, once the listening
socket is closed at shutdown, each end in a traceback. `OutOfFiles.install` therefore has the loop accept
one connection a wakeup (a listening socket with more waiting wakes the loop again at once), and drop a
retry whose socket has been closed.
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
LINGER_IDLE_S = 1.0  # a lingering close ends once the client has sent nothing for this long
LINGER_MAX_S = 10.0  # and at the latest this long after the answer


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

        lingering: Lingering | None = None  # set once an answer closed the connection with input unread

        def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
            super().connection_made(transport)  # type: ignore[arg-type]
            if len(self.connections) > max_connections:  # this one included
                return refuse(self.transport, 503, f"this server holds {max_connections} connections already "
                                                   "(--max-connections); try again shortly")
            self.transport = ClosingTransport(self.transport, self)  # type: ignore[assignment]
            self.follow()

        def data_received(self, data: bytes) -> None:
            if self.lingering is not None:  # the answer is out: what the client still sends is dropped
                return self.lingering.heard()
            super().data_received(data)
            self.follow()

        def linger(self, transport: asyncio.Transport) -> bool:
            """Close `transport` lingering if the request's body is not all in; False where it should close
            at once."""
            if self.lingering is not None or self.conn.their_state is not h11.SEND_BODY \
                    or not transport.can_write_eof():
                return False
            self.stop_clock()
            self.lingering = Lingering(transport, self.loop)
            return True

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.follow()

        def connection_lost(self, exc: Exception | None) -> None:
            self.stop_clock()
            if self.lingering is not None:
                self.lingering.stop()
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


class ClosingTransport:
    """A connection's transport as uvicorn's h11 protocol sees it: `close()` lingers while the request's body
    is not all in (`protocol.linger`); a second `close()` (the server shutting down) closes at once."""

    def __init__(self, transport: asyncio.Transport, protocol: Any) -> None:
        self._transport, self._protocol = transport, protocol

    def close(self) -> None:
        if not self._protocol.linger(self._transport):
            self._transport.close()

    def is_closing(self) -> bool:
        return self._protocol.lingering is not None or self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:  # everything else is the transport's
        return getattr(self._transport, name)


class Lingering:
    """The end of a lingering close: the answer is flushed and the writing side shut down (FIN); reading goes on
    (the protocol drops the data) until the client closes, is silent for LINGER_IDLE_S, or LINGER_MAX_S pass."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport, self.loop = transport, loop
        self.until = loop.time() + LINGER_MAX_S
        transport.write_eof()
        transport.resume_reading()  # h11 may have paused it with a body in its buffer
        self.timer = loop.call_later(LINGER_IDLE_S, self.stop)

    def heard(self) -> None:
        """The client sent more: wait for it a while longer, within the whole limit."""
        self.timer.cancel()
        self.timer = self.loop.call_at(min(self.loop.time() + LINGER_IDLE_S, self.until), self.stop)

    def stop(self) -> None:
        self.timer.cancel()
        self.transport.close()


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
        accept, start = getattr(loop, "_accept_connection", None), getattr(loop, "_start_serving", None)
        if accept is None or start is None:  # not asyncio's selector loop (uvloop: its own accept loop)
            return

        def accept_one(protocol_factory: Any, sock: Any, sslcontext: Any = None, server: Any = None,
                       backlog: int = 100, *rest: Any) -> None:
            accept(protocol_factory, sock, sslcontext, server, 1, *rest)  # at most one failure, one retry

        def start_open(protocol_factory: Any, sock: Any, *rest: Any) -> None:
            if sock.fileno() != -1:  # a retry after the server closed its socket: nothing to serve
                start(protocol_factory, sock, *rest)

        loop._accept_connection = accept_one  # type: ignore[attr-defined]
        loop._start_serving = start_open  # type: ignore[attr-defined]

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


__all__ = ["LINGER_IDLE_S", "LINGER_MAX_S", "ClosingTransport", "Lingering", "OutOfFiles", "connection_cap",
           "guarded_h11", "open_files_limit", "refuse"]
