"""Micro-batching: requests that arrive together are decoded together.

    request -> queue -> worker: take the first job, then more until the batch holds max_batch sentences or
                       batch_wait_ms have passed since the first; group the jobs by key; run each group as
                       one call in the model's thread; hand every job its answer

A `Job` is all the batcher knows of a request: its key (jobs with equal keys may run as one call; None: it
runs alone), its size (sentences it adds to a batch) and its work (what the runner is given). What the work
is, and which settings its key stands for, is the caller's business (`serve.endpoints`: one dataclass per endpoint).

One worker and one thread do all the model's work, one batch at a time, so the event loop keeps answering
(/health, new requests joining the queue) while a batch decodes, and nothing runs the model concurrently
(recording attention, or eval mode, would leak between batches). While a batch decodes, new requests queue
up, and the next batch takes all of them at once (up to max_batch) without waiting: under load the batches
fill by themselves, and a lone request waits at most batch_wait_ms.

A group that fails is retried one job at a time, so one request the library refuses (a ValueError, answered
as a 4xx) cannot take the others of its batch down with it.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

Runner = Callable[[list[Any]], list[Any]]  # the works of jobs of one key -> one answer per work, in order
Sleep = Callable[[float], Awaitable[None]]  # how a batch waits for company: asyncio.sleep, or a test's own


@dataclass(frozen=True)
class Job:
    """One request as the batcher queues it."""

    key: Hashable | None  # jobs with equal keys may run as one call; None: it runs alone
    size: int  # sentences it adds to a batch
    work: Any  # what the runner is given


class Worker(ABC):
    """What both batchers share (this one and the continuous scheduler, `scheduler.py`): a queue of jobs the
    event loop fills with `submit`, each with the future its answer goes to, and one task, `_work`, that
    drains it from `start` until `stop`."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[Job, asyncio.Future]] | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._work())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def submit(self, job: Job) -> asyncio.Future:
        """Queues `job` now; the future (await it in the event loop) gets its answer, or its error."""
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((job, future))
        return future

    @abstractmethod
    async def _work(self) -> None:
        """Drain the queue until cancelled."""


def model_thread() -> ThreadPoolExecutor:
    """The one thread that runs the model: best made before the checkpoint is loaded, and the loading run in it
    (`thread.submit(load_service, ...)`), so that no other thread of the process ever runs torch's parallel
    operators. Each thread that does gets its own team of OpenMP threads; once the process holds more of them
    than it has cores, OpenMP stops spinning between operators and every operator waits for its threads to be
    woken: a batch-1 step of the bench's GPT took 15 ms instead of 8 with the model loaded in the main thread
    and run in this one (docs/serve.md, "One thread for the model")."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="tformer-model")


class MicroBatcher(Worker):
    """Collects jobs into batches of at most `max_batch` sentences and runs them with `run(works)` in one
    worker thread. `submit` from the event loop; `start` and `stop` around the server's life. A batch's
    first job waits for others with `sleep(wait_s)`: asyncio.sleep, unless a test passes one it ends itself.
    `thread`: the model's thread, shared with the continuous scheduler (`scheduler.py`) and shut down by its
    owner; None: one of its own, shut down by `stop`."""

    def __init__(self, run: Runner, *, max_batch: int, wait_s: float, sleep: Sleep = asyncio.sleep,
                 thread: ThreadPoolExecutor | None = None) -> None:
        super().__init__()
        self.run, self.max_batch, self.wait_s, self.sleep = run, max_batch, wait_s, sleep
        self.sizes: Counter[int] = Counter()  # requests in a batch -> how many batches had that many
        self.sentences = 0  # sentences decoded
        self._held: tuple[Job, asyncio.Future] | None = None  # a job that did not fit the last batch
        self._own = thread is None
        self._thread = thread or model_thread()

    async def stop(self) -> None:
        await super().stop()
        if self._own:
            self._thread.shutdown(wait=True)

    def stats(self) -> dict[str, Any]:
        batches = sum(self.sizes.values())
        requests = sum(n * count for n, count in self.sizes.items())
        return {"batches": batches, "requests": requests, "sentences": self.sentences,
                "largest": max(self.sizes, default=0), "mean": requests / batches if batches else 0.0,
                "sizes": {str(n): self.sizes[n] for n in sorted(self.sizes)}}

    async def _work(self) -> None:
        while True:
            for group in groups(await self._collect()):
                await self._run(group)

    async def _collect(self) -> list[tuple[Job, asyncio.Future]]:
        """The next batch: the first job (waiting for one), then every job already queued and those that
        come while `sleep(wait_s)` runs, from the first on, until the next would take it over max_batch
        sentences."""
        first = self._held or await self._queue.get()
        self._held = None
        batch, size = [first], first[0].size
        waiting: asyncio.Future | None = None  # the wait for company, started once the queue is empty
        try:
            while size < self.max_batch:
                if self._queue.empty():
                    if waiting is None:
                        waiting = asyncio.ensure_future(self.sleep(self.wait_s))
                    item = await self._next(waiting)
                    if item is None:
                        break
                else:
                    item = self._queue.get_nowait()
                if size + item[0].size > self.max_batch:
                    self._held = item
                    break
                batch.append(item)
                size += item[0].size
        finally:
            if waiting is not None:
                waiting.cancel()
        return batch

    async def _next(self, waiting: asyncio.Future) -> tuple[Job, asyncio.Future] | None:
        """The next job queued before `waiting` ends; None if it ends first."""
        getter = asyncio.ensure_future(self._queue.get())
        try:
            await asyncio.wait({getter, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getter.done():
                getter.cancel()  # a get cut short leaves its item in the queue
        return getter.result() if getter.done() else None

    async def _run(self, group: list[tuple[Job, asyncio.Future]]) -> None:
        loop = asyncio.get_running_loop()
        live = [(job, f) for job, f in group if not f.done()]  # a client that went away cancels its future
        if not live:
            return
        try:
            answers = await loop.run_in_executor(self._thread, self.run, [job.work for job, _ in live])
        except Exception as e:  # noqa: BLE001 - handed to the requests, or retried one by one
            if len(live) > 1:
                for item in live:
                    await self._run([item])
                return
            answers = [e]
        self.sizes[len(live)] += 1
        self.sentences += sum(job.size for job, _ in live)
        for (_, future), answer in zip(live, answers, strict=True):
            if future.done():
                continue
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(answer)


def groups(batch: list[tuple[Job, Any]]) -> list[list[tuple[Job, Any]]]:
    """The batch's jobs grouped by key, each group in the order its first job came; a job of key None alone."""
    out: list[list[tuple[Job, Any]]] = []
    by_key: dict[Hashable, list[tuple[Job, Any]]] = {}
    for item in batch:
        key = item[0].key
        if key is None or key not in by_key:
            out.append([item])
            if key is not None:
                by_key[key] = out[-1]
        else:
            by_key[key].append(item)
    return out


__all__ = ["Job", "MicroBatcher", "Runner", "Sleep", "Worker", "groups", "model_thread"]
