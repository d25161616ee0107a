"""Continuous batching: requests join the running batch at token boundaries and leave it as soon as they end.

    request -> queue -> worker, step after step while anything is live or waiting:
        admit waiting requests (first come, first admitted) while fewer than max_live are live and the step's
        tokens stay within max_step_tokens: each prompt is prefilled and gets its first token
        one decode step for every live request (one token each)
        hand the event loop the text the step streamed, then every request that ended its answer (or its
        error); its row is free for the next step

Compared with micro-batching (`batching.py`), a request arriving while others decode waits one step, not a
whole batch, and a batch is never held up by its longest member. What a step does is the endpoint's
(`Stepped`: /generate's is `endpoints.generate.Stepper`, over `decoding.continuous.Running`); the scheduler
knows only works, their cost in tokens and the keys it gives them.

A step's tokens are the prompts admitted in it plus one per live request (those just admitted included). The
first waiting request is admitted whenever a row is free, however long its prompt (so that a long one cannot
starve); the others of the same step only while the total stays within max_step_tokens, so a burst of long
prompts is spread over several steps rather than stalling every live stream for one long prefill.

Every step runs in the model's thread, the one the micro-batcher uses too (the app hands both the same), so
nothing runs the model concurrently and the event loop keeps answering meanwhile. An error of one request (its
checks, its draw, its stream) ends that request alone; a fault of a whole step ends every request then live,
and the scheduler goes on with an empty batch. A request whose client went away leaves at the next step.

The text a decode step streams is handed to the event loop after the step, all at once (`Stepped.streamed`),
rather than piece by piece while it runs: each piece handed over wakes the loop, which then takes Python's
interpreter lock from the model's thread between two of its operators. Holding them made 5% more tokens/s
at 32 streaming clients (docs/serve.md, "Continuous batching of generations"). A newly admitted request's
first piece is not held, so its first token comes as soon as its prompt is prefilled.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from tformer.serve.batching import Job, Worker


class Stepped(Protocol):
    """A batch an endpoint decodes a token at a time: `admit` a work under a key, `step` every live one,
    `streamed` gives what the step held back for the event loop to hand on (calls to make there, in order),
    `finished` gives (key, answer or exception) of those that ended; `drop` ends one now (nothing reported);
    `reset` empties it after a fault."""

    @property
    def live(self) -> int: ...

    def cost(self, work: Any) -> int: ...

    def admit(self, key: Hashable, work: Any) -> None: ...

    def step(self) -> None: ...

    def streamed(self) -> list[Callable[[], None]]: ...

    def finished(self) -> list[tuple[Hashable, Any]]: ...

    def drop(self, key: Hashable) -> None: ...

    def reset(self) -> None: ...


class Scheduler(Worker):
    """Runs `batch` step by step in `thread` while requests are live: at most `max_live` at once, at most
    `max_step_tokens` tokens a step (the first admission of a step excepted). `submit` from the event loop;
    `start` and `stop` around the server's life (the thread is its owner's to shut down); a future gets its
    answer when its request has ended."""

    def __init__(self, batch: Stepped, *, max_live: int, max_step_tokens: int, thread: ThreadPoolExecutor) -> None:
        super().__init__()
        self.batch, self.max_live, self.max_step_tokens, self.thread = batch, max_live, max_step_tokens, thread
        self.steps = self.requests = self.live_total = self.largest = self.most_tokens = 0
        self._waiting: deque[tuple[Job, asyncio.Future]] = deque()
        self._running: dict[int, asyncio.Future] = {}
        self._keys = itertools.count()

    def stats(self) -> dict[str, Any]:
        """Steps run, requests admitted, the most live in one step and the mean, the most tokens one step fed."""
        return {"steps": self.steps, "requests": self.requests, "largest": self.largest,
                "mean": self.live_total / self.steps if self.steps else 0.0, "most_step_tokens": self.most_tokens}

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._running and not self._waiting:
                self._waiting.append(await self._queue.get())
            while not self._queue.empty():
                self._waiting.append(self._queue.get_nowait())
            dropped = [key for key, future in self._running.items() if future.done()]  # clients that left
            for key in dropped:
                del self._running[key]
            admitted = self._admit()
            if not admitted and not self._running and not dropped:
                continue  # only requests whose clients left were waiting
            try:
                streamed, done = await loop.run_in_executor(self.thread, self._step, admitted, dropped)
            except Exception as e:  # noqa: BLE001 - a fault of the whole step: every live request ends with it
                streamed, done = [], [(key, e) for key in self._running]
                await loop.run_in_executor(self.thread, self.batch.reset)
            for call in streamed:  # before the answers: a stream ends after its pieces
                call()
            for key, answer in done:
                future = self._running.pop(key, None)
                if future is None or future.done():
                    continue
                if isinstance(answer, BaseException):
                    future.set_exception(answer)
                else:
                    future.set_result(answer)

    def _admit(self) -> list[tuple[int, Any]]:
        """The waiting requests this step admits, each under a new key (now running)."""
        admitted: list[tuple[int, Any]] = []
        tokens = len(self._running)  # one each for the live ones
        while self._waiting and len(self._running) < self.max_live:
            job, future = self._waiting[0]
            if future.done():  # its client went away while it waited
                self._waiting.popleft()
                continue
            cost = self.batch.cost(job.work) + 1  # its prompt, then its first decode step
            if admitted and tokens + cost > self.max_step_tokens:
                break
            self._waiting.popleft()
            key = next(self._keys)
            self._running[key] = future
            admitted.append((key, job.work))
            tokens += cost
        return admitted

    def _step(self, admitted: list[tuple[int, Any]],
              dropped: list[int]) -> tuple[list[Callable[[], None]], list[tuple[Hashable, Any]]]:
        """In the model's thread: drop, admit, one step; what it streamed, and what ended."""
        for key in dropped:
            self.batch.drop(key)
        for key, work in admitted:
            self.batch.admit(key, work)
        live = self.batch.live
        tokens = sum(self.batch.cost(work) for _, work in admitted) + live
        self.batch.step()
        self.steps += 1
        self.requests += len(admitted)
        self.live_total += live
        self.largest = max(self.largest, live)
        self.most_tokens = max(self.most_tokens, tokens)
        return self.batch.streamed(), self.batch.finished()


__all__ = ["Scheduler", "Stepped"]
