"""The continuous scheduler (`serve.scheduler`): with a fake batch that records every step, the caps on live
requests and on a step's tokens hold, a request that ends frees its row for the next while the others go
on, an error ends its own request only, a fault of a step ends the live ones and the next request is served,
and a request whose client left leaves. With /generate's real batch over a tiny GPT, requests admitted at
different token boundaries each get what `inference.continue_prompt` gives them alone (greedy, seeded
sampling), and their streams add up to their answers; a decode step hands its pieces on when it has ended, an
admitted prompt its first piece at once.

Nothing here depends on timing: a `Gate` holds the model's thread inside every step until the test lets
that one step run, so the test submits requests between chosen steps."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tformer.decoding import SampleConfig
from tformer.inference import continue_prompt, load
from tformer.serve import Limits
from tformer.serve.batching import Job
from tformer.serve.endpoints import generate, load_service
from tformer.serve.scheduler import Scheduler


class Gate:
    """Holds every step until `next()` lets one run; `held()` returns once the model's thread is inside a
    step, `next()` once the step it let run is over."""

    def __init__(self) -> None:
        self.go, self.stepped, self.entered = (threading.Semaphore(0) for _ in range(3))
        self.opened = threading.Event()

    def wait(self) -> None:
        self.entered.release()
        assert self.opened.is_set() or self.go.acquire(timeout=30)

    def done(self) -> None:
        self.stepped.release()

    async def held(self) -> None:
        assert await asyncio.to_thread(self.entered.acquire, True, 30)

    async def next(self) -> None:
        self.go.release()
        assert await asyncio.to_thread(self.stepped.acquire, True, 30)

    def open(self) -> None:
        """Every step from now on runs without waiting."""
        self.opened.set()
        self.go.release()


class Fake:
    """A batch whose works are (name, prompt tokens, steps to live): a work ends after its steps, answering
    its name; "bad" fails at admission, "boom" fails its own row at its first step. Records each step's live
    names and tokens (one per live row + the prompts admitted in it)."""

    def __init__(self, gate: Gate | None = None) -> None:
        self.gate, self.rows, self.done, self.log, self.tokens, self.resets = gate, {}, [], [], 0, 0

    @property
    def live(self) -> int:
        return len(self.rows)

    def cost(self, work: Any) -> int:
        return work[1]

    def admit(self, key: Any, work: Any) -> None:
        self.tokens += work[1]
        if work[0] == "bad":
            self.done.append((key, ValueError("bad work")))
        else:
            self.rows[key] = [work[0], work[2]]

    def step(self) -> None:
        if self.gate:
            self.gate.wait()
        self.log.append((sorted(name for name, _ in self.rows.values()), self.tokens + len(self.rows)))
        self.tokens = 0
        for key, row in list(self.rows.items()):
            row[1] -= 1
            if row[0] == "boom":
                self.done.append((key, RuntimeError("boom")))
                del self.rows[key]
            elif row[1] == 0:
                self.done.append((key, row[0]))
                del self.rows[key]
        if self.gate:
            self.gate.done()

    def streamed(self) -> list:
        return []

    def finished(self) -> list:
        done, self.done = self.done, []
        return done

    def drop(self, key: Any) -> None:
        del self.rows[key]

    def reset(self) -> None:
        self.rows, self.resets = {}, self.resets + 1


def scheduled(batch: Any, **caps: int) -> tuple[Scheduler, ThreadPoolExecutor]:
    thread = ThreadPoolExecutor(max_workers=1)
    return Scheduler(batch, thread=thread, **{"max_live": 2, "max_step_tokens": 100, **caps}), thread


def job(work: Any) -> Job:
    return Job(key=None, size=1, work=work)


async def soon(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, timeout=30)


def test_caps_hold_and_an_ended_request_frees_its_row_while_the_others_go_on() -> None:
    fake = Fake()

    async def main() -> list:
        scheduler, thread = scheduled(fake, max_live=2, max_step_tokens=10)
        scheduler.start()
        works = [("a", 3, 4), ("b", 3, 1), ("c", 6, 2), ("d", 4, 1), ("e", 20, 1)]
        answers = await soon(asyncio.gather(*(scheduler.submit(job(w)) for w in works)))  # queued at once
        stats = scheduler.stats()
        await scheduler.stop()
        thread.shutdown()
        return [answers, stats]

    answers, stats = asyncio.run(main())
    assert answers == ["a", "b", "c", "d", "e"]
    assert fake.log == [
        (["a", "b"], 8),  # a + b: 3 + 3 + 2 live; c (6 more) would pass 10, and 2 are live anyway
        (["a", "c"], 8),  # b ended, c took its row at once while a went on: 6 + 2
        (["a", "c"], 2),
        (["a", "d"], 6),  # c ended; d (4) + 2
        (["e"], 21),  # a and d ended; e (20) is over the cap: the first of a step is admitted however long
    ]
    assert stats == {"steps": 5, "requests": 5, "largest": 2, "mean": 9 / 5, "most_step_tokens": 21}


def test_an_error_ends_its_own_request_and_a_fault_of_a_step_ends_the_live_ones_only() -> None:
    fake = Fake()

    async def main() -> list:
        scheduler, thread = scheduled(fake, max_live=3)
        scheduler.start()
        futures = [scheduler.submit(job(w)) for w in [("ok", 1, 3), ("bad", 1, 1), ("boom", 1, 2)]]
        results = await soon(asyncio.gather(*futures, return_exceptions=True))
        real_step = fake.step
        fake.step = lambda: (_ for _ in ()).throw(MemoryError("the step failed"))
        failed = await soon(asyncio.gather(scheduler.submit(job(("x", 1, 1))), return_exceptions=True))
        fake.step = real_step
        after = await soon(scheduler.submit(job(("y", 1, 1))))
        await scheduler.stop()
        thread.shutdown()
        return [results, failed, after]

    (ok, bad, boom), (failed,), after = asyncio.run(main())
    assert ok == "ok" and str(bad) == "bad work" and str(boom) == "boom"
    assert isinstance(failed, MemoryError) and fake.resets == 1 and after == "y"


def test_a_request_whose_client_left_leaves_at_the_next_step() -> None:
    gate = Gate()
    fake = Fake(gate)

    async def main() -> None:
        scheduler, thread = scheduled(fake)
        scheduler.start()
        stays, leaves = scheduler.submit(job(("stays", 1, 3))), scheduler.submit(job(("leaves", 1, 3)))
        await gate.held()
        leaves.cancel()  # the client went away during the first step
        await gate.next()
        for _ in range(2):
            await gate.held()
            await gate.next()
        assert await soon(stays) == "stays"
        await scheduler.stop()
        thread.shutdown()

    asyncio.run(main())
    assert [names for names, _ in fake.log] == [["leaves", "stays"], ["stays"], ["stays"]]


class Held:
    """/generate's real batch, each step held by a gate."""

    def __init__(self, batch: generate.Stepper, gate: Gate) -> None:
        self.batch, self.gate = batch, gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.batch, name)

    @property
    def live(self) -> int:
        return self.batch.live

    def step(self) -> None:
        self.gate.wait()
        self.batch.step()
        self.gate.done()


# (before step, prompt, max_new_tokens, settings): none stops before its max_new_tokens, so that something is
# live at every step until the last arrival
ARRIVALS = [(0, "the cat", 9, {"temperature": 0.0}), (0, "a", 4, {"temperature": 0.9, "top_k": 5, "seed": 3}),
            (2, "the big red house sees", 7, {"temperature": 0.0}), (3, "dog", 12, {"temperature": 1.1, "seed": 8}),
            (5, "a small blue cat runs and sleeps", 5, {"temperature": 0.0}),
            (6, "", 6, {"temperature": 0.7, "top_p": 0.9, "seed": 1})]
ARRIVALS = [(at, p, n, {**s, "stop": False}) for at, p, n, s in ARRIVALS]


@pytest.mark.parametrize("rows", [2, 4])
def test_staggered_generations_each_equal_the_library_alone(checkpoints: dict[str, Path], rows: int) -> None:
    service = load_service(checkpoints["gpt"], limits=Limits(max_batch=rows, max_new_tokens=20), device="cpu")
    loaded = load(checkpoints["gpt"])
    alone = [continue_prompt(loaded.model, loaded.tokenizer, p, SampleConfig(**s), max_new_tokens=n)
             for _, p, n, s in ARRIVALS]
    assert len(set(alone)) == len(alone)
    gate = Gate()

    async def main() -> list:
        scheduler, thread = scheduled(Held(generate.Stepper(service.loaded, rows=rows), gate), max_live=rows)
        scheduler.start()
        pieces, futures = [[] for _ in ARRIVALS], []

        def arrive(step: int) -> None:
            for i, (at, prompt, n, settings) in enumerate(ARRIVALS):
                if at == step:
                    futures.append(scheduler.submit(generate.prepare(service, prompt=prompt, max_new_tokens=n,
                                                                     emit=pieces[i].append, **settings)))

        arrive(0)
        for step in range(ARRIVALS[-1][0]):
            await gate.held()  # inside step `step`
            arrive(step + 1)  # queued now: admitted right after this step
            await gate.next()
        gate.open()
        answers = await soon(asyncio.gather(*futures))
        stats = scheduler.stats()
        await scheduler.stop()
        thread.shutdown()
        return [answers, pieces, stats]

    answers, pieces, stats = asyncio.run(main())
    assert [a["text"] for a in answers] == alone == ["".join(p) for p in pieces]
    assert stats["largest"] == rows and stats["requests"] == len(ARRIVALS)


def test_a_decode_steps_pieces_wait_for_its_end_and_a_first_piece_does_not(checkpoints: dict[str, Path]) -> None:
    service = load_service(checkpoints["gpt"], limits=Limits(max_batch=2, max_new_tokens=8), device="cpu")
    batch, pieces = generate.Stepper(service.loaded, rows=2), []
    settings = {"temperature": 0.0, "stop": False}
    work = generate.prepare(service, prompt="the cat", max_new_tokens=8, emit=pieces.append, **settings).work
    batch.admit("a", work)
    assert len(pieces) == 1  # the prompt's first token, handed on at once
    held = 0
    while batch.live:
        batch.step()
        assert len(pieces) == 1 + held  # nothing handed on by the step itself
        calls = batch.streamed()
        for call in calls:
            call()
        held += len(calls)
        assert len(pieces) == 1 + held and batch.streamed() == []
    ((key, answer),) = batch.finished()
    assert key == "a" and held == 7 and "".join(pieces) == answer["text"]
    alone = continue_prompt(service.loaded.model, service.loaded.tokenizer, "the cat", SampleConfig(**settings),
                            max_new_tokens=8)
    assert answer["text"] == alone


def test_limits_take_only_the_known_ways_of_batching_generations() -> None:
    from tformer.errors import UserError

    assert Limits().generate_batching == "continuous"
    with pytest.raises(UserError, match="--generate-batching='eager' is not allowed; choose continuous or micro"):
        Limits(generate_batching="eager")
    with pytest.raises(UserError, match="--max-step-tokens=0 must be a positive integer"):
        Limits(max_step_tokens=0)
