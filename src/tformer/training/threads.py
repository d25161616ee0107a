"""How many CPU threads each training step uses (`train.threads`, `train.tune_threads`).

torch splits each operation of a step over its intra-op threads, which meet at a barrier after every
operation. On a machine shared with anything else (another training, a compiler, a browser), a thread that
loses its core holds all the others at the next barrier, and a step can run many times slower: beside busy
processes one thread can train faster than two, while alone two are the faster (`benchmarks/threads.py`;
measured in docs/results.md, "Timings behind choices in the code"). Which count wins depends on what
else runs at the moment, so `ThreadTuner` measures it during training: every `every` steps it runs `probe`
steps at each candidate count (after one warm-up step each), compares training tokens per second, and keeps
the fastest until the next probe. A tuned run is not bitwise reproducible (the reduction order of an
operation can depend on its thread count); with `tune_threads` off (the default) nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from tformer.errors import UserError


def candidates(most: int) -> list[int]:
    """`most` and the powers of two below it, most first: 6 -> [6, 4, 2, 1]."""
    counts, n = [most], 1
    while n < most:
        counts.append(n)
        n *= 2
    return sorted(set(counts), reverse=True)


class ThreadTuner:
    """Call `before_step()` before each training step and `after_step(tokens, seconds)` after it with the
    step's training tokens and its compute time; `threads` is the count in use, `best` the last winner."""

    def __init__(self, most: int, *, every: int = 300, probe: int = 8,
                 set_threads: Callable[[int], None] = torch.set_num_threads) -> None:
        if most < 1 or every < 1 or probe < 1:
            raise UserError(f"ThreadTuner needs most, every and probe >= 1 (got {most}, {every}, {probe})")
        self.candidates, self.every, self.probe, self.set_threads = candidates(most), every, probe, set_threads
        self.threads = self.best = most
        self.plan: list[tuple[int, bool]] = []  # the probe's steps still to run: (threads, measured)
        self.measured: dict[int, list[float]] = {}  # threads -> [tokens, seconds] in this probe
        self.since_probe = every  # the first probe starts at once

    def before_step(self) -> None:
        if not self.plan and self.since_probe >= self.every and len(self.candidates) > 1:
            # one warm-up step per count (its thread pool wakes up), then `probe` measured ones
            self.plan = [(n, i > 0) for n in self.candidates for i in range(self.probe + 1)]
            self.measured = {n: [0.0, 0.0] for n in self.candidates}
        wanted = self.plan[0][0] if self.plan else self.best
        if wanted != self.threads:
            self.set_threads(wanted)
            self.threads = wanted

    def after_step(self, tokens: int, seconds: float) -> None:
        if not self.plan:
            self.since_probe += 1
            return
        threads, measured = self.plan.pop(0)
        if measured:
            self.measured[threads][0] += tokens
            self.measured[threads][1] += seconds
        if not self.plan:  # the probe is over: keep the count with the most tokens per second
            self.best = max(self.candidates, key=lambda n: self.measured[n][0] / max(self.measured[n][1], 1e-9))
            self.since_probe = 0

    def rates(self) -> dict[int, float]:
        """Tokens per second of each count in the last (or current) probe."""
        return {n: tokens / seconds for n, (tokens, seconds) in self.measured.items() if seconds > 0}


@contextmanager
def training_threads(threads: int | None, tune: bool, *, on_cpu: bool) -> Iterator[ThreadTuner | None]:
    """Apply `train.threads` (None: torch's default) for the training, with a tuner when `train.tune_threads`
    asks for one and the model trains on the CPU (on a GPU the CPU threads hardly matter); torch's count
    before is restored after."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield ThreadTuner(torch.get_num_threads()) if tune and on_cpu else None
    finally:
        torch.set_num_threads(before)


__all__ = ["ThreadTuner", "candidates", "training_threads"]
