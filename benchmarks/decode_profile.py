"""Where one decoding step goes: torch.profiler's per-operator self time for tformer, against the time
CTranslate2 takes for one step of the same model (issue 20, item 4).

    python -m benchmarks.decode_profile [--task generate|beam] [--new-tokens 64] [--reps 5] [--threads 0]
        [--top 15] [--out FILE]

--task generate (batch-1 greedy generation): `benchmarks.ct2_random`'s GPT-2 shape (6 layers, d 512,
vocabulary 8192), random, fp32; a 32-token prompt, then --new-tokens tokens. --task beam (beam-4
translation): `ct2_random`'s demo-shaped translator, one batch of 64 sources of 20 to 40 tokens, every
sentence --new-tokens long (ct2_speed's end-symbol bias), so a step decodes 256 rows. Per step = (seconds of
the whole call) / new tokens. One profiled call in this process, before CTranslate2 has run in it; then
the step times, each engine timed in a process of its own (`ct2_random.in_process`: a warm-up call, then
--reps calls, the median), as an engine that has run in a process slows the other there. "outside the
operators" is the unprofiled step less the operators' self CPU time
(which the profiler inflates a little, so this is a lower bound): Python, the decoding loop's bookkeeping
and the dispatcher, what a C++ loop does not pay.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.common import write_json
from benchmarks.ct2_random import contender_call, in_process, worker_argv, workload
from tformer.interop.ct2 import to_ct2


def op_table(prof: profile, steps: int, top: int) -> list[dict]:
    """The `top` operators by self CPU time: microseconds per decoding step, calls per step, share."""
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    return [{"op": e.key, "us_per_step": e.self_cpu_time_total / steps, "calls_per_step": e.count / steps,
             "share": e.self_cpu_time_total / total} for e in events[:top]]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=["generate", "beam"], default="generate")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch's and CTranslate2's threads (0: torch's count)")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--small", action="store_true", help="a tiny model (the tests)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    n = args.new_tokens
    task = "gen1" if args.task == "generate" else "beam"
    work = argparse.Namespace(sentences=64, batch=64, src_len=40, new_tokens=n, gen_new_tokens=n, calls=args.reps,
                              small=args.small)
    fn = contender_call(task, "tformer fp32", Path(), work, threads)
    fn()  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:  # before CTranslate2 has run in this process
        started = time.perf_counter()
        fn()
        profiled_us = (time.perf_counter() - started) / n * 1e6
    with tempfile.TemporaryDirectory() as tmp:  # unprofiled step times, each engine in a process of its own
        model, _ = workload(task, work)
        to_ct2(model, Path(tmp) / f"{'gpt' if task == 'gen1' else 'translator'}-fp32")
        argv = worker_argv(work, threads)
        step_us = {engine: statistics.median(in_process(task, f"{engine} fp32", Path(tmp), argv)["seconds"]) / n * 1e6
                   for engine in ("tformer", "ct2")}
    ops = op_table(prof, n, args.top)
    in_ops = sum(e.self_cpu_time_total for e in prof.key_averages()) / n
    what = "batch-1 greedy generation" if args.task == "generate" else "beam-4 translation, 64 sentences"
    print(f"one step of {what}, {threads} threads: tformer {step_us['tformer']:.0f} us, "
          f"CTranslate2 {step_us['ct2']:.0f} us ({step_us['tformer'] / step_us['ct2']:.2f}x)")
    outside = max(0.0, step_us["tformer"] - in_ops)
    print(f"tformer's step: operators {in_ops:.0f} us (self CPU time, profiled), outside the operators at least "
          f"{outside:.0f} us ({outside / step_us['tformer']:.0%}); the profiled step took {profiled_us:.0f} us\n")
    print("| operator | us per step | calls per step | share of operator time |")
    print("|---|---:|---:|---:|")
    for row in ops:
        print(f"| {row['op']} | {row['us_per_step']:.0f} | {row['calls_per_step']:.1f} | {row['share']:.1%} |")
    result = {"task": args.task, "threads": threads, "new_tokens": n, "step_us": step_us,
              "profiled_step_us": profiled_us, "operators_us": in_ops, "outside_operators_us": outside, "ops": ops}
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
