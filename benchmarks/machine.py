"""The machine's limits, measured: fp32 matmul throughput and memory bandwidth, so that a benchmark can say
how close to them a model runs (model-FLOPs utilisation, bandwidth-bound decoding).

    python -m benchmarks.machine [--device cuda] [--threads N] [--n 2048] [--mib 256] [--reps 10]

matmul_gflops   2 n^3 FLOPs of an (n, n) @ (n, n) fp32 product / median time
bandwidth_gb_s  a large tensor copy: bytes read + bytes written / median time (the STREAM "copy" count)
matvec_gb_s     an fp32 matrix-vector product: the matrix's bytes / median time (what a batch-1 decoding
                step does with every weight)
read_gb_s       the bandwidth bound: a buffer's bytes / the best time of the fastest kernel that reads it
                (a sum over it, a matrix-vector product with it) at a given thread count; give it the
                weights' size, and no decoder that reads every weight once per token can beat
                bytes / read_gb_s per token
last_level_cache_bytes()
                the largest CPU cache (Linux: /sys), to tell whether a buffer was read from memory
describe()      the CPU model, thread count, torch version and device name

Each measurement runs once to warm up, then `reps` times; the median is reported (read_gb_s: the best, as a
bound must be). Importing this module measures nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import best_seconds, device_arg, median_seconds


def matmul_gflops(device: torch.device | str, *, n: int = 2048, reps: int = 10,
                  dtype: torch.dtype = torch.float32) -> float:
    """GFLOP/s of an (n, n) @ (n, n) product in `dtype` (fp32 by default): 2 n^3 multiply-adds counted as
    FLOPs."""
    device = torch.device(device)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    out = torch.empty(n, n, device=device, dtype=dtype)
    return 2 * n**3 / median_seconds(lambda: torch.mm(a, b, out=out), device, reps) / 1e9


def bandwidth_gb_s(device: torch.device | str, *, mib: int = 256, reps: int = 10) -> float:
    """GB/s of a `mib`-MiB fp32 copy, counting the bytes read and the bytes written."""
    device = torch.device(device)
    src = torch.empty(mib * 2**20 // 4, device=device).uniform_()
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / median_seconds(lambda: dst.copy_(src), device, reps) / 1e9


def matvec_gb_s(device: torch.device | str, *, mib: int = 256, reps: int = 10, cols: int = 4096) -> float:
    """GB/s of reading a `mib`-MiB fp32 matrix in a matrix-vector product (the vector's bytes ignored)."""
    device = torch.device(device)
    matrix = torch.randn(mib * 2**20 // 4 // cols, cols, device=device)  # (rows, cols)
    vector = torch.randn(cols, device=device)
    out = torch.empty(matrix.shape[0], device=device)
    return matrix.numel() * 4 / median_seconds(lambda: torch.mv(matrix, vector, out=out), device, reps) / 1e9


def read_gb_s(device: torch.device | str, *, nbytes: int = 256 * 2**20, threads: int | None = None,
              reps: int = 10, cols: int = 4096) -> float:
    """GB/s at which the faster of two kernels streams through an fp32 buffer of `nbytes` bytes: `torch.sum`
    over it, and `torch.mv` with it as an (nbytes / 4 / cols, cols) matrix; each one's best of `reps` calls
    after a warm-up, with `threads` torch threads (default: torch's count; restored after)."""
    device = torch.device(device)
    cols = max(1, min(cols, nbytes // 4))
    matrix = torch.rand(max(1, nbytes // 4 // cols), cols, device=device)  # (rows, cols)
    vector = torch.rand(cols, device=device)
    flat, out, total = matrix.view(-1), torch.empty(matrix.shape[0], device=device), torch.empty((), device=device)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        kernels = (lambda: torch.sum(flat, dim=0, out=total), lambda: torch.mv(matrix, vector, out=out))
        best = min(best_seconds(fn, device, reps) for fn in kernels)
    finally:
        torch.set_num_threads(before)
    return matrix.numel() * 4 / best / 1e9


def decode_bound(device: torch.device | str, weight_bytes: int, *, threads: int | None = None,
                 reps: int = 10) -> dict[str, Any]:
    """The batch-1 decoding bound: a token reads every weight once, so tokens/s <= read_gb_s / weight bytes,
    with the streaming read measured on a buffer of the weights' size at `threads` threads."""
    gb_s = read_gb_s(device, nbytes=weight_bytes, threads=threads, reps=reps)
    return dict(weight_bytes=weight_bytes, bandwidth_gb_s=gb_s, threads=threads or torch.get_num_threads(),
                tokens_per_s=gb_s * 1e9 / weight_bytes, cache_bytes=last_level_cache_bytes())


def against_bound(bound: dict[str, Any], rates: dict[str, float]) -> dict[str, Any]:
    """`bound` with each contender's batch-1 tokens/s as a share of it (`<name>_share`); when a contender
    beats the bound, the bound is mismeasured: no share is given, and `mismeasured` says who beat it."""
    over = {name: rate for name, rate in rates.items() if rate > bound["tokens_per_s"]}
    shares = {f"{name}_share": None if over else rate / bound["tokens_per_s"] for name, rate in rates.items()}
    mismeasured = (f"the bound is mismeasured: {', '.join(f'{n} decodes {r:.0f} tokens/s' for n, r in over.items())}"
                   f", above its {bound['tokens_per_s']:.0f}") if over else None
    return dict(bound, **shares, mismeasured=mismeasured)


def last_level_cache_bytes() -> int | None:
    """The size of the largest cache of CPU 0 (Linux: /sys/devices/system/cpu/cpu0/cache), None elsewhere."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return max(sizes, default=None)


def cpu_model() -> str:
    """The CPU's name from /proc/cpuinfo (Linux), else what `platform` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def describe(device: torch.device | str = "cpu") -> dict[str, Any]:
    """What the numbers were measured on."""
    device = torch.device(device)
    return dict(cpu=cpu_model(), cpu_count=os.cpu_count(), threads=torch.get_num_threads(),
                device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                torch=torch.__version__, python=platform.python_version(), platform=platform.platform())


def limits(device: torch.device | str, *, n: int = 2048, mib: int = 256, reps: int = 10) -> dict[str, float]:
    """All four measurements, under the names the benchmarks' JSON uses."""
    return dict(matmul_gflops=matmul_gflops(device, n=n, reps=reps),
                bandwidth_gb_s=bandwidth_gb_s(device, mib=mib, reps=reps),
                matvec_gb_s=matvec_gb_s(device, mib=mib, reps=reps),
                read_gb_s=read_gb_s(device, nbytes=mib * 2**20, reps=reps))


def summary(info: dict[str, Any], measured: dict[str, float]) -> str:
    """One line: what `describe` and `limits` returned."""
    return (f"{info['cpu'] if info['device'] == 'cpu' else info['device']}, {info['threads']} threads, torch "
            f"{info['torch']}: fp32 matmul {measured['matmul_gflops']:.1f} GFLOP/s, copy "
            f"{measured['bandwidth_gb_s']:.1f} GB/s, mat-vec {measured['matvec_gb_s']:.1f} GB/s, streaming read "
            f"{measured['read_gb_s']:.1f} GB/s")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", type=device_arg, default="auto")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--n", type=int, default=2048, help="matmul size")
    p.add_argument("--mib", type=int, default=256, help="MiB copied / read by the bandwidth measurements")
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    info = describe(args.device)
    print(f"{info['platform']}, {info['cpu_count']} CPUs, python {info['python']}")
    print(summary(info, limits(args.device, n=args.n, mib=args.mib, reps=args.reps)))

if __name__ == "__main__":
    main()
