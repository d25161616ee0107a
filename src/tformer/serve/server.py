"""Running the app under uvicorn: in the foreground (`tformer serve`) or in a background thread (tests,
benchmarks). The socket is bound here, before uvicorn starts, so port 0 gets a free port whose number is
known at once (and printed), and nothing else can take it between choosing and binding.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from fastapi import FastAPI

from tformer.errors import UserError


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); port 0: a free one. A ValueError naming what is wrong."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def make_server(app: FastAPI, *, log_level: str = "warning") -> uvicorn.Server:
    return uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on",
                                         timeout_graceful_shutdown=5))


class ServerThread:
    """`with ServerThread(app) as url:` serves `app` on 127.0.0.1 (a free port) in a daemon thread until the
    block ends."""

    def __init__(self, app: FastAPI, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sock = bind(host, port)
        self.url = url_of(self.sock)
        self.server = make_server(app)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True,
                                       name="tformer-serve")

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server at {self.url} did not start")
            time.sleep(0.01)
        return self.url

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


__all__ = ["ServerThread", "bind", "make_server", "url_of"]
