"""The longest sequence one exact attention layer handles within a memory cap (4 GiB), and its time.

    python -m benchmarks.attention_memory [--kernels sdpa eager] [--modes forward train] [--d-model 512]
        [--heads 8] [--batch 1] [--start 1024] [--max-n 1048576] [--cap-gib 4] [--budget 10] [--reps 3]
        [--causal] [--device cuda] [--dtype float32] [--out FILE] [--quick]

One `tformer.nn.Attention` layer (q/k/v/out projections around the kernel) with the fused kernel (`sdpa`,
PyTorch's scaled_dot_product_attention: memory linear in n) and the eager reference softmax(QK^T/sqrt(k))V
(which holds (B, H, n, n) scores: quadratic), self-attention over n tokens, bidirectional unless --causal.
Two modes: `forward` (inference, no autograd) and `train` (forward, then backward of the output's sum with
the input requiring grad; the weights' gradients count).

Memory is the peak of what the call allocates on top of what was there before (the input and the weights):
on CUDA `max_memory_allocated`; on CPU, which keeps no allocator statistics, the peak of the bytes of live
tensors created during the call, tracked at the dispatcher (`LiveBytes`: every op's outputs, each storage
once, released when freed), so every intermediate counts, the (n, n) scores included. Scratch a kernel
allocates internally and never hands out (the CPU flash kernel's per-thread blocks, O(threads * block * D))
is not seen. Time: median of --reps calls after one warm-up (one call if the warm-up takes over half the
budget).

n doubles from --start until a point would exceed the cap or the time budget (forecast from the last two
points' log-log slope, 2 from one point), or past --max-n. A point measured over the cap ends the sweep too;
the answer is the longest n measured within the cap. Where time stops the sweep first (on a CPU), the n at
which memory would reach the cap is extrapolated from the last two points and shown beside it.

Prints a Markdown table; `--out` writes JSON. Not a test; not run in CI.

B batch, n sequence length, d width, H heads.
"""

from __future__ import annotations

import argparse
import platform
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from benchmarks.common import Limit, apply_quick, device_arg, forecast, recent_slope, warm_median, write_json
from tformer.data.device import DTYPES
from tformer.nn.attention import Attention
from tformer.nn.kernels.exact import ExactAttention

KERNELS = ("sdpa", "eager")
MODES = ("forward", "train")
QUICK = dict(d_model=64, heads=4, start=64, max_n=256, reps=1, budget=2.0)
GIB = 2**30


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", nargs="+", choices=KERNELS, default=list(KERNELS))
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--start", type=int, default=1024, help="first n; doubled at each point")
    p.add_argument("--max-n", type=int, default=2**20)
    p.add_argument("--cap-gib", type=float, default=4.0, help="the memory cap, GiB")
    p.add_argument("--budget", type=float, default=10.0, help="seconds one call may take")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--causal", action="store_true", help="causal self-attention (default: bidirectional)")
    p.add_argument("--device", type=device_arg, default="auto")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--quick", action="store_true", help="a smoke run: n 64..256, d 64, one repetition")
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(p, args, QUICK)
    return args


class LiveBytes(TorchDispatchMode):
    """Within the `with` block: `peak`, the most bytes held at once by tensors that ops created in it. Each
    storage counts once (views share it) from its creation until it is freed (a weak reference's callback)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}  # id of a storage -> bytes
        self.current = self.peak = 0

    def __torch_dispatch__(self, func: Callable, types: object, args: tuple = (), kwargs: dict | None = None) -> object:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor):
                self._track(t)
        return out

    def _track(self, t: Tensor) -> None:
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # opaque tensors have no storage
            return
        key = id(storage)
        if key in self.live:
            return
        self.live[key] = storage.nbytes()
        self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)


def build(kernel: str, args: argparse.Namespace, device: torch.device) -> nn.Module:
    torch.manual_seed(args.seed)
    layer = Attention(d_model=args.d_model, n_heads=args.heads, n_kv_heads=args.heads,
                      head_dim=args.d_model // args.heads, kernel=ExactAttention(fused=kernel == "sdpa"))
    return layer.to(device=device, dtype=DTYPES[args.dtype])


def call(layer: nn.Module, x: Tensor, mode: str, causal: bool) -> Callable[[], None]:
    """One forward (no autograd) or one forward + backward, as a function of nothing."""
    def forward() -> None:
        with torch.inference_mode():
            layer(x, causal=causal)

    def train() -> None:
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x, causal=causal).sum().backward()

    return forward if mode == "forward" else train


def peak_bytes(fn: Callable[[], None], layer: nn.Module, x: Tensor, device: torch.device) -> int:
    """Bytes one call allocates at its peak beyond what was allocated before it (see the module docstring)."""
    layer.zero_grad(set_to_none=True)
    x.grad = None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    tracker = LiveBytes()
    with tracker:
        fn()
    return tracker.peak


def measure(kernel: str, mode: str, n: int, args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    layer = build(kernel, args, device).train(mode == "train")
    x = torch.randn(args.batch, n, args.d_model, device=device, dtype=DTYPES[args.dtype],
                    requires_grad=mode == "train")  # (B, n, d)
    fn = call(layer, x, mode, args.causal)
    time = warm_median(fn, device, reps=args.reps, budget=args.budget / 2)
    return dict(n=n, **time, memory_bytes=peak_bytes(fn, layer, x, device))


def limits(args: argparse.Namespace) -> tuple[Limit, ...]:
    """A point is not run when it would exceed the memory cap or the time budget."""
    return Limit("memory_bytes", args.cap_gib * GIB, GIB, "GiB"), Limit("time_s", args.budget, 1, "s")


def sweep(kernel: str, mode: str, args: argparse.Namespace) -> dict:
    """Points at doubling n until the cap, the budget or --max-n; the longest n within the cap."""
    cap = args.cap_gib * GIB
    points: list[dict] = []
    stop, n = f"reached --max-n={args.max_n}", args.start
    while n <= args.max_n:
        why = forecast(points, n, "n", limits(args))
        if why:
            stop = why
            break
        try:
            point = measure(kernel, mode, n, args)
        except (RuntimeError, MemoryError) as e:  # out of memory, mostly
            stop = f"n={n} failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
            break
        points.append(point)
        print(f"  {kernel:5s} {mode:7s} n={n:8d}  {1e3 * point['time_s']:10.1f} ms  "
              f"{point['memory_bytes'] / 2**20:10.1f} MiB", file=sys.stderr, flush=True)
        if point["memory_bytes"] > cap:
            stop = f"n={n} measured {point['memory_bytes'] / GIB:.3g} GiB > {args.cap_gib:g} GiB"
            break
        if point["time_s"] > args.budget:
            stop = f"n={n} took {point['time_s']:.3g} s > budget {args.budget:g} s"
            break
        n *= 2
    within = [p for p in points if p["memory_bytes"] <= cap]
    best = within[-1] if within else None
    n_at_cap = None
    if best is not None and best["memory_bytes"] > 0:
        n_at_cap = best["n"] * (cap / best["memory_bytes"]) ** (1 / recent_slope(within, "memory_bytes", "n"))
    return dict(kernel=kernel, mode=mode, points=points, stop=stop, longest_n=best["n"] if best else None,
                time_s=best["time_s"] if best else None, memory_bytes=best["memory_bytes"] if best else None,
                n_at_cap_extrapolated=n_at_cap)


def markdown(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [f"| kernel | mode | longest n within {args.cap_gib:g} GiB | time | memory | n at {args.cap_gib:g} GiB "
             "(extrapolated) | stopped by |", "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        n = "none" if r["longest_n"] is None else f"{r['longest_n']:,}"
        time_cell = "—" if r["time_s"] is None else f"{1e3 * r['time_s']:.1f} ms"
        mib = None if r["memory_bytes"] is None else r["memory_bytes"] / 2**20
        mem = "—" if mib is None else f"{mib:.1f} MiB" if mib < 10 else f"{mib:,.0f} MiB"
        at_cap = "—" if r["n_at_cap_extrapolated"] is None else f"{r['n_at_cap_extrapolated']:,.0f}"
        lines.append(f"| {r['kernel']} | {r['mode']} | {n} | {time_cell} | {mem} | {at_cap} | {r['stop']} |")
    memory = ("CUDA max_memory_allocated beyond input and weights" if args.device.startswith("cuda") else
              "peak bytes of live tensors the call created (tracked at the dispatcher)")
    lines.append(f"\nOne attention layer, d={args.d_model}, {args.heads} heads, batch {args.batch}, "
                 f"{'causal' if args.causal else 'bidirectional'}, {args.dtype} on {args.device} "
                 f"({torch.get_num_threads()} threads); n doubling from {args.start}; time budget {args.budget:g} s "
                 f"per call; median of {args.reps} after a warm-up. forward = inference; train = forward + "
                 f"backward (weight gradients included). Memory: {memory}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    device = torch.device(args.device)
    rows = []
    for kernel in args.kernels:
        for mode in args.modes:
            print(f"{kernel} {mode}:", file=sys.stderr, flush=True)
            rows.append(sweep(kernel, mode, args))
    print(markdown(rows, args))
    info = dict(args=vars(args),
                device=torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine(),
                torch=torch.__version__, threads=torch.get_num_threads(),
                memory="cuda max_memory_allocated" if device.type == "cuda" else "live tensor bytes (dispatcher)",
                results=rows)
    if args.out is not None:
        print(f"\nwrote {write_json(args.out, info)}", file=sys.stderr)
    return info


if __name__ == "__main__":
    main()
