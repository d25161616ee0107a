"""Who may talk to a server, and what a request must show before the app reads it.

A server on 127.0.0.1 is still reachable by any web page its user opens, through the browser:

- DNS rebinding: a page whose own name is made to resolve to 127.0.0.1 reads the API as if it were its own
  site. Its requests carry that name in `Host`, so only the names this server answers to are let in: the
  address it listens on, localhost's names, and each `--allow-host`. A server listening on every interface
  (0.0.0.0 or ::) also takes this machine's host name and any IP address in `Host`: a literal address is
  never resolved, so no page can rebind it.
- Cross-site requests: a form or a `fetch` with `Content-Type: text/plain` goes out without a preflight. Such
  a request carries its page's `Origin`, which must be this server's own, and a POST must say
  `Content-Type: application/json`, which no cross-site request can without the preflight that fails here.

Exposed beyond this machine, a server needs a key (`api_key`): every request but the page, its two static
files and /health then sends `Authorization: Bearer KEY`. `Guard` is the ASGI middleware that applies these
checks before the app and gives the body its deadline; `serve.connections` bounds the connections below it.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import re
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tformer.errors import UserError
from tformer.serve.errors import InputError

LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::"})  # the spellings that mean every interface
# what a browser loads without a script to add a header: the page, its files, and the probe of a load balancer
OPEN_PATHS = frozenset({"/", "/static/app.js", "/static/style.css", "/health"})
NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")  # a DNS name in Host, lower case
MAX_TIMEOUT = 3600.0

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def host_name(value: str) -> str | None:
    """The name in a Host value ("Example.COM:8000" -> "example.com", "[::1]:80" -> "::1"); None when it is
    no name or address. A trailing dot (the root of DNS) names the same host."""
    value = value.strip().lower()
    if value.startswith("["):  # an IPv6 address, with its port after the bracket
        name, bracket, rest = value[1:].partition("]")
        port = rest.removeprefix(":")
        ok = bracket and is_address(name) and (rest == "" or (rest.startswith(":") and port.isdigit()))
        return name if ok else None
    if value.count(":") > 1:  # an IPv6 address without brackets (as --allow-host may give it)
        return value if is_address(value) else None
    name, _, port = value.partition(":")
    name = name.removesuffix(".")
    if (port and not port.isdigit()) or (":" in value and not port) or not NAME.fullmatch(name):
        return None
    return name


def is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, kw_only=True)
class Doors:
    """Who a server lets in, and how long a request may take to arrive (`tformer serve`'s options)."""

    host: str = "127.0.0.1"  # the address it listens on, as given: its name is one Host may give
    allow_hosts: tuple[str, ...] = ()  # more names Host may give (a port, if given, is ignored); "*": any
    api_key: str | None = field(default=None, repr=False)  # set: all but the page and /health need `Bearer KEY`
    header_timeout: float = 10.0  # seconds a request's line and headers may take, from its first chance
    body_timeout: float = 30.0  # seconds its body may take once the headers are in
    max_connections: int | None = None  # open at once; None: half the open-file limit, at most 1000
    names: frozenset[str] = field(init=False)  # the Host names let in, derived from the above

    def __post_init__(self) -> None:
        for option in ("header_timeout", "body_timeout"):
            value = getattr(self, option)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TIMEOUT:
                raise UserError(f"--{option.replace('_', '-')}={value} must be a number of seconds in "
                                f"(0, {MAX_TIMEOUT:g}]")
        if self.max_connections is not None and (isinstance(self.max_connections, bool)
                                                 or not isinstance(self.max_connections, int)
                                                 or self.max_connections < 1):
            raise UserError(f"--max-connections={self.max_connections} must be a positive integer")
        if self.api_key is not None and not re.fullmatch(r"[\x21-\x7e]+", self.api_key):
            raise UserError("--api-key (or TFORMER_API_KEY) must be one word of visible ASCII characters "
                            "(it travels in an HTTP header); give a long random one, e.g. from "
                            "`python -c 'import secrets; print(secrets.token_urlsafe())'`")
        names = set(LOCAL_NAMES) | {host_name(self.host) or self.host.lower()}
        for given in self.allow_hosts:
            name = given if given == "*" else host_name(given)
            if name is None:
                raise UserError(f"--allow-host {given!r} is not a host name or address; give a name such as "
                                "example.com, an address such as 192.168.1.5 or [::1], or '*' for any")
            names.add(name)
        if self.wildcard:
            names.add(socket.gethostname().lower())
        object.__setattr__(self, "names", frozenset(names))

    @property
    def wildcard(self) -> bool:
        """Listening on every interface (0.0.0.0 or ::)."""
        return self.host in WILDCARDS

    def lets_in(self, host: str | None) -> bool:
        """Whether a request whose Host is `host` is for this server (see the module's notes)."""
        if "*" in self.names:
            return True
        name = None if host is None else host_name(host)
        if name is None:
            return False
        return name in self.names or (self.wildcard and is_address(name))

    def refusal(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str] | None:
        """(status, one line) refusing a request, or None to let it in. `headers`: lower-case names."""
        host = headers.get("host")
        if not self.lets_in(host):
            if host is None:
                return 400, "the request has no Host header; send one naming this server, e.g. Host: 127.0.0.1"
            name = host_name(host) or host
            shown = ", ".join(sorted(f"[{n}]" if ":" in n else n for n in self.names))
            return 421, (f"Host {clip(host)!r} is not a name of this server ({shown}); to let it in, start the "
                         f"server with --allow-host {clip(name)}")
        origin, host = headers.get("origin"), host or ""
        if origin is not None and not same_origin(origin, host):
            return 403, (f"Origin {clip(origin)!r} is not this server's own (http://{clip(host)}): requests "
                         "from other web pages are refused")
        if self.api_key is not None and not (method in ("GET", "HEAD") and path in OPEN_PATHS):
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("latin-1"),
                                                                      self.api_key.encode()):
                return 401, (f"{method} {path} needs this server's API key: send the header "
                             "Authorization: Bearer KEY (KEY: its --api-key)")
        if method == "POST" and headers.get("content-type", "").partition(";")[0].strip().lower() != "application/json":
            given = f"not {clip(headers['content-type'])!r}" if "content-type" in headers else \
                "and the request has none"
            return 415, f"POST {path} takes a JSON body with Content-Type: application/json, {given}"
        return None


def same_origin(origin: str, host: str) -> bool:
    """Whether a page at `origin` ("http://127.0.0.1:8000") is this server's own, reached as Host `host`; a
    TLS proxy in front makes it https, with the same host and port (the default ports left out)."""
    parts = urlsplit(origin.strip().lower())
    defaults = {"http": ":80", "https": ":443"}
    if parts.scheme not in defaults or parts.path or parts.query or parts.fragment or "@" in parts.netloc:
        return False
    return parts.netloc.removesuffix(defaults[parts.scheme]) == host.strip().lower().removesuffix(
        defaults[parts.scheme])


def clip(text: str, limit: int = 80) -> str:
    """A value a client sent, cut to a length a one-line answer can show."""
    return text if len(text) <= limit else text[:limit] + "..."


class Guard:
    """ASGI middleware: a request the doors refuse is answered {"error": one line} before the app sees it;
    one let in has `body_timeout` seconds from its headers to deliver its body (a 408 otherwise), and a
    response that leaves part of the body unread closes the connection, so a client cannot hold it by
    dripping a body nobody reads."""

    def __init__(self, app: App, doors: Doors) -> None:
        self.app, self.doors = app, doors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan
            return await self.app(scope, receive, send)
        headers: dict[str, str] = {}
        for key, value in scope["headers"]:  # repeated headers joined as one (RFC 9110 5.3): "a, b" is no host
            name, text = key.decode("latin-1").lower(), value.decode("latin-1")
            headers[name] = f"{headers[name]}, {text}" if name in headers else text
        refused = self.doors.refusal(scope["method"], scope["path"], headers)
        if refused is not None:
            extra = [(b"www-authenticate", b"Bearer")] if refused[0] == 401 else []
            return await answer(send, *refused, extra)

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.doors.body_timeout
        whole = headers.get("content-length", "0") == "0" and "transfer-encoding" not in headers

        async def timed_receive() -> Message:
            nonlocal whole
            if whole:  # the body is in: what is left to receive is the client leaving, whenever it does
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0))
            except asyncio.TimeoutError:
                raise InputError(f"the body did not arrive within {self.doors.body_timeout:g} s of the headers "
                                 "(--body-timeout); send it whole, at once", status=408) from None
            whole = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def closing_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not whole:
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        await self.app(scope, timed_receive, closing_send)


async def answer(send: Send, status: int, message: str, headers: list[tuple[bytes, bytes]]) -> None:
    """A refusal as {"error": one line}; the connection closes after it, the request's body unread."""
    body = json.dumps({"error": message}, ensure_ascii=False, separators=(",", ":")).encode()  # as FastAPI's
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": body})


__all__ = ["LOCAL_NAMES", "OPEN_PATHS", "WILDCARDS", "Doors", "Guard", "host_name", "same_origin"]
