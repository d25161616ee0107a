"""The JSON body an endpoint takes: the strict pydantic base of every endpoint's body (`Body`; each is declared in
its endpoint's module, `serve.endpoints`), one made from the decoding settings (`with_settings`), and a
request's body read into one (`read_body`).

The JSON itself is read strictly first (`check_json`): an object that repeats a key, at any depth, is refused
rather than read with the last one winning, and so are NaN, Infinity and -Infinity, which Python's json
module reads but JSON does not have. Every model is strict: a field of the wrong JSON type is refused, not
converted ("4" is no beam, 4.0 no top_k, true no integer); an unknown field is refused, so a misspelt option
cannot be silently ignored; and a number that overflows to infinity (1e400) is no number. Ranges and limits
are checked afterwards, by the endpoint's `prepare` (the library's own checks where it has them). `read_body`
turns whatever pydantic refuses into one line naming the field, the value and what is allowed, raised as an
`InputError` (HTTP 422; 413 for a body over the size limit).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from tformer.configio import shown
from tformer.decoding.settings import settings_fields
from tformer.serve.errors import InputError

if TYPE_CHECKING:  # read_body's argument: the app's request
    from fastapi import Request


class Body(BaseModel):
    """An endpoint's JSON body: strict, no unknown field, no infinity; `example` is a body it takes, which
    an error about a body shows."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    example: ClassVar[str] = "{}"


def with_settings(name: str, base: type[Body], settings: type, *, defaults: bool) -> type[Body]:
    """`base` with a field for each setting of `settings` (a `decoding.settings` class) that a request may give
    (`request` in its metadata): of the setting's type, defaulting to the setting's own default (`defaults`) or
    to null (not given: the server's, e.g. a run's recipe's)."""
    fields: dict[str, Any] = {}
    for f, kind in settings_fields(settings):
        if f.metadata["request"]:
            fields[f.name] = (kind, f.default) if defaults else (kind | None, None)
    return create_model(name, __base__=base, __module__=base.__module__, **fields)


async def read_body(request: Request, model: type[Body], *, limit: int) -> Any:
    """The request's JSON body as `model`; an InputError naming what is wrong with it."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise InputError(f"the body is {int(length)} bytes; this server reads at most {limit}", status=413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise InputError(f"the body is more than {limit} bytes; this server reads at most {limit}", status=413)
        chunks.append(chunk)
    raw = b"".join(chunks)
    check_json(raw)
    try:
        return model.model_validate_json(raw)
    except ValidationError as e:
        raise InputError(describe(first_error(e.errors()), model, request.url.path)) from None


def first_error(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """pydantic's first complaint; for a field that takes several types (`prefix`: a string or a list), whose
    complaints come one per type, tagged in `loc` by the type's name: one complaint without the tag, the one
    about an element of a list where there is one, else saying each type it should have been."""
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    if len(loc) < 2 or not isinstance(loc[1], str):
        return first
    members = [e for e in errors if tuple(e.get("loc", ()))[:1] == loc[:1]]
    inner = next((e for e in members if len(e["loc"]) > 2), None)
    if inner is not None:
        return {**inner, "loc": (loc[0], *inner["loc"][2:])}
    wanted = [e.get("msg", "").removeprefix("Input should be ") for e in members]
    return {**first, "loc": loc[:1], "msg": "Input should be " + " or ".join(wanted)}


def check_json(raw: bytes) -> None:
    """An InputError if the JSON text `raw` has an object that repeats a key (at any depth: which one would
    count is a guess a client should not have to make) or holds NaN, Infinity or -Infinity (not JSON). What
    is not JSON at all (bytes that are not UTF-8, a syntax error, a nesting too deep) is left to pydantic,
    whose message says where."""
    try:
        json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except InputError:
        raise
    except (ValueError, RecursionError):  # not UTF-8 or not JSON: pydantic says why
        return


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise InputError(f"the body repeats the key {shown(key)}; give each key once")
        seen.add(key)
    return dict(pairs)


def _no_constant(name: str) -> None:
    raise InputError(f"the body holds {name}, which is not JSON; give a finite number")


def describe(error: dict[str, Any], model: type[Body], path: str) -> str:
    """One line for pydantic's first complaint about a body for `path`."""
    kind, loc, message = error["type"], error.get("loc", ()), error.get("msg", "")
    fields = ", ".join(model.model_fields)
    example = model.example
    if kind == "json_invalid":
        reason = message.removeprefix("Invalid JSON: ")
        return f"the body is not valid JSON ({reason}); send an object such as {example}"
    if not loc or kind == "model_type":
        return f"the body is {_json_kind(error.get('input'))}, not a JSON object; send an object such as {example}"
    name = _path(loc)
    if kind == "extra_forbidden":
        return f"unknown field {name!r}; {path} takes {fields}"
    if kind == "missing":
        return f"missing field {name!r}; {path} takes {fields}, e.g. {example}"
    wanted = message[0].lower() + message[1:] if message else "a value of another type"
    return f"{name}={shown(error.get('input'))} is not allowed: {wanted}"


def _path(loc: tuple) -> str:
    """("texts", 2) -> "texts[2]"."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


def _json_kind(value: object) -> str:
    kinds = {list: "a list", str: "a string", bool: "true or false", int: "a number", float: "a number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


__all__ = ["Body", "check_json", "describe", "first_error", "read_body", "with_settings"]
