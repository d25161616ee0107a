"""The micro-batcher alone, with a runner that records its calls (no model, no server): jobs queued together
run as one call per key, a job without a key runs alone, a batch holds at most max_batch sentences, a lone job
waits for company then runs, and a failing batch is retried job by job so only the bad one fails.

Nothing here depends on timing: `submit` queues a job at once; a `Recorder` holds the worker inside its first
call until the test has queued the rest; a `Timer` stands for the wait for company and ends when the test
says so."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tformer.serve.batching import Job, MicroBatcher


class Recorder:
    """A runner: answers each work with work * 10 and records the works of every call. `entered` is set when
    a call starts; `gate` holds every call until released, so that jobs pile up behind the first."""

    def __init__(self) -> None:
        self.calls: list[list] = []
        self.entered = threading.Event()
        self.gate = threading.Event()

    def __call__(self, works: list) -> list:
        self.entered.set()
        self.gate.wait(timeout=30)
        self.calls.append(list(works))
        if "bad" in works:
            raise ValueError(f"work 'bad' refused (batch of {len(works)})")
        return [w * 10 for w in works]

    async def held(self) -> None:
        """Until the worker is inside a call (held at the gate)."""
        assert await asyncio.to_thread(self.entered.wait, 30)


class Timer:
    """The batcher's `sleep`: `started` is set when a batch begins to wait for company; the wait ends when
    the test sets `elapsed`, never by itself."""

    def __init__(self) -> None:
        self.started, self.elapsed = asyncio.Event(), asyncio.Event()
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.started.set()
        await self.elapsed.wait()


def run(coroutine_fn: object) -> object:
    return asyncio.run(coroutine_fn())


async def soon(awaitable: object) -> object:
    """What `awaitable` gives; a failure instead of a hang if the batcher never gets there."""
    return await asyncio.wait_for(awaitable, timeout=30)


def test_jobs_queued_together_run_as_one_call_per_key() -> None:
    recorder = Recorder()

    async def main() -> list:
        batcher = MicroBatcher(recorder, max_batch=8, wait_s=0.0)
        batcher.start()
        first = batcher.submit(Job("a", 1, 0))
        await recorder.held()  # the first runs alone, held at the gate
        rest = [batcher.submit(Job(key, 1, i)) for i, key in enumerate("aabab", 1)]  # queued behind it
        recorder.gate.set()
        answers = await asyncio.gather(first, *rest)
        stats = batcher.stats()
        await batcher.stop()
        return [answers, stats]

    answers, stats = run(main)
    assert answers == [0, 10, 20, 30, 40, 50]
    assert recorder.calls == [[0], [1, 2, 4], [3, 5]]  # one batch of five: key a, then key b
    assert stats["batches"] == 3 and stats["requests"] == 6 and stats["largest"] == 3
    assert stats["sizes"] == {"1": 1, "2": 1, "3": 1}


def test_jobs_without_a_key_run_alone() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = MicroBatcher(recorder, max_batch=8, wait_s=0.0)
        batcher.start()
        first = batcher.submit(Job("a", 1, 0))
        await recorder.held()
        rest = [batcher.submit(Job(key, 1, i)) for i, key in enumerate(["a", None, "a", None], 1)]
        recorder.gate.set()
        assert await asyncio.gather(first, *rest) == [0, 10, 20, 30, 40]
        await batcher.stop()

    run(main)
    assert recorder.calls == [[0], [1, 3], [2], [4]]


def test_a_batch_holds_at_most_max_batch_sentences() -> None:
    recorder = Recorder()

    async def main() -> int:
        batcher = MicroBatcher(recorder, max_batch=4, wait_s=0.0)
        batcher.start()
        first = batcher.submit(Job("k", 1, 0))
        await recorder.held()
        sizes = [3, 2, 1, 2]  # sentences per job
        rest = [batcher.submit(Job("k", n, i)) for i, n in enumerate(sizes, 1)]
        recorder.gate.set()
        await asyncio.gather(first, *rest)
        await batcher.stop()
        return batcher.sentences

    sentences = run(main)
    assert recorder.calls == [[0], [1], [2, 3], [4]]  # 3 | 2 + 1 | 2 (<= 4 each)
    assert sentences == 1 + 3 + 2 + 1 + 2


def test_a_lone_job_waits_for_company_then_runs() -> None:
    recorder, timer = Recorder(), Timer()
    recorder.gate.set()

    async def main() -> list:
        batcher = MicroBatcher(recorder, max_batch=4, wait_s=0.3, sleep=timer)
        batcher.start()
        first = batcher.submit(Job("k", 1, 1))
        await soon(timer.started.wait())  # the worker took the first job and waits for company
        second = batcher.submit(Job("k", 1, 2))  # joins its batch
        for _ in range(10):  # the worker takes it; the batch is not full and its wait has not ended
            await asyncio.sleep(0)
        assert not first.done() and recorder.calls == []
        timer.elapsed.set()
        answers = await soon(asyncio.gather(first, second))
        timer.started.clear()
        timer.elapsed.clear()
        third = batcher.submit(Job("k", 1, 3))  # alone: runs when its wait ends
        await soon(timer.started.wait())
        timer.elapsed.set()
        answers.append(await soon(third))
        await batcher.stop()
        return answers

    assert run(main) == [10, 20, 30]
    assert recorder.calls == [[1, 2], [3]]
    assert timer.waits == [0.3, 0.3]


def test_a_full_batch_runs_without_waiting() -> None:
    recorder, timer = Recorder(), Timer()
    recorder.gate.set()

    async def main() -> list:
        batcher = MicroBatcher(recorder, max_batch=2, wait_s=0.3, sleep=timer)
        batcher.start()
        first = batcher.submit(Job("k", 1, 1))
        await soon(timer.started.wait())
        answers = await soon(asyncio.gather(first, batcher.submit(Job("k", 1, 2))))  # the wait never ends
        await batcher.stop()
        return answers

    assert run(main) == [10, 20]
    assert recorder.calls == [[1, 2]]


def test_a_failing_batch_is_retried_one_by_one() -> None:
    recorder = Recorder()

    async def main() -> list:
        batcher = MicroBatcher(recorder, max_batch=8, wait_s=0.0)
        batcher.start()
        first = batcher.submit(Job("k", 1, 0))
        await recorder.held()
        rest = [batcher.submit(Job("k", 1, w)) for w in (1, "bad", 3)]
        recorder.gate.set()
        answers = await asyncio.gather(first, *rest, return_exceptions=True)
        await batcher.stop()
        return answers

    answers = run(main)
    assert answers[:2] == [0, 10] and answers[3] == 30
    assert isinstance(answers[2], ValueError) and "batch of 1" in str(answers[2])
    assert recorder.calls == [[0], [1, "bad", 3], [1], ["bad"], [3]]


def test_max_batch_one_runs_one_at_a_time() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = MicroBatcher(recorder, max_batch=1, wait_s=0.0)
        batcher.start()
        jobs = [batcher.submit(Job("k", 1, i)) for i in range(4)]  # all queued before the worker starts
        recorder.gate.set()
        assert await asyncio.gather(*jobs) == [0, 10, 20, 30]
        await batcher.stop()

    run(main)
    assert recorder.calls == [[0], [1], [2], [3]]


@pytest.mark.parametrize("max_batch", [2, 16])
def test_every_job_gets_its_own_answer(max_batch: int) -> None:
    recorder = Recorder()
    recorder.gate.set()

    async def main() -> list:
        batcher = MicroBatcher(recorder, max_batch=max_batch, wait_s=0.001)
        batcher.start()
        answers = await asyncio.gather(*(batcher.submit(Job(i % 3, 1, i)) for i in range(50)))
        await batcher.stop()
        return answers

    assert run(main) == [i * 10 for i in range(50)]
