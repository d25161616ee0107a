"""Who can reach a server (issue 31, "the server's doors"): a Host allow-list against DNS rebinding, the
Origin and content-type checks against cross-site requests, an API key for a server exposed on purpose, an
implicit every-interface --host refused, and deadlines and a cap that keep half-sent requests from holding it
(with running out of file descriptors told in one line, not a traceback). Real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import errno
import http.client
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from serving import call

from tformer.cli import main
from tformer.errors import UserError
from tformer.serve.connections import OutOfFiles, connection_cap
from tformer.serve.doors import Doors, host_name, same_origin

SRC = str(Path(__file__).resolve().parents[2] / "src")
GENERATE = {"prompt": "the", "max_new_tokens": 2, "temperature": 0}
KEY = "k3y-0f-th1s-server"


@contextmanager
def serve(checkpoint: Path, **doors: Any) -> Iterator[str]:
    """A GPT server behind `Doors(**doors)` on 127.0.0.1 (a free port); yields its URL."""
    from tformer.serve import Limits
    from tformer.serve.app import create_app
    from tformer.serve.endpoints import load_service
    from tformer.serve.server import ServerThread

    service = load_service(checkpoint, limits=Limits(max_new_tokens=4, batch_wait_ms=1.0), device="cpu")
    with ServerThread(create_app(service), doors=Doors(**doors)) as url:
        yield url


@pytest.fixture(scope="module")
def gpt(checkpoints: dict[str, Path]) -> Iterator[str]:
    with serve(checkpoints["gpt"]) as url:
        yield url


@pytest.fixture(scope="module")
def keyed(checkpoints: dict[str, Path]) -> Iterator[str]:
    with serve(checkpoints["gpt"], api_key=KEY) as url:
        yield url


def port_of(url: str) -> int:
    return urlsplit(url).port


def connect(url: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port_of(url)), timeout=10)


def read_all(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (a timeout if it does not within 10 s)."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


# --- Host: DNS rebinding ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:{port}", "127.0.0.1.attacker.example",
                                  "localhost.attacker.example", "10.0.0.7", "localhost:x", "[::1", "a, b"])
def test_a_host_that_is_not_this_server_is_refused(gpt: str, host: str) -> None:
    host = host.format(port=port_of(gpt))
    status, answer = call(gpt, "POST", "/generate", GENERATE, headers={"Host": host})
    assert status == 421, answer
    message = answer["error"]
    assert f"Host {host!r} is not a name of this server" in message and "--allow-host" in message
    assert "\n" not in message
    assert call(gpt, "GET", "/health", headers={"Host": host})[0] == 421


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "127.0.0.1", "localhost:{port}", "LocalHost", "localhost.",
                                  "[::1]:{port}", "[::1]"])
def test_localhost_names_with_or_without_the_port_are_let_in(gpt: str, host: str) -> None:
    status, answer = call(gpt, "POST", "/generate", GENERATE, headers={"Host": host.format(port=port_of(gpt))})
    assert status == 200 and answer["tokens"] == 2, answer


def test_allow_host_adds_names_and_star_lets_any_in(checkpoints: dict[str, Path]) -> None:
    with serve(checkpoints["gpt"], allow_hosts=("api.example:443", "[fd00::5]")) as url:
        assert call(url, "GET", "/health", headers={"Host": "api.example"})[0] == 200
        assert call(url, "GET", "/health", headers={"Host": "[fd00::5]:8000"})[0] == 200
        status, answer = call(url, "GET", "/health", headers={"Host": "other.example"})
        assert status == 421 and "api.example" in answer["error"] and "fd00::5" in answer["error"]
    with serve(checkpoints["gpt"], allow_hosts=("*",)) as url:
        assert call(url, "GET", "/health", headers={"Host": "anything.example"})[0] == 200


def test_a_request_without_host_is_refused(gpt: str) -> None:
    with connect(gpt) as sock:  # HTTP/1.0 may leave Host out; HTTP/1.1 may not (h11 answers that 400 itself)
        sock.sendall(b"GET /health HTTP/1.0\r\n\r\n")
        head, _, body = read_all(sock).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"no Host header" in body


def test_every_interface_lets_in_this_machines_name_and_any_address_but_no_other_name() -> None:
    doors = Doors(host="0.0.0.0")
    assert doors.lets_in("10.1.2.3:8000") and doors.lets_in("[fe80::1]") and doors.lets_in(socket.gethostname())
    assert not doors.lets_in("attacker.example") and not doors.lets_in(None)
    assert not Doors(host="127.0.0.1").lets_in("10.1.2.3")  # one address: only its own
    assert Doors(host="192.168.7.9").lets_in("192.168.7.9:8000")


@pytest.mark.parametrize("value, name", [("Example.COM:8000", "example.com"), ("[::1]:80", "::1"), ("::1", "::1"),
                                         ("localhost.", "localhost"), ("a b", None), ("x:", None), ("[::1]x", None),
                                         ("", None), ("é.example", None), ("host:80:80", None)])
def test_host_names_are_read_strictly(value: str, name: str | None) -> None:
    assert host_name(value) == name


def test_a_bad_allow_host_is_one_line() -> None:
    with pytest.raises(UserError, match=r"--allow-host 'a/b' is not a host name or address; give a name such as"):
        Doors(allow_hosts=("a/b",))


# --- Origin and content type: cross-site requests --------------------------------------------------------------

def test_a_cross_site_text_plain_post_is_refused(gpt: str) -> None:
    """What any web page can send without a preflight: a foreign Origin and text/plain."""
    status, answer = call(gpt, "POST", "/generate", GENERATE,
                          headers={"Content-Type": "text/plain", "Origin": "http://attacker.example"})
    assert status == 403
    assert answer["error"] == (f"Origin 'http://attacker.example' is not this server's own (http://127.0.0.1:"
                               f"{port_of(gpt)}): requests from other web pages are refused")


@pytest.mark.parametrize("origin", ["http://attacker.example", "null", "http://127.0.0.1:{other}",
                                    "http://localhost:{port}", "file://", "http://127.0.0.1:{port}/x"])
def test_a_foreign_origin_is_refused_even_for_json_and_get(gpt: str, origin: str) -> None:
    origin = origin.format(port=port_of(gpt), other=port_of(gpt) + 1)
    assert call(gpt, "POST", "/generate", GENERATE, headers={"Origin": origin})[0] == 403
    assert call(gpt, "GET", "/info", headers={"Origin": origin})[0] == 403


def test_the_servers_own_origin_is_let_in(gpt: str) -> None:
    for origin in (f"http://127.0.0.1:{port_of(gpt)}", f"HTTPS://127.0.0.1:{port_of(gpt)}"):  # https: a TLS proxy
        status, answer = call(gpt, "POST", "/generate", GENERATE, headers={"Origin": origin})
        assert status == 200 and answer["tokens"] == 2
    assert same_origin("https://api.example", "api.example") and same_origin("http://a.example", "a.example:80")
    assert not same_origin("http://a.example:81", "a.example") and not same_origin("ftp://a.example", "a.example")


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                  "application/jsonx", None])
def test_a_post_that_is_not_application_json_is_415(gpt: str, kind: str | None) -> None:
    headers = {"Content-Type": kind} if kind else {}
    if kind is None:  # http.client adds none by itself; serving.call always sends application/json
        parts = urlsplit(gpt)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        connection.request("POST", "/generate", body=b'{"prompt": "the"}', headers=headers)
        response = connection.getresponse()
        status, message = response.status, response.read().decode()
        connection.close()
        assert status == 415 and "Content-Type: application/json, and the request has none" in message
        return
    status, answer = call(gpt, "POST", "/generate", GENERATE, headers=headers)
    assert status == 415
    assert answer["error"] == f"POST /generate takes a JSON body with Content-Type: application/json, not {kind!r}"


def test_json_with_a_charset_is_json(gpt: str) -> None:
    status, answer = call(gpt, "POST", "/generate", GENERATE,
                          headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert status == 200 and answer["tokens"] == 2


# --- the API key ------------------------------------------------------------------------------------------------

def test_with_an_api_key_the_page_and_health_are_open_and_the_rest_needs_it(keyed: str) -> None:
    for path in ("/", "/static/app.js", "/static/style.css", "/health"):
        assert call(keyed, "GET", path)[0] == 200, path
    parts = urlsplit(keyed)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("GET", "/info")
    response = connection.getresponse()
    assert response.status == 401 and response.getheader("WWW-Authenticate") == "Bearer"
    assert "GET /info needs this server's API key" in response.read().decode()
    connection.close()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY},
                    {"Authorization": f"Basic {KEY}"}, {"Authorization": f"Bearer {KEY}x"}):
        status, answer = call(keyed, "POST", "/generate", GENERATE, headers=headers)
        assert status == 401 and answer["error"].startswith("POST /generate needs this server's API key"), headers
    status, answer = call(keyed, "POST", "/generate", GENERATE, headers={"Authorization": f"bearer {KEY}"})
    assert status == 200 and answer["tokens"] == 2
    assert call(keyed, "GET", "/info", headers={"Authorization": f"Bearer {KEY}"})[0] == 200


@pytest.mark.parametrize("key", ["", "two words", "clé"])
def test_a_key_that_cannot_travel_in_a_header_is_refused(key: str) -> None:
    with pytest.raises(UserError, match="must be one word of visible ASCII"):
        Doors(api_key=key)
    assert KEY not in repr(Doors(api_key=KEY))  # nor does a good one show in a log of the settings


def test_the_page_asks_for_the_key_and_then_works(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    from test_serve_browser import chromium_driver

    browser = chromium_driver(tmp_path / "profile")
    try:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        with serve(checkpoints["seq2seq"], api_key=KEY) as url:
            browser.get(url + "/")
            wait = WebDriverWait(browser, 60)
            wait.until(lambda b: b.find_element(By.ID, "key-form").is_displayed())
            assert browser.find_element(By.ID, "go").get_attribute("disabled") is not None
            browser.find_element(By.ID, "key").send_keys(KEY)
            browser.find_element(By.ID, "use-key").click()
            wait.until(lambda b: b.find_element(By.ID, "go").is_enabled())
            assert not browser.find_element(By.ID, "key-form").is_displayed()
            browser.find_element(By.ID, "text").clear()
            browser.find_element(By.ID, "text").send_keys("the big cat")  # within the tiny model's context
            browser.find_element(By.ID, "go").click()
            wait.until(lambda b: b.find_element(By.ID, "attention").get_attribute("data-state") == "drawn"
                       or b.find_element(By.ID, "status").get_attribute("class") == "error")
            status = browser.find_element(By.ID, "status")
            assert status.get_attribute("class") != "error", status.text
            assert browser.find_element(By.ID, "output").get_attribute("textContent")
    finally:
        browser.quit()


# --- --host and the warning ------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["", " ", "*", "0", "0.0"])
def test_an_implicit_every_interface_host_is_refused(host: str, checkpoints: dict[str, Path],
                                                     capsys: pytest.CaptureFixture) -> None:
    assert main(["serve", "--checkpoint", str(checkpoints["gpt"]), "--port", "0", "--host", host]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"tformer: error: --host {host!r} would listen on every interface")
    assert "say --host 0.0.0.0 (or ::) if that is meant" in err and "127.0.0.1" in err


@pytest.mark.parametrize("argv, words", [
    (["--allow-host", "a b"], ["--allow-host 'a b' is not a host name or address"]),
    (["--api-key", ""], ["--api-key (or TFORMER_API_KEY) must be one word of visible ASCII"]),
    (["--header-timeout", "0"], ["--header-timeout=0.0 must be a number of seconds in (0, 3600]"]),
    (["--body-timeout", "inf"], ["argument --body-timeout", "not a finite number"]),
    (["--max-connections", "0"], ["argument --max-connections", "0 is out of range"]),
])
def test_bad_door_options_are_one_line_and_exit_2(argv: list[str], words: list[str], checkpoints: dict[str, Path],
                                                  capsys: pytest.CaptureFixture) -> None:
    assert main(["serve", "--checkpoint", str(checkpoints["gpt"]), "--port", "0", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tformer: error: "), err
    for word in words:
        assert word in err, err


class Stopped:
    """A stand-in for uvicorn's server that records its doors and stops as Ctrl-C would, at once."""

    doors: Any = None

    def __init__(self, app: Any, *, doors: Any, log_level: str) -> None:
        Stopped.doors = doors

    def run(self, sockets: Any) -> None:
        raise KeyboardInterrupt


@pytest.mark.parametrize("argv, env, warned", [
    (["--host", "0.0.0.0"], {}, True),
    (["--host", "0.0.0.0", "--api-key", KEY], {}, False),
    (["--host", "0.0.0.0"], {"TFORMER_API_KEY": KEY}, False),
    (["--host", "127.0.0.1"], {}, False),
])
def test_every_interface_without_a_key_warns(argv: list[str], env: dict[str, str], warned: bool,
                                              checkpoints: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr("tformer.serve.server.make_server", Stopped)
    monkeypatch.delenv("TFORMER_API_KEY", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", "--checkpoint", str(checkpoints["gpt"]), "--port", "0", *argv]) == 0
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if "warning" in line]
    assert len(warning) == int(warned), err
    if warned:
        assert warning[0].startswith("tformer serve: warning: listening on 0.0.0.0, which other machines can reach, "
                                     "with no authentication") and "--api-key" in warning[0]
    assert Stopped.doors.api_key == (None if warned or "127.0.0.1" in argv else KEY)


# --- half-sent requests, too many connections, no file descriptors left -----------------------------------------

def test_half_sent_headers_are_closed_after_the_header_timeout(checkpoints: dict[str, Path]) -> None:
    with serve(checkpoints["gpt"], header_timeout=1.0) as url:
        socks = [connect(url) for _ in range(30)]
        for sock in socks:
            sock.sendall(b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        assert call(url, "GET", "/health") == (200, {"status": "ok"})  # answered while they wait
        trickle, began = connect(url), time.monotonic()
        for byte in b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ":  # a byte every 0.1 s: no reprieve
            try:
                trickle.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.1)
        answers = [read_all(sock) for sock in socks]
        assert time.monotonic() - began < 6  # every one closed by then
        assert read_all(trickle).startswith(b"HTTP/1.1 408 Request Timeout")
        for sock in (*socks, trickle):
            sock.close()
    assert all(a.startswith(b"HTTP/1.1 408 Request Timeout\r\n") for a in answers)
    assert answers[0].endswith(b'{"error":"the request\'s line and headers did not arrive within 1 s '
                               b'(--header-timeout)"}')


def read_one(sock: socket.socket) -> bytes:
    """One whole answer off a kept-alive connection: its head, then as many body bytes as it announces
    (a body may come in a packet of its own)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                  if line.startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_an_idle_keep_alive_connection_gets_the_header_timeout_again(checkpoints: dict[str, Path]) -> None:
    with serve(checkpoints["gpt"], header_timeout=1.0) as url, connect(url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_one(sock).startswith(b"HTTP/1.1 200 OK")
        began = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\n")  # a second request that stalls (keeping keep-alive's timer off)
        assert read_all(sock).startswith(b"HTTP/1.1 408 Request Timeout")
        assert 0.5 < time.monotonic() - began < 4


def test_a_stalled_body_is_408_and_closed(checkpoints: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), serve(checkpoints["gpt"], body_timeout=1.0) as url, \
            connect(url) as sock:
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"prompt\": ")
        began = time.monotonic()
        head, _, body = read_all(sock).partition(b"\r\n\r\n")
        assert 0.5 < time.monotonic() - began < 4
    assert head.startswith(b"HTTP/1.1 408 ") and b"connection: close" in head.lower()
    assert body == (b'{"error":"the body did not arrive within 1 s of the headers (--body-timeout); send it whole, '
                    b'at once"}')
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # the client's fault: no traceback


def test_a_body_left_unread_closes_the_connection(gpt: str) -> None:
    """A refusal that never reads the body (here: no /translate on a GPT) cannot be held open by dripping it."""
    with connect(gpt) as sock:
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{")
        head = read_all(sock).partition(b"\r\n\r\n")[0]
    assert head.startswith(b"HTTP/1.1 404 ") and b"connection: close" in head.lower()


def test_over_max_connections_is_503_at_once_and_the_rest_are_served(checkpoints: dict[str, Path]) -> None:
    with serve(checkpoints["gpt"], max_connections=4) as url:
        parts = urlsplit(url)
        held = [http.client.HTTPConnection(parts.hostname, parts.port, timeout=10) for _ in range(4)]
        for connection in held:  # answered, so accepted; kept open (keep-alive)
            connection.request("GET", "/health")
            assert connection.getresponse().read() == b'{"status":"ok"}'
        with connect(url) as sock:
            answer = read_all(sock)  # sent before the client says anything
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable")
        assert answer.endswith(b'{"error":"this server holds 4 connections already (--max-connections); try again '
                               b'shortly"}')
        held[0].request("GET", "/health")  # those held are still served
        assert held[0].getresponse().status == 200
        for connection in held:
            connection.close()
        deadline = time.monotonic() + 10
        while call(url, "GET", "/health")[0] != 200:  # room again once they are gone
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_connection_cap_defaults_to_half_the_open_files() -> None:
    assert connection_cap(None, 1024) == 512 and connection_cap(None, 1_000_000) == 1000
    assert connection_cap(None, 20) == 16 and connection_cap(None, None) == 1000 and connection_cap(7, 1024) == 7


def test_out_of_files_is_one_line_and_the_rest_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    loop, seen = asyncio.new_event_loop(), []
    try:
        loop.set_exception_handler(lambda _, context: seen.append(context["message"]))
        handler = OutOfFiles()
        handler.install(loop)
        with caplog.at_level(logging.WARNING, logger="tformer.serve"):
            for _ in range(3):
                loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                             "exception": OSError(errno.EMFILE, "Too many open files")})
            loop.call_exception_handler({"message": "something else", "exception": ValueError("x")})
    finally:
        loop.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "tformer.serve"]
    assert lines == ["tformer serve: cannot accept connections: Too many open files (EMFILE); retrying each "
                     "second (raise `ulimit -n`, or lower --max-connections)"]
    assert seen == ["something else"]  # passed on to the handler it replaced


def test_running_out_of_file_descriptors_is_one_line_and_the_server_recovers(checkpoints: dict[str, Path]) -> None:
    """`ulimit -n 128` and 200 half-sent requests: some cannot be accepted (EMFILE) until the header timeout
    closes the first ones; /health is answered, and stderr has one line about it and no traceback."""
    # the child lowers its own limit (a preexec_fn is unsafe while this process runs server threads)
    lowered = ("import resource, sys; from tformer.cli import main; resource.setrlimit(resource.RLIMIT_NOFILE, "
               "(128, resource.getrlimit(resource.RLIMIT_NOFILE)[1])); sys.exit(main())")
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen([sys.executable, "-c", lowered, "serve", "--checkpoint", str(checkpoints["gpt"]),
                                "--port", "0", "--device", "cpu", "--header-timeout", "1", "--max-connections",
                                "1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    socks = []
    try:
        line = process.stdout.readline()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert match, line + (process.stderr.read() if process.poll() is not None else "")
        url = match.group(1)
        for _ in range(200):
            socks.append(connect(url))
            socks[-1].sendall(b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        began = time.monotonic()
        assert call(url, "GET", "/health") == (200, {"status": "ok"})
        assert time.monotonic() - began < 10
        assert all(read_all(sock).startswith(b"HTTP/1.1 408 ") for sock in socks)
    finally:
        for sock in socks:
            sock.close()
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    err = process.stderr.read()
    assert code == 0, err
    assert "Traceback" not in err and "Errno 24" not in err, err
    assert err.count("cannot accept connections: Too many open files (EMFILE)") == 1, err
