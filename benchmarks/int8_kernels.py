"""Which int8 weight-only matmul this torch build runs fastest on this CPU, on the project's layer shapes.

    python -m benchmarks.int8_kernels [--reps 15] [--rows 1 8 256] [--shapes 160x640 ...] [--compile]
        [--out docs/bench/int8-kernels.json]

Contenders for y = x W^T + b, x (M, K), W (N, K), against fp32 `F.linear` in the same process, run in turn
(`common.alternate`: reversed order on odd rounds, so a busier machine penalises none) and reported as
the median time's speed-up over fp32 (> 1: faster):
    int8pack      torch.ops.aten._weight_int8pack_mm: int8 W, one fp32 scale per output channel
    dynamic       torch.ops.quantized.linear_dynamic (fbgemm / x86 engine): int8 W per channel, activations
                  quantized per call, int32 accumulation (what torch.ao's quantize_dynamic builds)
    compiled      (--compile) torch.compile of dequantize-then-matmul: (W.float() * scale) then F.linear
The shapes (K -> N) are the demo translator's (d 160, d_ff 640, vocab 4000), the Bible GPT's (d 256,
d_ff 1024) and transformer-base's (d 512, d_ff 2048, vocab 32000). M is the rows of one product:
1 (batch-1 generation), 8 (batch 8), 256 (beam 4 x 64 sentences, one step); 1024 is an encoder pass.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from benchmarks.common import alternate, write_json

SHAPES = [(160, 160), (160, 640), (640, 160), (160, 4000), (256, 256), (256, 1024), (1024, 256),
          (512, 512), (512, 2048), (2048, 512), (512, 32000)]


def per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """W (N, K) -> (int8 W (N, K), fp32 scale (N,)): symmetric, one scale per output row."""
    scale = w.abs().amax(dim=1).clamp(min=1e-8) / 127
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


def contenders(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *, compile_: bool) -> dict:
    q, scale = per_channel(w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qw = torch.quantize_per_channel(w, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(qw, b)
    calls = {
        "fp32": lambda: F.linear(x, w, b),
        "int8pack": lambda: torch.ops.aten._weight_int8pack_mm(x, q, scale) + b,
        "dynamic": lambda: torch.ops.quantized.linear_dynamic(x, packed, True),
    }
    if compile_:
        dequant = torch.compile(lambda x_, q_, s_, b_: F.linear(x_, q_.float() * s_[:, None], b_), dynamic=False)
        calls["compiled"] = lambda: dequant(x, q, scale, b)
    return calls


def measure(shapes: list[tuple[int, int]], rows: list[int], reps: int, *, compile_: bool,
            save: Callable[[list[dict]], None] = lambda points: None) -> list[dict]:
    """Every shape at every M; `save(points)` after each point, so a run cut short keeps what it measured."""
    torch.manual_seed(0)
    points = []
    for k, n in shapes:
        w, b = torch.randn(n, k) * k**-0.5, torch.randn(n) * 0.1
        for m in rows:
            x = torch.randn(m, k)
            calls = contenders(x, w, b, compile_=compile_)
            ref = calls["fp32"]()
            err = {name: float((fn() - ref).abs().max() / ref.abs().max()) for name, fn in calls.items()}  # warm-up too
            times = {name: statistics.median(t) for name, t in alternate(calls, torch.device("cpu"), reps).items()}
            point = dict(k=k, n=n, m=m, fp32_us=times["fp32"] * 1e6,
                         speedup={name: times["fp32"] / t for name, t in times.items() if name != "fp32"},
                         rel_err={name: e for name, e in err.items() if name != "fp32"})
            points.append(point)
            save(points)
            print(f"{k:>5} -> {n:<6} M={m:<5} fp32 {point['fp32_us']:9.1f} us  " + "  ".join(
                f"{name} {s:5.2f}x (err {point['rel_err'][name]:.1e})" for name, s in point["speedup"].items()),
                flush=True)
    return points


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8, 256])
    p.add_argument("--shapes", nargs="+", default=[f"{k}x{n}" for k, n in SHAPES], help="KxN: in and out features")
    p.add_argument("--compile", action="store_true", help="also time inductor's dequantize-matmul")
    p.add_argument("--out", default=None, help="write the points as JSON here")
    args = p.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, quantized engine "
          f"{torch.backends.quantized.engine}")
    shapes = [(int(k), int(n)) for k, n in (s.split("x") for s in args.shapes)]
    def save(points: list[dict]) -> None:
        if args.out:
            write_json(args.out, dict(torch=torch.__version__, threads=torch.get_num_threads(),
                                      engine=torch.backends.quantized.engine, points=points))

    measure(shapes, args.rows, args.reps, compile_=args.compile, save=save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
