"""The server's connections at their edges (`serve.connections`): a body over the limit is answered 413 and the
client, still sending it, reads the whole answer (a lingering close, never a reset); and a server out of file
descriptors under a flood of connections logs one line, and Ctrl-C stops it at once, quietly."""

from __future__ import annotations

import asyncio
import errno
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from serving import start

from tformer.serve.connections import OutOfFiles

SRC = str(Path(__file__).resolve().parents[2] / "src")
HEAD = (b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 50000000\r\n\r\n")


def connect(url: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", urlsplit(url).port), timeout=10)


def read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_a_body_over_the_limit_is_a_413_the_client_reads_while_still_sending(checkpoints: dict[str, Path]) -> None:
    with start(checkpoints["gpt"]) as url:
        for _ in range(2):
            with connect(url) as sock:
                sock.sendall(HEAD)
                sock.sendall(b"x" * 16_000_000)  # far more than a socket's buffers: the server must read it
                answer = read_all(sock)  # no ConnectionResetError, and the server's end comes after the answer
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 413 ") and b"connection: close" in head.lower()
            assert body == b'{"error":"the body is 50000000 bytes; this server reads at most 257536"}'


def test_a_lingering_close_ends_when_the_client_stops_sending(checkpoints: dict[str, Path]) -> None:
    with start(checkpoints["gpt"]) as url, connect(url) as sock:
        sock.sendall(HEAD + b"x" * 1000)
        assert read_all(sock).startswith(b"HTTP/1.1 413 ")  # the server's half is shut: end of file
        sock.settimeout(30)
        try:  # the client says nothing more: within about a second the server closes its half too
            while sock.recv(65536) or sock.send(b"x"):
                time.sleep(0.05)
        except OSError:  # a reset (or broken pipe) once the server has closed the socket
            pass


class Lines:
    """The lines a stream gives, read by a thread of their own as they come."""

    def __init__(self, stream) -> None:  # noqa: ANN001
        self.seen: queue.Queue[str] = queue.Queue()
        self.lines: list[str] = []
        threading.Thread(target=lambda: [self.seen.put(line) for line in stream], daemon=True).start()

    def until(self, pattern: str, timeout: float) -> None:
        """Wait for a line that matches `pattern` (an AssertionError after `timeout` s)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.lines.append(self.seen.get(timeout=left))
            except queue.Empty:
                break
            if re.search(pattern, self.lines[-1]):
                return
        raise AssertionError(f"no line matching {pattern!r} in {timeout} s: {''.join(self.lines)}")

    def rest(self) -> list[str]:
        time.sleep(0.2)
        while not self.seen.empty():
            self.lines.append(self.seen.get())
        return self.lines


def test_ctrl_c_after_a_descriptor_flood_is_prompt_and_quiet(checkpoints: dict[str, Path]) -> None:
    """`ulimit -n 32`, no cap below it, and 300 connections held open: one line about the files, then Ctrl-C
    stops the server within seconds, with no traceback (asyncio's retries of the accepts are not left to fail at
    shutdown)."""
    lowered = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (32, "
               "resource.getrlimit(resource.RLIMIT_NOFILE)[1])); sys.argv[0] = 'tformer'; "
               "from tformer.__main__ import run; sys.exit(run())")
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-c", lowered, "serve", "--checkpoint", str(checkpoints["gpt"]), "--port", "0",
               "--device", "cpu", "--max-connections", "1000"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, errors, socks = Lines(process.stdout), Lines(process.stderr), []
    try:
        out.until("listening on", timeout=60)
        url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", out.lines[-1]).group(1)
        socks = [connect(url) for _ in range(300)]  # the kernel's backlog holds what is not accepted
        errors.until("cannot accept connections: Too many open files", timeout=30)
        time.sleep(1.5)  # asyncio retries the accepts each second
        process.send_signal(signal.SIGINT)
        began = time.monotonic()
        out.until("tformer serve: stopped", timeout=30)
        stopped_after = time.monotonic() - began
        code = process.wait(timeout=60)
    finally:
        for sock in socks:
            sock.close()
        if process.poll() is None:
            process.kill()
    err = errors.rest()
    assert code == 0 and stopped_after < 3, (stopped_after, "".join(err))
    assert not any("Traceback" in line or "Exception" in line for line in err), "".join(err[:40])
    assert len(err) < 20 and sum("Too many open files" in line for line in err) == 1, "".join(err[:40])


class Crowded:
    """A listening socket of a process out of file descriptors: each accept fails with EMFILE."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def accept(self) -> tuple[socket.socket, object]:
        raise OSError(errno.EMFILE, "Too many open files")

    def fileno(self) -> int:
        return self.sock.fileno()


def test_an_accept_out_of_files_is_one_retry_and_a_retry_after_the_close_is_nothing() -> None:
    """asyncio's selector loop goes on trying the accepts of a wakeup after the first failed (up to the backlog,
    2048 under uvicorn), each scheduling a retry; installed, `OutOfFiles` makes it one accept, one retry. A
    retry that comes after the server closed its socket does nothing (asyncio's would raise, once per retry)."""
    loop = asyncio.new_event_loop()
    retries: list[object] = []
    try:
        OutOfFiles().install(loop)
        loop.call_later = lambda delay, callback, *args: retries.append(args)  # type: ignore[method-assign]
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen(8)
            loop._accept_connection(asyncio.Protocol, Crowded(sock), None, None, 2048)
            assert len(retries) == 1
        loop._start_serving(asyncio.Protocol, sock, None, None, 2048)  # closed: fileno() is -1, and no error
    finally:
        loop.close()
