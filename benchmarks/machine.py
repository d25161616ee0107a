"""The machine's limits, measured: fp32 matmul throughput and memory bandwidth, so that a benchmark can say
how close to them a model runs (model-FLOPs utilisation, bandwidth-bound decoding).

    python -m benchmarks.machine [--device cuda] [--threads N] [--n 2048] [--mib 256] [--reps 10]

matmul_gflops   2 n^3 FLOPs of an (n, n) @ (n, n) fp32 product / median time
bandwidth_gb_s  a large tensor copy: bytes read + bytes written / median time (the STREAM "copy" count)
matvec_gb_s     an fp32 matrix-vector product: the matrix's bytes / median time (what a batch-1 decoding
                step does with every weight)
describe()      the CPU model, thread count, torch version and device name

Each measurement runs once to warm up, then `reps` times; the median is reported. Importing this module
measures nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import device_arg, median_seconds


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
    """All three measurements, under the names the benchmarks' JSON uses."""
    return dict(matmul_gflops=matmul_gflops(device, n=n, reps=reps),
                bandwidth_gb_s=bandwidth_gb_s(device, mib=mib, reps=reps),
                matvec_gb_s=matvec_gb_s(device, mib=mib, reps=reps))


def summary(info: dict[str, Any], measured: dict[str, float]) -> str:
    """One line: what `describe` and `limits` returned."""
    return (f"{info['cpu'] if info['device'] == 'cpu' else info['device']}, {info['threads']} threads, torch "
            f"{info['torch']}: fp32 matmul {measured['matmul_gflops']:.1f} GFLOP/s, copy "
            f"{measured['bandwidth_gb_s']:.1f} GB/s, mat-vec {measured['matvec_gb_s']:.1f} GB/s")


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
