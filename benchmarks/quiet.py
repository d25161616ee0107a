"""Whether the machine was quiet while a contender was timed: the CPU time that processes other than the
benchmark's own used during the round, so that a timing taken beside other work is marked, and a ratio
that rests on it is refused rather than printed as a result.

    reading()                      the machine now: busy CPU seconds of the cores this process may run on
                                   (/proc/stat), this process's CPU seconds and its reaped children's
                                   (os.times), the 1-minute load average (/proc/loadavg), the wall clock
    check(before, after)           a `Check` of the round between two readings
    watch(fn)                      (fn's value, its Check)
    marks(checks)                  a table cell: "yes", "round 2: 48%", or "unknown"
    refusal({name: checks})        why a ratio over these contenders' rounds is not a result; None if every
                                   round was quiet (or the machine cannot tell)
    add_threshold_arg(parser)      --quiet-threshold

How: over a round, others = (busy seconds of the cores - the seconds this process and its children used)
/ the round's wall time: the average number of cores that other processes (and the kernel, and a
hypervisor's steal) kept busy. A round whose others exceed the threshold (0.10: a tenth of one core, on
average) is not quiet. The kernel counts CPU time in ticks (1/100 s), so a figure over a round is good to
about (cores + 1) ticks / its wall time (`resolution`): a round is marked only when others exceed the
threshold by more than that, and called quiet only when they stay under it by that much; a round too short
to tell (on two cores, one under 0.3 s that others left alone) is unknown. A contender that runs in a child
process is counted as our own once it has been waited for; a worker that times its own call can also check
its own round, as `ct2_speed`'s workers do.
The load average is reported beside it (before and after), not judged: it is a minute-long average that
holds the benchmark's own earlier rounds. Where /proc is missing (not Linux) the verdict is unknown.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

THRESHOLD = 0.10  # cores: others' average CPU use above which a round is not quiet
PROC = Path("/proc")
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal; idle (3) and iowait (4) are not busy;
#                                  guest time (8, 9) is already inside user and nice


@dataclass(frozen=True)
class Reading:
    """The machine at one instant."""

    wall_s: float  # time.monotonic()
    busy_s: float | None  # CPU seconds the watched cores have been busy since boot; None: unknown
    own_s: float  # CPU seconds of this process and of its children that have been waited for
    load1: float | None  # the 1-minute load average; None: unknown
    cores: int | None  # the cores `busy_s` counts
    tick_s: float = 0.01  # the kernel's unit of CPU time


@dataclass(frozen=True)
class Check:
    """One round's verdict: `others` is the average number of cores other processes kept busy."""

    wall_s: float
    others: float | None  # None: unknown (no /proc)
    cores: int | None
    load_before: float | None
    load_after: float | None
    threshold: float = THRESHOLD
    resolution: float = 0.0  # cores: how far `others` may be off, from the ticks the kernel counts in

    @property
    def quiet(self) -> bool | None:
        """True: quiet; False: another process competed; None: the machine cannot tell (no /proc, or a round
        too short for the kernel's ticks)."""
        if self.others is None:
            return None
        if self.others - self.resolution > self.threshold:
            return False
        return True if self.others + self.resolution <= self.threshold else None

    def as_dict(self) -> dict[str, Any]:
        return dict(asdict(self), quiet=self.quiet)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Check:
        return cls(**{k: d[k] for k in ("wall_s", "others", "cores", "load_before", "load_after", "threshold",
                                        "resolution")})

    def share(self) -> str:
        """Others' use in words: "48% of a core (24% of the 2 cores)"."""
        of_all = f" ({100 * self.others / self.cores:.0f}% of the {self.cores} cores)" if self.cores else ""
        return f"{100 * self.others:.0f}% of a core{of_all}"


def busy_seconds(stat: str, cpus: set[int] | None = None, *, hz: int = 100) -> tuple[float, int] | None:
    """(busy CPU seconds since boot, cores counted) from /proc/stat's text: the `cpuN` lines of `cpus` (all
    of them if None or if none of them is listed), the `cpu` total line when no `cpuN` line is there."""
    total, per_cpu = None, {}
    for line in stat.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or len(fields) < 4:
            continue
        values = [int(v) for v in fields]
        busy = sum(values[i] for i in BUSY_FIELDS if i < len(values))
        if name == "cpu":
            total = busy
        elif name[3:].isdigit():
            per_cpu[int(name[3:])] = busy
    chosen = [v for n, v in per_cpu.items() if cpus is None or n in cpus] or list(per_cpu.values())
    if chosen:
        return sum(chosen) / hz, len(chosen)
    return None if total is None else (total / hz, os.cpu_count() or 1)


def load_1min(loadavg: str) -> float | None:
    """The 1-minute load average from /proc/loadavg's text."""
    try:
        return float(loadavg.split()[0])
    except (IndexError, ValueError):
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def own_seconds() -> float:
    """CPU seconds of this process (all its threads) and of the children it has waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def reading(proc: Path = PROC) -> Reading:
    """The machine now; the fields /proc cannot give are None."""
    stat, loadavg = _read(proc / "stat"), _read(proc / "loadavg")
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy = None if stat is None else busy_seconds(stat, cpus, hz=hz)
    return Reading(wall_s=time.monotonic(), busy_s=None if busy is None else busy[0], own_s=own_seconds(),
                   load1=None if loadavg is None else load_1min(loadavg), cores=None if busy is None else busy[1],
                   tick_s=1 / hz)


def check(before: Reading, after: Reading, *, threshold: float = THRESHOLD) -> Check:
    """The round between two readings: the cores others kept busy on average, good to `resolution` cores
    (the kernel's ticks can put it below 0 or above the cores there are; it is kept between the two)."""
    wall = after.wall_s - before.wall_s
    others, resolution = None, 0.0
    if before.busy_s is not None and after.busy_s is not None and wall > 0:
        others = max(0.0, (after.busy_s - before.busy_s) - (after.own_s - before.own_s)) / wall
        others = min(others, after.cores or others)
        resolution = ((after.cores or 1) + 1) * after.tick_s / wall
    return Check(wall_s=wall, others=others, cores=after.cores, load_before=before.load1, load_after=after.load1,
                 threshold=threshold, resolution=resolution)


def watch(fn: Callable[[], Any], *, threshold: float = THRESHOLD) -> tuple[Any, Check]:
    """(what `fn` returned, the Check of the round that ran it)."""
    before = reading()
    out = fn()
    return out, check(before, reading(), threshold=threshold)


def verdict(checks: Sequence[Check]) -> str:
    """"quiet" if every round was, "not quiet" if any was not, else "unknown"."""
    if any(c.quiet is False for c in checks):
        return "not quiet"
    return "quiet" if checks and all(c.quiet for c in checks) else "unknown"


def marks(checks: Sequence[Check]) -> str:
    """A table cell: "yes" (every round quiet), the rounds that were not with others' share of a core
    ("round 2: 48%, round 3: 20%"), or "unknown"."""
    loud = [f"round {i}: {100 * c.others:.0f}%" for i, c in enumerate(checks, 1) if c.quiet is False]
    if loud:
        return ", ".join(loud)
    return "yes" if verdict(checks) == "quiet" else "unknown"


def refusal(rounds: Mapping[str, Sequence[Check]]) -> str | None:
    """Why a figure over these contenders' rounds is not a result (the round in which others used the most),
    or None when no round was marked."""
    loud = [(c.others, i, name, c) for name, checks in rounds.items() for i, c in enumerate(checks, 1)
            if c.quiet is False]
    if not loud:
        return None
    _, i, name, c = max(loud, key=lambda x: x[0])
    return f"not a result: other processes used {c.share()} during round {i} ({name})"


def rounds_of(row: Mapping[str, Any]) -> list[Check]:
    """The Checks of a result row's rounds, as its JSON holds them (`rounds`: a list of Check dicts)."""
    return [Check.from_dict(d) for d in row.get("rounds") or []]


def add_threshold_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet-threshold", type=float, default=THRESHOLD, metavar="CORES",
                   help="a round is not quiet when other processes kept more than this many cores busy on average")
