"""Where a continuous batch's time goes, with no server and no clients: the load of `serve_load --mode
generate` run on `decoding.continuous.Running` in one process, each of its methods timed.

    python -m benchmarks.continuous_profile [--checkpoint GPT] [--requests 64] [--rows 32]
        [--new-tokens 16,256] [--stream] [--scaling] [--seed 0] [--out FILE] [--quick]

Requests (a prompt of 4 to 20 made-up words, greedy, `max_new_tokens` uniform in --new-tokens, seeded) are
admitted whenever a row is free, so --rows stay live while any wait; then one step for all, until every
request has ended. `--stream` pushes each token through the server's `inference.TextStream`, as /generate
does. Reported: tokens/s over the whole run, milliseconds a step, and for each method of `Running` (admit:
a prompt's prefill alone; step; and what they call: joining a row, leaving, the column shifts and trims, the
buffers' growth, each draw) its seconds and calls. Nested: a step's time includes its draws, leaves, trims.
Set against the served figure (`serve_load --mode generate`), the difference is the server's and the
clients' share. Without --checkpoint: a randomly initialised GPT of GPT-2's shape (serve_load's). Not run in CI.

`--scaling`: what batching can gain at all on this machine. A step's time with 1, 2, 4, ... --rows live rows
(each row one 48-token prompt, then --scaling-steps greedy steps; the median step after the first 20), and from
that table the ceiling of continuous over micro-batching: micro-batches of --rows requests whose lengths are
drawn from --new-tokens, each running until its longest ends while its rows thin out (as `serve/batching.py`
does), against --rows rows kept live at every step; both with no wait between batches and no server.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import apply_quick, markdown_table, write_json
from benchmarks.serve_load import WORDS, random_gpt

QUICK = {"requests": 6, "new_tokens": "2,8", "scaling_steps": 6}
METHODS = ("admit", "step", "_join", "_leave", "_trim", "_shift", "_reserve", "_draw")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.continuous_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, default=None, help="a GPT checkpoint (default: a random GPT-2 shape)")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--rows", type=int, default=32, help="live rows at most (the server's --max-batch)")
    p.add_argument("--new-tokens", default="16,256", help="max_new_tokens drawn uniformly from LOW,HIGH")
    p.add_argument("--stream", action="store_true", help="push every token through a TextStream, as /generate")
    p.add_argument("--scaling", action="store_true", help="a step's time against live rows, and the ceiling it sets")
    p.add_argument("--scaling-steps", type=int, default=100, help="--scaling: steps timed at each row count")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--quick", action="store_true", help="a tiny random GPT, 6 short requests of at most 8 tokens")
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(p, args, QUICK)
    args.new_range = tuple(int(x) for x in args.new_tokens.split(","))
    args.words = (1, 2) if args.quick else (4, 20)  # the tiny GPT reads characters, 64 at most
    return args


def timing(cls: type, spent: Counter[str], calls: Counter[str]) -> Callable[[], None]:
    """Wrap each of METHODS on `cls` to add its seconds and calls up; returns what undoes it."""
    originals = {name: getattr(cls, name) for name in METHODS}

    def timed(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - start
                calls[name] += 1
        return call

    def undo() -> None:
        for name, method in originals.items():
            setattr(cls, name, method)

    for name, method in originals.items():
        setattr(cls, name, timed(name, method))
    return undo


def profile(checkpoint: Path, args: argparse.Namespace) -> dict[str, Any]:
    from tformer import inference
    from tformer.decoding import SampleConfig
    from tformer.decoding.continuous import Running
    from tformer.inference.generate import TextStream

    loaded = inference.load(checkpoint, command="generate")
    draw = random.Random(args.seed)
    requests = [(loaded.tokenizer.encode(" ".join(draw.choice(WORDS) for _ in range(draw.randint(*args.words)))),
                 draw.randint(*args.new_range)) for _ in range(args.requests)]
    greedy = SampleConfig(temperature=0.0, stop=False)
    spent: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    undo = timing(Running, spent, calls)
    try:
        batch, tokens = Running(loaded.decoder, rows=args.rows, eos_id=None), 0
        waiting = list(enumerate(requests))
        start = time.perf_counter()
        while waiting or batch.live:
            while waiting and len(batch.live) < args.rows:
                key, (ids, new) = waiting.pop(0)
                stream = TextStream(loaded.tokenizer) if args.stream else None
                batch.admit(key, ids, max_new_tokens=new, settings=greedy,
                            on_token=None if stream is None else stream.push)
            batch.step()
            for _, done in batch.finished():
                if done.error is not None:
                    raise done.error
                tokens += len(done.tokens)
        wall = time.perf_counter() - start
    finally:
        undo()
    return {"tokens": tokens, "seconds": wall, "tokens_per_s": tokens / wall, "steps": calls["step"],
            "ms_per_step": 1000 * spent["step"] / max(1, calls["step"]),
            "methods": {name: {"seconds": spent[name], "calls": calls[name]} for name in METHODS}}


def scaling(checkpoint: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A step's median time at each live-row count, and the ceiling of continuous over micro-batching."""
    import statistics

    from tformer import inference
    from tformer.decoding import SampleConfig
    from tformer.decoding.continuous import Running

    loaded = inference.load(checkpoint, command="generate")
    prompt = (loaded.tokenizer.encode(" ".join(WORDS * 4)) * 48)[:48 if not args.quick else 8]
    greedy = SampleConfig(temperature=0.0, stop=False)
    counts = sorted({min(2**i, args.rows) for i in range(args.rows.bit_length() + 1)} | {args.rows})
    ms: dict[int, float] = {}
    for n in counts:
        batch = Running(loaded.decoder, rows=args.rows, eos_id=None)
        for key in range(n):
            batch.admit(key, prompt, max_new_tokens=args.scaling_steps + 1, settings=greedy)
        times = []
        for _ in range(args.scaling_steps):
            start = time.perf_counter()
            batch.step()
            times.append(time.perf_counter() - start)
        ms[n] = 1000 * statistics.median(times[min(20, len(times) - 1):])
    return {"ms_per_step": ms, **ceiling(ms, args)}


def ceiling(ms: dict[int, float], args: argparse.Namespace) -> dict[str, float]:
    """Tokens/s of --rows rows always live, and of micro-batches of --rows requests that thin out (the step's
    time at n live rows interpolated in `ms`), over 1,000 batches of seeded lengths."""
    counts = sorted(ms)

    def step_ms(n: int) -> float:
        hi = next(c for c in counts if c >= n)
        lo = max([c for c in counts if c <= n], default=hi)
        return ms[lo] if hi == lo else ms[lo] + (ms[hi] - ms[lo]) * (n - lo) / (hi - lo)

    draw = random.Random(args.seed)
    tokens, seconds = 0, 0.0
    for _ in range(1000):
        lengths = [draw.randint(*args.new_range) for _ in range(args.rows)]
        tokens += sum(lengths)
        seconds += sum(step_ms(sum(n > s for n in lengths)) for s in range(max(lengths))) / 1000
    continuous = 1000 * args.rows / ms[args.rows]
    return {"continuous_tokens_per_s": continuous, "micro_tokens_per_s": tokens / seconds,
            "ceiling": continuous / (tokens / seconds)}


def scaling_markdown(result: dict[str, Any]) -> str:
    rows = [[n, f"{t:.2f}", f"{1000 * n / t:.0f}"] for n, t in result["ms_per_step"].items()]
    return (markdown_table(["live rows", "ms a step", "tokens/s"], "rrr", rows)
            + f"\n\nkept full: {result['continuous_tokens_per_s']:.0f} tokens/s; micro-batches thinning out: "
            f"{result['micro_tokens_per_s']:.0f} tokens/s; ceiling of continuous over micro: {result['ceiling']:.2f}x")


def markdown(result: dict[str, Any]) -> str:
    rows = [[name, f"{m['seconds']:.2f}", m["calls"], f"{1000 * m['seconds'] / m['calls']:.2f}" if m["calls"] else "-"]
            for name, m in result["methods"].items()]
    return (f"{result['tokens']} tokens in {result['seconds']:.1f} s: {result['tokens_per_s']:.0f} tokens/s, "
            f"{result['steps']} steps, {result['ms_per_step']:.1f} ms a step\n\n"
            + markdown_table(["method", "seconds", "calls", "ms a call"], "lrrr", rows))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or random_gpt(Path(tmp), args.quick)
        measured = scaling(checkpoint, args) if args.scaling else profile(checkpoint, args)
        result = {"args": {k: v for k, v in vars(args).items() if k != "new_range"}, "new_tokens": args.new_range,
                  "checkpoint": str(args.checkpoint) if args.checkpoint else "random GPT",
                  "threads": torch.get_num_threads(), "torch": torch.__version__, **measured}
    print(scaling_markdown(result) if args.scaling else markdown(result))
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
