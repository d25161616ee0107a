"""The HTTP API: a FastAPI app over one loaded checkpoint (`service.Service`).

    GET  /            the web page (`page`)
    GET  /health      {"status": "ok"}
    GET  /info        the model's kind and sizes, its endpoints, the limits, and the batches so far
    POST /translate   encoder-decoder: {"text"} or {"texts"} -> {"translation"} or {"translations"}; with
                      "n_best", also "hypotheses" (text, score, log_prob, eos), best first
    POST /generate    GPT: {"prompt", ...} -> {"text", "tokens", "finish"}; with "stream": true, server-sent
                      events: `token` ({"text": the new piece}) as they come, then `done` (the answer)
    POST /score       GPT: {"text"} or {"texts"} -> {"score"} or {"scores"}: log-likelihood, perplexity, bits
                      per token and per character, and each token's log-probability
    POST /classify    BERT classifier: {"text"} or {"texts"} -> {"classification"} or {"classifications"}:
                      labels with their probabilities, most likely first
    POST /attention   any model with exact attention: {"text"} -> {"maps"}: every layer's and head's weights

An answer about text the model's tokenizer cannot all represent (unknown tokens) holds "warnings", a list of
one-line messages (`inference.unknown_warning`, what the command line prints on stderr); it is absent
otherwise. Every answer that is not a success is JSON {"error": "one line"}: 422 for a bad value (naming it and what
is allowed), 404 for an endpoint this model does not serve (naming those it does), 405 for a wrong method,
413 for a body over the limit; 500 only for a fault of the server, never for what a client sent. HEAD of
the GET paths is GET without the body; a path with a trailing slash is no endpoint (404), never a redirect.
Decoding requests go through the micro-batcher (`batching`), which the app starts and stops with its life.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from tformer.errors import UserError
from tformer.serve import page
from tformer.serve.batching import Job, MicroBatcher, Sleep
from tformer.serve.errors import error_message, status_of
from tformer.serve.requests import AttentionBody, ClassifyBody, GenerateBody, ScoreBody, TranslateBody, read_body
from tformer.serve.service import (
    Service,
    prepare_attention,
    prepare_classify,
    prepare_generate,
    prepare_score,
    prepare_translate,
)
from tformer.serve.work import run_batch

LOG = logging.getLogger("tformer.serve")


def create_app(service: Service, *, sleep: Sleep = asyncio.sleep) -> FastAPI:
    """The app serving `service`; its micro-batcher runs while the app does (ASGI lifespan), its batches
    waiting for company with `sleep` (tests pass one they end themselves).

    A function should stay near 60 lines; this one is longer on purpose: each route is a few lines of FastAPI
    declaration that closes over the same service and batcher, and one list of routes reads as the API's table
    of contents."""
    limits = service.limits
    batcher = MicroBatcher(partial(run_batch, service.loaded), max_batch=limits.max_batch,
                           wait_s=limits.batch_wait_ms / 1000, sleep=sleep)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="tformer", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None,
                  redirect_slashes=False)  # /translate/ is no endpoint (a 404 naming them), never a redirect
    app.state.service, app.state.batcher = service, batcher
    add_error_handlers(app, service)
    page.add_routes(app)

    async def body(request: Request, endpoint: str, model: type) -> Any:
        service.need(endpoint)  # the wrong endpoint for this model is named before its body is read
        return await read_body(request, model, limit=limits.max_body_bytes)

    async def answer(job: Job) -> Any:  # a UserError from the batch goes to the one handler, as a check's does
        return await batcher.submit(job)

    def warned(job: Job) -> dict[str, Any]:
        return {"warnings": list(job.work.warnings)} if job.work.warnings else {}

    @app.api_route("/health", methods=["GET", "HEAD"])  # HEAD: GET's answer without its body
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.api_route("/info", methods=["GET", "HEAD"])
    async def info() -> dict[str, Any]:
        return {**service.info(), "batches": batcher.stats()}

    @app.post("/translate")
    async def translate(request: Request) -> dict[str, Any]:
        b = await body(request, "translate", TranslateBody)
        job = prepare_translate(service, **b.model_dump())  # the body's fields: text(s), n_best, prefix, settings
        out, notes = await answer(job), warned(job)
        if b.n_best is None:
            return {**({"translation": out[0]} if b.texts is None else {"translations": out}), **notes}
        best = [hyps[0]["text"] if hyps else "" for hyps in out]
        if b.texts is None:
            return {"translation": best[0], "hypotheses": out[0], **notes}
        return {"translations": best, "hypotheses": out, **notes}

    @app.post("/generate")
    async def generate(request: Request) -> Any:
        b = await body(request, "generate", GenerateBody)
        settings = b.model_dump(exclude={"stream"})  # prompt, max_new_tokens and the sampling settings

        async def answered(job: Job) -> dict[str, Any]:
            return {**await answer(job), **warned(job)}

        if not b.stream:
            return await answered(prepare_generate(service, **settings))
        return stream_generation(lambda emit: prepare_generate(service, **settings, emit=emit), answered)

    @app.post("/score")
    async def score(request: Request) -> dict[str, Any]:
        b = await body(request, "score", ScoreBody)
        job = prepare_score(service, text=b.text, texts=b.texts, per_token=b.per_token)
        out = await answer(job)
        return {**({"score": out[0]} if b.texts is None else {"scores": out}), **warned(job)}

    @app.post("/classify")
    async def classify(request: Request) -> dict[str, Any]:
        b = await body(request, "classify", ClassifyBody)
        job = prepare_classify(service, text=b.text, texts=b.texts, top=b.top)
        out = await answer(job)
        return {**({"classification": out[0]} if b.texts is None else {"classifications": out}), **warned(job)}

    @app.post("/attention")
    async def attention(request: Request) -> dict[str, Any]:
        b = await body(request, "attention", AttentionBody)
        return await answer(prepare_attention(service, text=b.text, target=b.target))

    return app


def stream_generation(prepare: Callable[[Callable[[str], None]], Job],
                      answer: Callable[[Job], Any]) -> StreamingResponse:
    """Server-sent events of one generation: `token` events with each new piece of text as the model's
    thread produces it, then one `done` event with the whole answer (or an `error` event). The request is
    checked before the stream starts, so a bad one is a plain 4xx JSON answer."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue[str | None] = asyncio.Queue()
    job = prepare(lambda piece: loop.call_soon_threadsafe(pieces.put_nowait, piece))
    task = asyncio.ensure_future(answer(job))
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
            task.cancel()  # a client that left: its row still decodes, its answer is dropped

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def refusal(e: BaseException) -> str:
    """The one line a client reads: the user's error as it is; a fault of the server named as one, with its
    traceback in the server's log."""
    if isinstance(e, UserError):
        return error_message(e)
    LOG.error("internal error", exc_info=e)
    return f"internal error ({type(e).__name__}: {error_message(e)})"


def add_error_handlers(app: FastAPI, service: Service) -> None:
    """Every refusal as {"error": one line}; unknown paths and wrong methods named with what there is."""
    paths = ["GET /", "GET /health", "GET /info"] + [f"POST /{e}" for e in service.endpoints]

    @app.exception_handler(UserError)  # a request's checks and the library's: the client's to fix
    async def refused(request: Request, e: UserError) -> JSONResponse:
        return JSONResponse({"error": error_message(e)}, status_code=status_of(e))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        where = f"{request.method} {request.url.path}"
        if e.status_code == 404:
            slash = next((p for p in paths if p.split(" ")[1] == request.url.path.rstrip("/")), None)
            hint = f" (without the trailing slash: {slash})" if slash and request.url.path != "/" else ""
            message = f"no endpoint {request.url.path}{hint}; this server has {', '.join(paths)}"
        elif e.status_code == 405:
            allowed = [p for p in paths if p.split(" ")[1] == request.url.path]
            message = f"{where} is not allowed; use {' or '.join(allowed) or ', '.join(paths)}"
        else:
            message = f"{where}: {e.detail}"
        return JSONResponse({"error": message}, status_code=e.status_code, headers=e.headers)

    @app.exception_handler(Exception)
    async def fault(request: Request, e: Exception) -> JSONResponse:
        return JSONResponse({"error": refusal(e)}, status_code=500)


__all__ = ["create_app", "sse", "stream_generation"]
