"""POST /generate (a GPT): {"prompt", ...} -> {"text", "tokens", "finish"}; with "stream": true, server-sent
events: `token` ({"text": the new piece}) as they come, then `done` (the answer).

A request may set the `decoding.SampleConfig` fields marked for requests (temperature, top_k, ...; defaults:
SampleConfig's). By default its work joins the running batch at a token boundary (`Stepper`, over
`decoding.continuous.Running`, scheduled by `serve.scheduler`): each row with its own settings and generator,
so any settings share the batch and a row gets what it would get alone. With --generate-batching micro (and for
a model whose layers keep a recurrent state) whole requests are micro-batched instead: the work is keyed by its
settings (`SampleConfig.search_key()`); a seeded draw has no key and runs alone, since in a batch it would take
other rows' random numbers; generations of one batch run in as few `decoding.search.sample` calls as the
context allows, each row cut at its own max_new. A server with a draft model (`tformer serve --draft`,
`Loaded.draft`) micro-batches its generations and decodes a batch of one request speculatively
(`decoding.speculative`: batch size 1); rows decoded together decode as without a draft.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from fastapi.responses import StreamingResponse

from tformer.decoding.continuous import Running, refuses
from tformer.decoding.generate import check_max_new_tokens
from tformer.decoding.search import sample
from tformer.decoding.settings import SampleConfig, with_given
from tformer.inference import Loaded, TextStream
from tformer.inference.generate import started
from tformer.inference.unknown import encode_counted
from tformer.serve.batching import Job
from tformer.serve.errors import refusal
from tformer.serve.limits import Limits
from tformer.serve.requests import Body, with_settings
from tformer.serve.service import Endpoint, Service, Submit, check_text, check_tokens, job, warned, warnings


class _Generate(Body):
    example = '{"prompt": "In the beginning"}'
    prompt: str = ""  # "" starts a new document (after the model's start token)
    max_new_tokens: int | None = None  # default: the server's --max-new-tokens
    stream: bool = False  # server-sent events, one per piece of text


# the sampling settings: default, SampleConfig's (temperature 1, no filters, unseeded, stop at end-of-text)
GenerateBody = with_settings("GenerateBody", _Generate, SampleConfig, defaults=True)


@dataclass(frozen=True)
class GenerateWork:
    """One prompt to continue: its ids, how many tokens it may get, where its text goes as it comes, and how
    it samples."""

    ids: tuple[int, ...]
    max_new: int  # at most: the request's max_new_tokens, or what the context leaves
    emit: Callable[[str], None] | None
    settings: SampleConfig
    warnings: tuple[str, ...] = ()
    size: ClassVar[int] = 1

    def batch_key(self) -> SampleConfig | None:
        return self.settings.search_key()


# --- checking a request ----------------------------------------------------------------------------------


def prepare(service: Service, *, prompt: str, max_new_tokens: int | None,
            emit: Callable[[str], None] | None = None, **given: Any) -> Job:
    """A /generate request's work: its prompt's ids (after the model's start token), how many tokens it may
    get, and how it samples (`given`: the `decoding.SampleConfig` fields the request set)."""
    limits = service.limits
    prompt = check_text(prompt, "prompt", limits, empty=True)
    max_new = limits.max_new_tokens if max_new_tokens is None else max_new_tokens
    check_max_new_tokens(max_new, most=limits.max_new_tokens, limit="--max-new-tokens")
    settings = with_given(SampleConfig(), **given)
    (ids,), unknown = encode_counted(service.tokenizer, [prompt])  # once: the ids and the warning
    ids = started(service.config, ids)
    check_tokens(len(ids), service.text_limit(room=1), "prompt", service, what=", less 1 to generate into")
    return job(GenerateWork(tuple(ids), min(max_new, service.config.max_len - len(ids)), emit, settings,
                            warnings=warnings(unknown)))


# --- running a batch -------------------------------------------------------------------------------------


def run(loaded: Loaded, works: list[GenerateWork]) -> list[dict[str, Any]]:
    """Continue every prompt of the batch in `decoding.generate` calls: as few as the context allows (the
    longest prompt plus the most new tokens of a call must fit max_len; a row's own positions start at its
    first token, so each row gets what it would get alone), each row cut at its own max_new."""

    streams = [TextStream(loaded.tokenizer) for _ in works]
    for group in _fitting(works, loaded.config.max_len):
        _run_rows(loaded, [works[i] for i in group], [streams[i] for i in group])
    return [answer(g, s) for g, s in zip(works, streams, strict=True)]


def answer(work: GenerateWork, stream: TextStream) -> dict[str, Any]:
    return {"text": stream.text, "tokens": len(stream.ids),
            "finish": "length" if len(stream.ids) == work.max_new else "stop"}


def _fitting(rows: list[GenerateWork], max_len: int) -> list[list[int]]:
    """The rows' indices in groups, in order, each group's longest prompt + most new tokens <= max_len."""
    groups: list[list[int]] = []
    longest = most = 0
    for i, g in enumerate(rows):
        if groups and max(longest, len(g.ids)) + max(most, g.max_new) <= max_len:
            groups[-1].append(i)
            longest, most = max(longest, len(g.ids)), max(most, g.max_new)
        else:
            groups.append([i])
            longest, most = len(g.ids), g.max_new
    return groups


def _run_rows(loaded: Loaded, rows: list[GenerateWork], streams: list[Any]) -> None:

    def on_token(row: int, token: int) -> None:
        if len(streams[row].ids) < rows[row].max_new:  # a row stops at its own limit, the call at the largest
            piece = streams[row].push(token)
            if piece and rows[row].emit is not None:
                rows[row].emit(piece)

    most = max(g.max_new for g in rows)
    draft = loaded.draft if len(rows) == 1 else None  # speculative decoding: one row at a time
    if most > 0:  # the rows' settings: equal (the batch key), but for what the key leaves out of a greedy search
        sample(loaded.decoder, [list(g.ids) for g in rows], rows[0].settings, max_new_tokens=most,
               eos_id=loaded.config.eos_id, pad_id=loaded.config.pad_id or 0, on_token=on_token, draft=draft)


# --- continuous batching -----------------------------------------------------------------------------------


class Stepper:
    """The works of /generate in a continuous batch of at most `rows` (`serve.scheduler.Stepped`): each row's
    tokens pushed to its text stream as they come, and its answer as `run` gives it. A piece of text goes to
    the work's `emit` at once when the row's prompt is admitted, and after the step (`streamed`, which the
    scheduler calls in the event loop) when a decode step draws it."""

    def __init__(self, loaded: Loaded, *, rows: int) -> None:
        self.loaded, self.rows = loaded, rows
        self.reset()

    def reset(self) -> None:
        self.batch = Running(self.loaded.decoder, rows=self.rows, eos_id=self.loaded.config.eos_id)
        self.works: dict[Any, tuple[GenerateWork, TextStream]] = {}
        self.stepping = False
        self.held: list[Callable[[], None]] = []  # the pieces decode steps drew, as calls of `emit`, until `streamed`

    @property
    def live(self) -> int:
        return len(self.batch.live)

    def cost(self, work: GenerateWork) -> int:
        return len(work.ids)

    def admit(self, key: Any, work: GenerateWork) -> None:
        stream = TextStream(self.loaded.tokenizer)
        self.works[key] = (work, stream)

        def on_token(token: int) -> None:
            piece = stream.push(token)
            if piece and work.emit is not None:
                if self.stepping:
                    self.held.append(partial(work.emit, piece))
                else:
                    work.emit(piece)

        self.batch.admit(key, work.ids, max_new_tokens=work.max_new, settings=work.settings, on_token=on_token)

    def step(self) -> None:
        self.stepping = True
        try:
            self.batch.step()
        finally:
            self.stepping = False

    def streamed(self) -> list[Callable[[], None]]:
        held, self.held = self.held, []
        return held

    def finished(self) -> list[tuple[Any, Any]]:
        out = []
        for key, done in self.batch.finished():
            work, stream = self.works.pop(key)
            out.append((key, done.error if done.error is not None else answer(work, stream)))
        return out

    def drop(self, key: Any) -> None:
        self.batch.drop(key)
        self.works.pop(key, None)


def steps(loaded: Loaded, limits: Limits) -> Stepper | None:
    """The continuous batch of `loaded`'s generations (None where its layers keep a recurrent state)."""
    return None if refuses(loaded.model) is not None else Stepper(loaded, rows=limits.max_batch)


# --- the answer, whole or streamed -----------------------------------------------------------------------


async def respond(service: Service, body: Any, submit: Submit) -> Any:
    """The generation's {"text", "tokens", "finish"} (and its warnings); with "stream", server-sent events."""
    settings = body.model_dump(exclude={"stream"})  # prompt, max_new_tokens and the sampling settings

    async def answered(queued: Job) -> dict[str, Any]:
        return {**await submit(queued), **warned(queued.work)}

    if not body.stream:
        return await answered(prepare(service, **settings))
    return stream(lambda emit: prepare(service, **settings, emit=emit), answered)


def stream(prepare_with: Callable[[Callable[[str], None]], Job], answer: Callable[[Job], Any]) -> StreamingResponse:
    """Server-sent events of one generation: `token` events with each new piece of text as the model's
    thread produces it, then one `done` event with the whole answer (or an `error` event). The request is
    checked before the stream starts, so a bad one is a plain 4xx JSON answer."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue[str | None] = asyncio.Queue()
    queued = prepare_with(lambda piece: loop.call_soon_threadsafe(pieces.put_nowait, piece))
    task = asyncio.ensure_future(answer(queued))
    # the model's thread schedules every piece before its batch returns, so the end marker comes after them
    task.add_done_callback(lambda _: pieces.put_nowait(None))

    async def events() -> AsyncIterator[str]:
        try:
            while (piece := await pieces.get()) is not None:
                yield sse("token", {"text": piece})
            if task.exception() is None:
                yield sse("done", task.result())
            else:
                yield sse("error", {"error": refusal(task.exception())})
        finally:
            task.cancel()  # a client that left: its row leaves at the next step (micro-batched: decodes on, dropped)

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


ENDPOINT = Endpoint(name="generate", kinds=("gpt",), body=GenerateBody, work=GenerateWork, run=run, respond=respond,
                    steps=steps)

__all__ = ["ENDPOINT", "GenerateBody", "GenerateWork", "Stepper", "answer", "prepare", "run", "sse", "steps",
           "stream"]
