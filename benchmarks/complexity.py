"""The notes' complexity table, measured: time and memory of one layer against sequence length n and width d.

    python -m benchmarks.complexity [--kinds sdpa eager lstm conv windowed sparse lowrank linear lsh ssm]
        [--n 256 512 ... 32768] [--d 256] [--d-sweep 64 128 256 512 1024] [--d-n 2048] [--heads 4] [--batch 1]
        [--window 64 --pattern strided --block 64 --summary 4 --rank 128 --buckets 16 --rounds 2 --chunk 64]
        [--state 16 --expand 2 --ssm-conv 4 --kernel-size 3] [--reps 3] [--budget 20] [--mem-cap-gib 8]
        [--fit-from 1024] [--at-n 4096] [--threads N] [--device cpu] [--seed 0] [--out docs/bench/complexity] [--quick]

The notes' table (Vaswani et al. 2017, Table 1, https://arxiv.org/abs/1706.03762) gives per layer the
time, the sequential operations and the maximum path length of self-attention O(n^2 d), O(1), O(1);
recurrent O(n d^2), O(n), O(n); convolutional O(k n d^2), O(1), O(log_k n); restricted self-attention
O(r n d), O(1), O(n/r). The fixes add sparse O(n (l + n/l) d) for a fixed block l (O(n sqrt(n) d) with
l = sqrt(n)), low-rank O(n k d), linear O(n d^2), LSH O(n log n d) and SSM O(n d N).

One layer is the token mixer `build_mixer` builds for an attention kind (its q/k/v/out projections, or the
SSM's in/out projections, included: O(n d^2) the claims leave out, which pulls the measured d slope towards
2), or a baseline built here: `nn.LSTM(d, d)` and a causal `nn.Conv1d(d, d, k)`. GPT configs (causal),
except low-rank, which has no causal form (a BERT config, bidirectional).

Time: one forward and backward (of the output's sum, the input requiring grad), the median of --reps after
one warm-up, on --threads threads. Memory: on CUDA the peak allocated over forward and backward, less what
was allocated before; on CPU, which has no allocator statistics, the bytes the forward keeps for backward
(`saved_tensors_hooks`, unique storages, parameters and input excluded) plus the output: the activation
memory that grows with n, not the transient peak inside a kernel. A kind stops growing n (or d) after the
first point over --budget seconds or --mem-cap-gib, or before a point that, extrapolated from the last two,
would take over 4x the budget or exceed the cap; a point its config rejects (low-rank rank > n) is skipped.

Slopes: least squares of log time (memory) on log n over the points with n >= --fit-from, or over the
upper half of the points when fewer than two reach it; in d, over the upper half of the widths.
Sequential operations: at n = --at-n, the per-token latency of the LSTM generating n tokens one at a time
(each output fed back as the next input) against one parallel forward over n tokens / n for every kind.

Writes OUT/results.json (every raw point), OUT/table.md (also printed) and the three log-log pictures
`tformer plot complexity` draws from results.json (`tformer.viz.complexity`: each kind's fitted slope in
the legend): OUT/complexity-time_vs_n.png, complexity-memory_vs_n.png, complexity-time_vs_d.png. Not run in CI.

B batch, n sequence length, d width.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from benchmarks.common import (
    Limit,
    apply_quick,
    device_arg,
    forecast,
    loglog_slope,
    median_seconds,
    warm_median,
    write_json,
)
from tformer.config import BertConfig, GPTConfig
from tformer.models.builders import build_mixer
from tformer.viz.complexity import PLOTS, plot_complexity
from tformer.viz.figures import save_figure

KINDS = ("sdpa", "eager", "lstm", "conv", "windowed", "sparse", "lowrank", "linear", "lsh", "ssm")
QUICK = dict(n=[128, 256], d=64, d_sweep=[32, 64], d_n=128, reps=1, at_n=256)


class Claim(NamedTuple):
    row: str  # the layer, in the notes' words
    time: str  # complexity per layer
    n_slope: str  # the exponent of n it predicts
    d_slope: str
    sequential: str  # sequential operations


CLAIMS = {
    "sdpa": Claim("self-attention, exact (fused sdpa)", "O(n²·d)", "2", "1", "O(1)"),
    "eager": Claim("self-attention, exact (eager)", "O(n²·d)", "2", "1", "O(1)"),
    "lstm": Claim("recurrent (nn.LSTM)", "O(n·d²)", "1", "2", "O(n)"),
    "conv": Claim("convolutional (kernel k)", "O(k·n·d²)", "1", "2", "O(1)"),
    "windowed": Claim("restricted (window r)", "O(r·n·d)", "1", "1", "O(1)"),
    "sparse": Claim("sparse (block l)", "O(n·(l + n/l)·d)", "1 → 2 past n = l²", "1", "O(1)"),
    "lowrank": Claim("low-rank (rank k)", "O(n·k·d)", "1", "1", "O(1)"),
    "linear": Claim("linear (elu + 1)", "O(n·d²)", "1", "2", "O(1)"),
    "lsh": Claim("LSH (Reformer)", "O(n log n·d)", "1 (+ log)", "1", "O(1)"),
    "ssm": Claim("SSM (selective, state N)", "O(n·d·N)", "1", "1", "O(1)"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--n", type=int, nargs="+", default=[2**i for i in range(8, 16)],
                   help="sequence lengths (default 256 .. 32768; quick: 128 256)")
    p.add_argument("--d", type=int, default=256, help="width of the n sweep (quick: 64)")
    p.add_argument("--d-sweep", type=int, nargs="+", default=[64, 128, 256, 512, 1024], help="widths (quick: 32 64)")
    p.add_argument("--d-n", type=int, default=2048, help="sequence length of the d sweep (quick: 128)")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--window", type=int, default=64, help="restricted: r")
    p.add_argument("--pattern", choices=("strided", "fixed"), default="strided", help="sparse")
    p.add_argument("--block", type=int, default=64, help="sparse: l")
    p.add_argument("--summary", type=int, default=4, help="sparse fixed: summary positions per block")
    p.add_argument("--rank", type=int, default=128, help="low-rank: k")
    p.add_argument("--buckets", type=int, default=16, help="LSH")
    p.add_argument("--rounds", type=int, default=2, help="LSH")
    p.add_argument("--chunk", type=int, default=64, help="LSH chunk; linear and SSM block of the parallel form")
    p.add_argument("--state", type=int, default=16, help="SSM: N")
    p.add_argument("--expand", type=int, default=2, help="SSM")
    p.add_argument("--ssm-conv", type=int, default=4, help="SSM: its causal convolution's width")
    p.add_argument("--kernel-size", type=int, default=3, help="convolutional baseline: k")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per point, after one warm-up (quick: 1)")
    p.add_argument("--budget", type=float, default=20.0, help="seconds one forward+backward may take")
    p.add_argument("--mem-cap-gib", type=float, default=8.0, help="memory (as measured) one point may take")
    p.add_argument("--fit-from", type=int, default=1024, help="fit the n slopes over n >= this")
    p.add_argument("--at-n", type=int, default=4096,
                   help="n of the table's time column and the per-token latencies (quick: 256)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads (default: all cores)")
    p.add_argument("--device", type=device_arg, default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("docs/bench/complexity"))
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny n and d, one repetition")
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(p, args, QUICK)
    return args


# --- the layers --------------------------------------------------------------------------------------


class Recurrent(nn.Module):
    """The notes' recurrent layer: an LSTM, d -> d, n steps one after the other."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(d, d, batch_first=True)

    def forward(self, x: Tensor, *, causal: bool = True) -> Tensor:
        return self.lstm(x)[0]  # (B, n, d)

    def generate(self, x: Tensor, steps: int) -> Tensor:
        """x (B, 1, d) -> (B, steps, d), each output fed back as the next input: one token at a time."""
        state, outs = None, []
        for _ in range(steps):
            x, state = self.lstm(x, state)  # (B, 1, d)
            outs.append(x)
        return torch.cat(outs, dim=1)


class CausalConv(nn.Module):
    """The notes' convolutional layer: kernel k over the sequence, padded on the left only (causal)."""

    def __init__(self, d: int, *, kernel_size: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(d, d, kernel_size=kernel_size, padding=kernel_size - 1)

    def forward(self, x: Tensor, *, causal: bool = True) -> Tensor:
        n = x.shape[1]
        return self.conv(x.transpose(1, 2))[..., :n].transpose(1, 2)  # (B, d, n + k - 1) -> (B, n, d)


def attention_options(args: argparse.Namespace) -> dict:
    return dict(window=args.window, pattern=args.pattern, block=args.block, summary=args.summary, rank=args.rank,
                buckets=args.buckets, rounds=args.rounds, chunk=args.chunk, state=args.state, expand=args.expand,
                conv=args.ssm_conv)


def build(kind: str, args: argparse.Namespace, *, n: int, d: int) -> tuple[nn.Module, bool]:
    """One layer of `kind` for length n and width d, and whether it runs causally. A config that rejects
    the sizes raises ValueError."""
    torch.manual_seed(args.seed)
    if kind == "lstm":
        layer, causal = Recurrent(d), True
    elif kind == "conv":
        layer, causal = CausalConv(d, kernel_size=args.kernel_size), True
    else:
        family = BertConfig if kind == "lowrank" else GPTConfig  # Linformer mixes all positions: never causal
        config = family(vocab_size=256, d_model=d, n_heads=args.heads, d_ff=4 * d, n_layers=1, max_len=n,
                        attention=dict(kind=kind, **attention_options(args)), positions=dict(kind="none"),
                        dropout=dict(embed=0.0, attention=0.0, residual=0.0, activation=0.0))
        causal = family is GPTConfig
        layer = build_mixer(config, causal=causal)
    return layer.to(args.device), causal


# --- measuring one point -----------------------------------------------------------------------------


def forward_backward(layer: nn.Module, x: Tensor, causal: bool) -> None:
    layer.zero_grad(set_to_none=True)
    x.grad = None
    layer(x, causal=causal).sum().backward()


def _storage(t: Tensor) -> tuple[int, int]:
    """(key, bytes) of the memory behind t; opaque tensors (mkldnn) have no storage: their own size."""
    try:
        s = t.untyped_storage()
        return s.data_ptr(), s.nbytes()
    except (RuntimeError, NotImplementedError):
        return id(t), t.numel() * t.element_size()


def saved_bytes(layer: nn.Module, x: Tensor, causal: bool) -> int:
    """Bytes the forward keeps for backward, plus the output; parameters and the input are not counted."""
    known = {_storage(t)[0] for t in [x, *layer.parameters()]}
    kept: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        key, size = _storage(t)
        if key not in known:
            kept[key] = max(kept.get(key, 0), size)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(x, causal=causal)
        key, size = _storage(out)
        kept[key] = max(kept.get(key, 0), size)
    return sum(kept.values())


def peak_bytes(layer: nn.Module, x: Tensor, causal: bool, device: torch.device) -> int:
    if device.type != "cuda":
        return saved_bytes(layer, x, causal)
    layer.zero_grad(set_to_none=True)
    x.grad = None
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    forward_backward(layer, x, causal)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def measure(layer: nn.Module, causal: bool, *, n: int, d: int, args: argparse.Namespace) -> dict:
    """Median seconds of one forward+backward (one repetition only if the warm-up is over budget) and memory."""
    device = torch.device(args.device)
    layer.train()
    x = torch.randn(args.batch, n, d, device=device, requires_grad=True)  # (B, n, d)
    time = warm_median(lambda: forward_backward(layer, x, causal), device, reps=args.reps, budget=args.budget)
    return dict(time, memory_bytes=peak_bytes(layer, x, causal, device))


# --- sweeps --------------------------------------------------------------------------------------------


def limits(args: argparse.Namespace) -> tuple[Limit, ...]:
    """A point is not run when it would take over 4x the time budget or more than the memory cap."""
    return Limit("time_s", 4 * args.budget, 1, "s"), Limit("memory_bytes", args.mem_cap_gib * 2**30, 2**30, "GiB")


def sweep(kind: str, axis: str, values: list[int], args: argparse.Namespace) -> dict:
    """Points of `kind` over n (at width --d) or over d (at length --d-n), until the budget or cap is hit."""
    points, skipped, stop = [], [], None
    for value in sorted(values):
        n, d = (value, args.d) if axis == "n" else (args.d_n, value)
        stop = forecast(points, value, axis, limits(args))
        if stop:
            break
        try:
            layer, causal = build(kind, args, n=n, d=d)
        except ValueError as e:
            skipped.append(f"{axis}={value}: {e}")
            continue
        try:
            point = dict(kind=kind, sweep=axis, n=n, d=d, **measure(layer, causal, n=n, d=d, args=args))
        except (RuntimeError, MemoryError) as e:  # out of memory, mostly
            stop = f"{axis}={value} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            break
        finally:
            del layer
        points.append(point)
        print(f"  {kind:9s} n={n:6d} d={d:5d}  {1e3 * point['time_s']:10.1f} ms  "
              f"{point['memory_bytes'] / 2**20:9.1f} MiB", file=sys.stderr, flush=True)
        if point["time_s"] > args.budget:
            stop = f"stopped after {axis}={value}: {point['time_s']:.1f} s > budget {args.budget:g} s"
        elif point["memory_bytes"] > args.mem_cap_gib * 2**30:
            gib = point["memory_bytes"] / 2**30
            stop = f"stopped after {axis}={value}: {gib:.2f} GiB > cap {args.mem_cap_gib:g} GiB"
        if stop:
            break
    return dict(points=points, skipped=skipped, stop=stop)


def per_token(kind: str, args: argparse.Namespace) -> dict:
    """Seconds per token at n = --at-n: one parallel forward / n; for the LSTM also n single steps / n."""
    device, n = torch.device(args.device), args.at_n
    layer, causal = build(kind, args, n=n, d=args.d)
    layer.eval()
    x = torch.randn(args.batch, n, args.d, device=device)  # (B, n, d)
    calls = {"parallel_s": lambda: layer(x, causal=causal)}
    if isinstance(layer, Recurrent):
        calls["stepwise_s"] = lambda: layer.generate(x[:, :1], n)
    out = {"n": n}
    with torch.inference_mode():
        for name, fn in calls.items():
            out[name + "_per_token"] = median_seconds(fn, device, args.reps) / n
    return out


# --- fits, table, plots ----------------------------------------------------------------------------------


def fit_window(xs: list[int], fit_from: int | None) -> list[int]:
    """Indices of the points to fit: x >= fit_from if at least two are, else the upper half (at least two)."""
    if fit_from is not None:
        chosen = [i for i, x in enumerate(xs) if x >= fit_from]
        if len(chosen) >= 2:
            return chosen
    return list(range(len(xs)))[min(len(xs) // 2, max(len(xs) - 2, 0)):]


def fit(points: list[dict], axis: str, fit_from: int | None) -> dict:
    xs = [p[axis] for p in points]
    use = fit_window(xs, fit_from)
    pick = [points[i] for i in use]
    return dict(fit_over=[p[axis] for p in pick],
                time=loglog_slope([p[axis] for p in pick], [p["time_s"] for p in pick]),
                memory=loglog_slope([p[axis] for p in pick], [p["memory_bytes"] for p in pick]))


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "—" if x is None or math.isnan(x) else format(x, fmt)


def _us(seconds: float) -> str:
    return f"{1e6 * seconds:.2f} µs/token"


def markdown(results: dict, args: argparse.Namespace) -> str:
    lines = [f"| kind | layer | claim (time) | time slope in n (claim) | memory slope in n | time slope in d "
             f"(claim) | time at n={args.at_n} | sequential ops: claim, per-token latency |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for kind, r in results.items():
        claim = CLAIMS[kind]
        at = [p["time_s"] for p in r["n"]["points"] if p["n"] == args.at_n]
        at_cell = f"{1e3 * at[0]:.1f} ms" if at else "not measured"
        seq = r.get("per_token")
        if seq is None:
            seq_cell = claim.sequential
        elif "stepwise_s_per_token" in seq:
            seq_cell = (f"{claim.sequential}: {_us(seq['stepwise_s_per_token'])} step by step "
                        f"({_us(seq['parallel_s_per_token'])} in one call)")
        else:
            seq_cell = f"{claim.sequential}: {_us(seq['parallel_s_per_token'])} in parallel"
        lines.append(f"| {kind} | {claim.row} | {claim.time} | {_num(r['n']['fit']['time'])} ({claim.n_slope}) | "
                     f"{_num(r['n']['fit']['memory'])} | {_num(r['d']['fit']['time'])} ({claim.d_slope}) | "
                     f"{at_cell} | {seq_cell} |")
    device = torch.device(args.device)
    memory = ("peak CUDA memory allocated over forward+backward" if device.type == "cuda" else
              "bytes saved for backward (saved_tensors_hooks; parameters and input excluded) + the output")
    lines += ["", f"One layer, forward+backward, batch {args.batch}, d={args.d} (n sweep), n={args.d_n} (d sweep), "
              f"{args.heads} heads, float32, {args.device}, {torch.get_num_threads()} threads; median of "
              f"{args.reps} after a warm-up. Memory: {memory}. Slopes: least squares on log-log over n >= "
              f"{args.fit_from} (or the upper half of the points), and over the upper half of the widths. "
              "Per-token latency: the LSTM generating n tokens one at a time against one forward over n tokens "
              f"/ n (n={args.at_n}). Options: r={args.window}, sparse {args.pattern} l={args.block}, rank "
              f"k={args.rank}, LSH {args.buckets} buckets x {args.rounds} rounds, chunk {args.chunk}, SSM "
              f"N={args.state} expand {args.expand}, conv k={args.kernel_size}.", "",
              "| kind | n reached | fit over n | fit over d | stopped |", "|---|---:|---|---|---|"]
    for kind, r in results.items():
        reached = max((p["n"] for p in r["n"]["points"]), default=0)
        stops = "; ".join(s for s in (r["n"]["stop"], r["d"]["stop"], *r["n"]["skipped"], *r["d"]["skipped"]) if s)
        lines.append(f"| {kind} | {reached} | {r['n']['fit']['fit_over']} | {r['d']['fit']['fit_over']} | "
                     f"{stops or '—'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    results = {}
    for kind in args.kinds:
        print(f"{kind}:", file=sys.stderr, flush=True)
        by_n = sweep(kind, "n", args.n, args)
        by_d = sweep(kind, "d", args.d_sweep, args)
        results[kind] = dict(n=dict(by_n, fit=fit(by_n["points"], "n", args.fit_from)),
                             d=dict(by_d, fit=fit(by_d["points"], "d", None)))
        if any(p["n"] >= args.at_n for p in by_n["points"]):  # it fits in the budget there
            results[kind]["per_token"] = per_token(kind, args)
    table = markdown(results, args)
    print(table)
    device = torch.device(args.device)
    info = dict(args=vars(args), torch=torch.__version__, threads=torch.get_num_threads(),
                device=torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
                or platform.machine(),
                memory=("cuda max_memory_allocated" if device.type == "cuda" else "saved for backward + output"),
                claims={k: CLAIMS[k]._asdict() for k in results}, results=results)
    write_json(args.out / "results.json", info)
    (args.out / "table.md").write_text(table)
    data = json.loads((args.out / "results.json").read_text())  # what `tformer plot complexity` reads
    for axis, key, stem, what, ylabel in PLOTS:
        save_figure(plot_complexity(data, axis=axis, key=key, what=what, ylabel=ylabel), args.out / f"{stem}.png")
    print(f"wrote {args.out}", file=sys.stderr)
    return info


if __name__ == "__main__":
    main()
