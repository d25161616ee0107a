"""The micro-batcher alone, with a runner that records its calls (no model, no server): jobs queued together
run as one call per key, a batch holds at most max_batch sentences, a lone job runs after the wait, and a
failing batch is retried job by job so only the bad one fails."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tformer.serve.batching import MicroBatcher
from tformer.serve.service import Job


class Recorder:
    """A runner: answers each payload with payload * 10 and records (key, payloads) of every call; `gate`
    holds the first call until released, so jobs can pile up behind it."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, list]] = []
        self.gate = threading.Event()

    def __call__(self, key: object, payloads: list) -> list:
        self.gate.wait(timeout=30)
        self.calls.append((key, list(payloads)))
        if "bad" in payloads and len(payloads) > 0:
            raise ValueError(f"payload 'bad' refused (batch of {len(payloads)})")
        return [p * 10 for p in payloads]


def run(coroutine_fn: object) -> object:
    return asyncio.run(coroutine_fn())


def test_jobs_queued_together_run_as_one_call_per_key() -> None:
    recorder = Recorder()

    async def main() -> list:
        batcher = MicroBatcher(recorder, max_batch=8, wait_s=0.0)
        batcher.start()
        first = asyncio.ensure_future(batcher.submit(Job(("a",), 1, 0)))  # runs alone, held at the gate
        await asyncio.sleep(0.05)
        rest = [asyncio.ensure_future(batcher.submit(Job((k,), 1, i))) for i, k in enumerate("aabab", 1)]
        await asyncio.sleep(0.05)
        recorder.gate.set()
        answers = await asyncio.gather(first, *rest)
        stats = batcher.stats()
        await batcher.stop()
        return [answers, stats]

    answers, stats = run(main)
    assert answers == [0, 10, 20, 30, 40, 50]
    assert recorder.calls == [(("a",), [0]), (("a",), [1, 2, 4]), (("b",), [3, 5])]
    assert stats["batches"] == 3 and stats["requests"] == 6 and stats["largest"] == 3
    assert stats["sizes"] == {"1": 1, "2": 1, "3": 1}


def test_a_batch_holds_at_most_max_batch_sentences() -> None:
    recorder = Recorder()

    async def main() -> list:
        batcher = MicroBatcher(recorder, max_batch=4, wait_s=0.0)
        batcher.start()
        first = asyncio.ensure_future(batcher.submit(Job(("k",), 1, 0)))
        await asyncio.sleep(0.05)
        sizes = [3, 2, 1, 2]  # sentences per job
        rest = [asyncio.ensure_future(batcher.submit(Job(("k",), n, i))) for i, n in enumerate(sizes, 1)]
        await asyncio.sleep(0.05)
        recorder.gate.set()
        await asyncio.gather(first, *rest)
        await batcher.stop()
        return batcher.sentences

    sentences = run(main)
    assert [payloads for _, payloads in recorder.calls] == [[0], [1], [2, 3], [4]]  # 3 | 2 + 1 | 2 (<= 4 each)
    assert sentences == 1 + 3 + 2 + 1 + 2


def test_a_lone_job_waits_for_company_then_runs() -> None:
    recorder = Recorder()
    recorder.gate.set()

    async def main() -> list:
        batcher = MicroBatcher(recorder, max_batch=4, wait_s=0.3)
        batcher.start()
        first = asyncio.ensure_future(batcher.submit(Job(("k",), 1, 1)))
        await asyncio.sleep(0.01)  # well within the first's wait: joins its batch
        second = asyncio.ensure_future(batcher.submit(Job(("k",), 1, 2)))
        answers = await asyncio.gather(first, second)
        await batcher.stop()
        return answers

    assert run(main) == [10, 20]
    assert recorder.calls == [(("k",), [1, 2])]


def test_a_failing_batch_is_retried_one_by_one() -> None:
    recorder = Recorder()

    async def main() -> list:
        batcher = MicroBatcher(recorder, max_batch=8, wait_s=0.0)
        batcher.start()
        first = asyncio.ensure_future(batcher.submit(Job(("k",), 1, 0)))
        await asyncio.sleep(0.05)
        rest = [asyncio.ensure_future(batcher.submit(Job(("k",), 1, p))) for p in (1, "bad", 3)]
        await asyncio.sleep(0.05)
        recorder.gate.set()
        answers = await asyncio.gather(first, *rest, return_exceptions=True)
        await batcher.stop()
        return answers

    answers = run(main)
    assert answers[:2] == [0, 10] and answers[3] == 30
    assert isinstance(answers[2], ValueError) and "batch of 1" in str(answers[2])
    assert [payloads for _, payloads in recorder.calls] == [[0], [1, "bad", 3], [1], ["bad"], [3]]


def test_max_batch_one_runs_one_at_a_time() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = MicroBatcher(recorder, max_batch=1, wait_s=0.0)
        batcher.start()
        jobs = [asyncio.ensure_future(batcher.submit(Job(("k",), 1, i))) for i in range(4)]
        await asyncio.sleep(0.05)
        recorder.gate.set()
        assert await asyncio.gather(*jobs) == [0, 10, 20, 30]
        await batcher.stop()

    run(main)
    assert [payloads for _, payloads in recorder.calls] == [[0], [1], [2], [3]]


@pytest.mark.parametrize("max_batch", [2, 16])
def test_every_job_gets_its_own_answer(max_batch: int) -> None:
    recorder = Recorder()
    recorder.gate.set()

    async def main() -> list:
        batcher = MicroBatcher(recorder, max_batch=max_batch, wait_s=0.001)
        batcher.start()
        answers = await asyncio.gather(*(batcher.submit(Job((i % 3,), 1, i)) for i in range(50)))
        await batcher.stop()
        return answers

    assert run(main) == [i * 10 for i in range(50)]
