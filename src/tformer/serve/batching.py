"""Micro-batching: requests that arrive together are decoded together.

    request -> queue -> worker: take the first job, then more until the batch holds max_batch sentences or
                       batch_wait_ms have passed since the first; group the jobs by key; run each group as
                       one call in the model's thread; hand every job its answer

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
from collections import Counter
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tformer.serve.service import Job

Runner = Callable[[Hashable, list[Any]], list[Any]]  # (key, payloads) -> one answer per payload, in order


class MicroBatcher:
    """Collects jobs into batches of at most `max_batch` sentences and runs them with `run(key, payloads)`
    in one worker thread. `submit` from the event loop; `start` and `stop` around the server's life."""

    def __init__(self, run: Runner, *, max_batch: int, wait_s: float) -> None:
        self.run, self.max_batch, self.wait_s = run, max_batch, wait_s
        self.sizes: Counter[int] = Counter()  # requests in a batch -> how many batches had that many
        self.sentences = 0  # sentences decoded
        self._queue: asyncio.Queue[tuple[Job, asyncio.Future]] | None = None
        self._held: tuple[Job, asyncio.Future] | None = None  # a job that did not fit the last batch
        self._task: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tformer-model")

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._work())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._thread.shutdown(wait=True)

    async def submit(self, job: Job) -> Any:
        """The answer to `job`, once a batch holding it has run; the job's error if it failed alone."""
        future = asyncio.get_running_loop().create_future()
        await self._queue.put((job, future))
        return await future

    def stats(self) -> dict[str, Any]:
        batches = sum(self.sizes.values())
        requests = sum(n * count for n, count in self.sizes.items())
        return {"batches": batches, "requests": requests, "sentences": self.sentences,
                "largest": max(self.sizes, default=0), "mean": requests / batches if batches else 0.0,
                "sizes": {str(n): self.sizes[n] for n in sorted(self.sizes)}}

    async def _work(self) -> None:
        while True:
            batch = await self._collect()
            groups: dict[Hashable, list[tuple[Job, asyncio.Future]]] = {}
            for job, future in batch:
                groups.setdefault(job.key, []).append((job, future))
            for key, group in groups.items():
                await self._run(key, group)

    async def _collect(self) -> list[tuple[Job, asyncio.Future]]:
        """The next batch: the first job (waiting for one), then every job already queued and those that
        come within wait_s of the first, until the next would take it over max_batch sentences."""
        loop = asyncio.get_running_loop()
        first = self._held or await self._queue.get()
        self._held = None
        batch, size = [first], first[0].size
        deadline = loop.time() + self.wait_s
        while size < self.max_batch:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:  # a get cut short leaves its item in the queue (asyncio.timeout is 3.11+)
                    item = await asyncio.wait_for(self._queue.get(), left)
                except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
                    break
            if size + item[0].size > self.max_batch:
                self._held = item
                break
            batch.append(item)
            size += item[0].size
        return batch

    async def _run(self, key: Hashable, group: list[tuple[Job, asyncio.Future]]) -> None:
        loop = asyncio.get_running_loop()
        live = [(job, f) for job, f in group if not f.done()]  # a client that went away cancels its future
        if not live:
            return
        try:
            answers = await loop.run_in_executor(self._thread, self.run, key, [job.payload for job, _ in live])
        except Exception as e:  # noqa: BLE001 - handed to the requests, or retried one by one
            if len(live) > 1:
                for item in live:
                    await self._run(key, [item])
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


__all__ = ["MicroBatcher", "Runner"]
