"""Running the app under uvicorn: in the foreground (`tformer serve`) or in a background thread (tests,
benchmarks). The socket is bound here, before uvicorn starts, so port 0 gets a free port whose number is
known at once (and printed), and nothing else can take it between choosing and binding. Every server is
behind its doors (`doors.Guard`: Host, Origin, key, content type, the body's deadline) and speaks h11 with a
deadline for headers and a cap on connections (`connections`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import time
from types import TracebackType

import uvicorn
from fastapi import FastAPI

from tformer.errors import UserError
from tformer.serve.connections import OutOfFiles, connection_cap, guarded_h11, open_files_limit
from tformer.serve.doors import WILDCARDS, Doors, Guard


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); port 0: a free one. A UserError naming what is wrong, also
    for a host that means every interface without saying so ('', '0', '::0', a name for 0.0.0.0): only
    0.0.0.0 and :: spell that, so an unset variable (`--host "$HOST"`) cannot open the server to the network."""
    if host.strip() in ("", "*"):
        raise implicit_wildcard(host, "0.0.0.0")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    address = sock.getsockname()[0]
    if ipaddress.ip_address(address.partition("%")[0]).is_unspecified and host not in WILDCARDS:
        sock.close()
        raise implicit_wildcard(host, address)
    sock.listen(2048)
    return sock


def implicit_wildcard(host: str, address: str) -> UserError:
    return UserError(f"--host {host!r} would listen on every interface ({address}); say --host 0.0.0.0 (or ::) if "
                     "that is meant, else give one address, e.g. 127.0.0.1 (the default: this machine only)")


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Server(uvicorn.Server):
    """uvicorn's server, its event loop reporting a lack of file descriptors in one line (`OutOfFiles`)."""

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        OutOfFiles().install(asyncio.get_running_loop())
        await super().serve(sockets)


def make_server(app: FastAPI, *, doors: Doors | None = None, log_level: str = "warning") -> uvicorn.Server:
    """A server for `app` behind `doors` (default: `Doors()`, this machine only)."""
    doors = doors or Doors()
    protocol = guarded_h11(header_timeout=doors.header_timeout,
                           max_connections=connection_cap(doors.max_connections, open_files_limit()))
    return Server(uvicorn.Config(Guard(app, doors), http=protocol, log_level=log_level, access_log=False,
                                 lifespan="on", timeout_graceful_shutdown=5))


class ServerThread:
    """`with ServerThread(app) as url:` serves `app` on `doors.host` (default 127.0.0.1; port 0: a free one)
    in a daemon thread until the block ends."""

    def __init__(self, app: FastAPI, *, doors: Doors | None = None, port: int = 0) -> None:
        doors = doors or Doors()
        self.sock = bind(doors.host, port)
        self.url = url_of(self.sock)
        self.server = make_server(app, doors=doors)
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


__all__ = ["Server", "ServerThread", "bind", "make_server", "url_of"]
