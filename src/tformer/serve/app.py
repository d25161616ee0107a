"""The HTTP API: a FastAPI app over one loaded checkpoint (`service.Service`).

    GET  /            the web page (`page`)
    GET  /health      {"status": "ok"}
    GET  /info        the model's kind and sizes, its endpoints, the limits, and the batches so far
    POST /NAME        each endpoint of `serve.endpoints`, its module saying what it takes and answers:
                      /translate (encoder-decoder), /generate (GPT; streamed as server-sent events on
                      request), /score (GPT), /classify (BERT classifier), /attention (exact attention);
                      one the checkpoint's kind does not have answers 404, naming those it does

An answer about text the model's tokenizer cannot all represent (unknown tokens) holds "warnings", a list of
one-line messages (`inference.unknown_warning`, what the command line prints on stderr); it is absent
otherwise. Every answer that is not a success is JSON {"error": "one line"}: 422 for a bad value (naming it and what
is allowed), 404 for an endpoint this model does not serve (naming those it does), 405 for a wrong method,
413 for a body over the limit; 500 only for a fault of the server, never for what a client sent. HEAD of
the GET paths is GET without the body; a path with a trailing slash is no endpoint (404), never a redirect.
Decoding requests go through the micro-batcher (`batching`), generations through the continuous scheduler
(`scheduler`, unless --generate-batching micro); the app starts and stops them with its life, and both run the
model in its one thread (`batching.model_thread`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from tformer.errors import UserError
from tformer.serve import page
from tformer.serve.batching import MicroBatcher, Sleep, model_thread
from tformer.serve.endpoints import ENDPOINTS, run_batch
from tformer.serve.errors import error_message, refusal, status_of
from tformer.serve.requests import read_body
from tformer.serve.scheduler import Scheduler
from tformer.serve.service import Endpoint, Service, Submit


def create_app(service: Service, *, thread: ThreadPoolExecutor | None = None,
               sleep: Sleep = asyncio.sleep) -> FastAPI:
    """The app serving `service` in `thread` (`batching.model_thread`, the one `service` was loaded in; None: a new
    one); its micro-batcher and its schedulers run while the app does (ASGI lifespan), the thread is shut
    down with it, and the batches wait for company with `sleep` (tests pass one they end themselves). Each
    endpoint of `ENDPOINTS` gets its POST route."""
    limits = service.limits
    thread = thread or model_thread()  # all the model's work
    batcher = MicroBatcher(partial(run_batch, service.loaded), max_batch=limits.max_batch,
                           wait_s=limits.batch_wait_ms / 1000, sleep=sleep, thread=thread)
    schedulers = schedulers_of(service, thread)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        for scheduler in schedulers.values():
            scheduler.start()
        yield
        for scheduler in schedulers.values():
            await scheduler.stop()
        await batcher.stop()
        thread.shutdown(wait=True)

    app = FastAPI(title="tformer", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None,
                  redirect_slashes=False)  # /translate/ is no endpoint (a 404 naming them), never a redirect
    app.state.service, app.state.batcher = service, batcher
    add_error_handlers(app, service)
    page.add_routes(app)

    @app.api_route("/health", methods=["GET", "HEAD"])  # HEAD: GET's answer without its body
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.api_route("/info", methods=["GET", "HEAD"])
    async def info() -> dict[str, Any]:
        return {**service.info(), "batches": batcher.stats(),
                "continuous": {name: scheduler.stats() for name, scheduler in schedulers.items()}}

    for endpoint in ENDPOINTS:  # every endpoint has its route; one this model does not serve answers 404
        submit = schedulers[endpoint.name].submit if endpoint.name in schedulers else batcher.submit
        app.post(f"/{endpoint.name}")(route(service, endpoint, submit))
    return app


def schedulers_of(service: Service, thread: ThreadPoolExecutor) -> dict[str, Scheduler]:
    """A continuous scheduler for each endpoint served that decodes a token at a time (`Endpoint.steps`) and
    can for this model, unless --generate-batching micro or a draft model (speculative decoding decodes a
    generation alone): endpoint name -> scheduler."""
    limits, out = service.limits, {}
    if limits.generate_batching != "continuous" or service.loaded.draft is not None:
        return out
    for endpoint in service.served:
        batch = endpoint.steps(service.loaded, limits) if endpoint.steps is not None else None
        if batch is not None:
            out[endpoint.name] = Scheduler(batch, max_live=limits.max_batch, max_step_tokens=limits.max_step_tokens,
                                           thread=thread)
    return out


def route(service: Service, endpoint: Endpoint, submit: Submit) -> Callable[[Request], Awaitable[Any]]:
    """The handler of POST /endpoint: the wrong endpoint for this model is named before its body is read; the
    body is read strictly into the endpoint's model, and its module answers it (`Endpoint.respond`). A
    UserError from the checks or from the batch goes to the one handler (`add_error_handlers`)."""

    async def handle(request: Request) -> Any:
        service.need(endpoint.name)
        body = await read_body(request, endpoint.body, limit=service.limits.max_body_bytes)
        return await endpoint.respond(service, body, submit)

    return handle


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


__all__ = ["create_app", "route", "schedulers_of"]
