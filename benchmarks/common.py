"""What every benchmark here shares: timing on a device, medians of alternating contenders, log-log slopes,
forecasts of the next point of a sweep, `--quick` presets, and results written as plain JSON.

    sync(device)                        drain the device's queue (CUDA is asynchronous; the CPU needs nothing)
    timed(fn, device)                   (seconds, return value) of one call, the queue drained before and after
    seconds(fn, device)                 the seconds alone
    median_seconds(fn, device, reps)    one warm-up call, then the median of `reps` timed calls
    best_seconds(fn, device, reps)      one warm-up call, then the fastest of `reps` (a bound's measurement)
    warm_median(fn, device, reps=, budget=)
                                        a sweep point's time: {time_s, times_s, warmup_s}; one timed call only
                                        when the warm-up alone took longer than `budget`
    alternate(calls, device, reps)      seconds of every contender, run in turn and in reversed order on odd
                                        repetitions, so that a machine getting busier penalises none of them
    alternate_checked(calls, device, reps, threshold=)
                                        the same, and each round's `quiet.Check` (did another process compete)
    loglog_slope(xs, ys)                the exponent p of y = c x^p, least squares on log-log
    recent_slope(points, key, axis)     the log-log slope of `key` over the last two points of a sweep
    forecast(points, value, axis, limits)
                                        why the next point of a sweep should not be run (its time or memory,
                                        extrapolated from the last two points, over a limit); None to run it
    apply_quick(parser, args, preset)   `--quick`: the preset's small sizes for every option left at its default
    device_arg, at_least(n)             argparse types: a device torch has here (as `tformer` checks --device),
                                        a whole number >= n; a bad value is argparse's error and exit code 2
    run_main(main, prog)                a benchmark run as a command: a setting tformer refuses (UserError) is
                                        one line `prog: ...` and exit code 2, not a traceback
    write_json(path, data)              NaN as null, paths as text, the directory created
    table_head(head, align), table_row(cells), markdown_table(head, align, rows)
                                        Markdown tables: `align` one letter a column, l left, r right, c centred;
                                        a head alone for a table whose rows are printed as they are measured

Run a benchmark from the repository root as a module: `python -m benchmarks.complexity --quick`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from benchmarks import quiet
from tformer.data.device import resolve_device
from tformer.errors import UserError
from tformer.viz.complexity import fit_slope


def device_arg(name: str) -> str:
    """argparse type of --device: cpu, cuda, cuda:N or auto, resolved as `tformer` resolves it (a GPU that is
    not there is refused here, in one line, rather than by torch's traceback once the benchmark has begun)."""
    try:
        return str(resolve_device(name, what="--device"))
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def at_least(minimum: int) -> Callable[[str], int]:
    """argparse type of a count: a whole number >= `minimum`."""

    def count(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"{n} is below {minimum}; give a whole number >= {minimum}")
        return n

    return count


def run_main(main: Callable[[], Any], prog: str) -> Any:
    """`main()`'s value, with a UserError (a size or setting tformer refuses, e.g. heads that do not divide the
    width) printed as one line `prog: message` on stderr and exit code 2."""
    try:
        return main()
    except UserError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def sync(device: torch.device) -> None:
    """Drain the device's queue (CUDA runs asynchronously; the CPU needs nothing)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    """(seconds, what `fn` returned) of one call, the device's queue drained before and after."""
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - start, out


def seconds(fn: Callable[[], Any], device: torch.device) -> float:
    """Wall time of one call, the device's queue drained before and after."""
    return timed(fn, device)[0]


def median_seconds(fn: Callable[[], Any], device: torch.device, reps: int) -> float:
    """One warm-up call, then the median time of `reps` calls."""
    fn()
    return statistics.median(seconds(fn, device) for _ in range(reps))


def best_seconds(fn: Callable[[], Any], device: torch.device, reps: int) -> float:
    """One warm-up call, then the fastest of `reps` calls."""
    fn()
    return min(seconds(fn, device) for _ in range(reps))


def warm_median(fn: Callable[[], Any], device: torch.device, *, reps: int, budget: float) -> dict:
    """One warm-up call, then `reps` timed calls (one if the warm-up took over `budget` seconds): the median
    and every time, for a sweep point."""
    warmup = seconds(fn, device)
    times = [seconds(fn, device) for _ in range(1 if warmup > budget else reps)]
    return dict(time_s=statistics.median(times), times_s=times, warmup_s=warmup)


def alternate(calls: dict[str, Callable[[], Any]], device: torch.device, reps: int) -> dict[str, list[float]]:
    """Seconds of each contender over `reps` rounds; even rounds run them in order, odd rounds reversed."""
    return alternate_checked(calls, device, reps)[0]


Rounds = dict[str, list[quiet.Check]]  # contender -> the Check of each of its timed rounds


def alternate_checked(calls: dict[str, Callable[[], Any]], device: torch.device, reps: int, *,
                      threshold: float = quiet.THRESHOLD) -> tuple[dict[str, list[float]], Rounds]:
    """`alternate`'s seconds, and for each contender the `quiet.Check` of each of its rounds: how much CPU
    other processes used while it was timed."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    checks: Rounds = {name: [] for name in calls}
    for rep in range(reps):
        for name in list(calls) if rep % 2 == 0 else reversed(calls):
            t, check = quiet.watch(lambda fn=calls[name]: seconds(fn, device), threshold=threshold)
            times[name].append(t)
            checks[name].append(check)
    return times, checks


def loglog_slope(xs: Iterable[float], ys: Iterable[float]) -> float:
    """Least-squares slope of log y on log x: the exponent p of y = c x^p (NaN with fewer than two points)."""
    return fit_slope(list(xs), list(ys))[0]


class Limit(NamedTuple):
    """A ceiling on one measured quantity of a sweep's points, and how to print it."""

    key: str  # the point's field: "time_s", "memory_bytes"
    limit: float
    unit: float  # divide by this to print
    name: str  # "s", "GiB"


def recent_slope(points: list[dict], key: str, axis: str) -> float:
    """The log-log slope of `key` against `axis` over the last two points, at least 1; 2 (the worst the
    notes' table has) with fewer than two points or a zero among them."""
    if len(points) < 2 or min(points[-2][key], points[-1][key]) <= 0:
        return 2.0
    a, b = points[-2], points[-1]
    return max(1.0, math.log(b[key] / a[key]) / math.log(b[axis] / a[axis]))


def forecast(points: list[dict], value: float, axis: str, limits: Iterable[Limit]) -> str | None:
    """Why the point at `axis` = `value` should not be run, extrapolating each limited quantity along
    `recent_slope`; None to run it."""
    if not points:
        return None
    last = points[-1]
    for lim in limits:
        predicted = last[lim.key] * (value / last[axis]) ** recent_slope(points, lim.key, axis)
        if predicted > lim.limit:
            return (f"{axis}={value} not run: predicted {predicted / lim.unit:.3g} {lim.name} > "
                    f"{lim.limit / lim.unit:.3g} {lim.name}")
    return None


def apply_quick(parser: argparse.ArgumentParser, args: argparse.Namespace, preset: dict[str, Any]) -> None:
    """Set each option of `preset` that the user left at the parser's default to the preset's value."""
    for key, value in preset.items():
        if getattr(args, key) == parser.get_default(key):
            setattr(args, key, value)


def plain(x: object) -> object:
    """`x` as plain JSON: NaN and infinities as None, tuples as lists, paths and anything else as text."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    return x if x is None or isinstance(x, str | int | float | bool) else str(x)


def write_json(path: str | Path, data: object) -> Path:
    """Write `data` as indented JSON (see `plain`), creating the directory; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plain(data), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path


RULES = {"l": "---", "r": "---:", "c": ":---:"}


def table_row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table_head(head: Sequence[str], align: str) -> str:
    """The column names and the rule under them; `align` one letter a column (l, r or c)."""
    if len(align) != len(head):
        raise ValueError(f"{len(head)} columns but {len(align)} alignments ({align!r})")
    return table_row(head) + "\n|" + "|".join(RULES[a] for a in align) + "|"


def markdown_table(head: Sequence[str], align: str, rows: Iterable[Sequence[object]]) -> str:
    return "\n".join([table_head(head, align), *(table_row(r) for r in rows)])
