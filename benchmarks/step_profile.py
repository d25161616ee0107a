"""Where a translation recipe's training time goes, on the device it trains on: per optimizer step, the wall
time, the device's busy time (the sum of its kernels), the operators and kernels launched and the times the
host waited for the device (each sync leaves the device idle until the host has launched the next work);
and outside the steps, collating one epoch of batches and one evaluation (valid loss and greedy BLEU).

    python -m benchmarks.step_profile demo-gpu [key=value ...] [--steps 20] [--warmup 5] [--out FILE]

It runs the loop's own step (`training.loop._step`, with the recipe's precision, compile setting, optimizer
and clipping) on the recipe's first batches, in the recipe's data order (with a length curriculum, growing).
A step whose device is busy for a small share of its wall time is bound by the host (Python and kernel
launches): fewer, larger kernels (train.compile, larger batches or widths) pay there, and a faster GPU does
not. benchmarks/gpu_check.sh runs it on the GPU demo's recipe; on the CPU the device time is not separate
from the host's and is left out.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType

from benchmarks.common import at_least, run_main, sync, timed, write_json
from tformer.data.device import resolve_device
from tformer.errors import UserError
from tformer.tasks import load_recipe
from tformer.tasks.translation import translation_setup
from tformer.training import distributed as dist
from tformer.training.compiling import check_compilable
from tformer.training.loop import _loss_of, _step
from tformer.training.optim import build_optimizer
from tformer.training.precision import Precision, tf32_matmuls

# the CUDA runtime calls at which the host waits for the device: .item(), float(t), t.tolist() and copies from
# pageable memory each make one
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
# the caching allocator asking the driver for memory: slow, and the device idles meanwhile; steps whose
# shapes keep growing (a length curriculum) make it ask again and again (PYTORCH_CUDA_ALLOC_CONF's
# expandable_segments:True is torch's remedy)
ALLOCS = ("cudaMalloc", "cuMemCreate", "cuMemMap")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("recipe", help="a translation recipe: a shipped name (demo-gpu) or a YAML file")
    p.add_argument("overrides", nargs="*", help="key=value changes to the recipe, as `tformer train` takes them")
    p.add_argument("--steps", type=at_least(1), default=20, help="steps timed, then the same number profiled")
    p.add_argument("--warmup", type=at_least(0), default=5,
                   help="steps run first, untimed (with train.compile: compiling)")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    return p.parse_args(argv)


def profile_counts(prof: torch.profiler.profile, steps: int, on_gpu: bool) -> dict:
    """Per step: operators the host dispatched (outermost aten calls), and on a GPU the kernels launched, the
    seconds they ran and the times the host waited for the device."""
    events = prof.events()
    outer = [e for e in events if e.device_type == DeviceType.CPU and e.name.startswith("aten::")
             and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
    out = {"ops_per_step": len(outer) / steps}
    if on_gpu:
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        syncs = [e for e in events if e.device_type == DeviceType.CPU and e.name in SYNCS]
        out["kernels_per_step"] = len(kernels) / steps
        out["syncs_per_step"] = len(syncs) / steps
        out["allocs_per_step"] = sum(e.name in ALLOCS for e in events if e.device_type == DeviceType.CPU) / steps
        out["device_busy_s"] = sum(e.time_range.elapsed_us() for e in kernels) / 1e6 / steps
    return out


def measure(args: argparse.Namespace) -> dict:
    recipe = load_recipe(args.recipe, args.overrides)
    if recipe.task != "translation":
        raise UserError(f"{args.recipe}: task={recipe.task!r}; step_profile takes translation recipes")
    train = recipe.train
    torch.manual_seed(train.seed)
    started = time.perf_counter()
    built = translation_setup(recipe, None)
    setup_s = time.perf_counter() - started
    device = resolve_device(train.device, local_rank=0)
    model, task = built.model.to(device), built.task
    world = dist.launched_world()
    precision = Precision(train.precision, device)
    if train.compile:
        check_compilable(device)
    optimizer = build_optimizer(model, train.optim)
    started = time.perf_counter()
    batches = task.batches(0)
    collate_s = time.perf_counter() - started
    loss_of = _loss_of(task, model, train.compile, world, batches=batches)
    model.train()

    def step(i: int) -> int:
        micro = [batches[(i * train.accum_steps + j) % len(batches)] for j in range(train.accum_steps)]
        return _step(model, task, micro, optimizer, clip_norm=train.optim.clip_norm, world=world,
                     precision=precision, loss_of=loss_of)[1]

    on_gpu = device.type == "cuda"
    with tf32_matmuls(device):
        started = time.perf_counter()
        for i in range(args.warmup):
            step(i)
        sync(device)
        warmup_s = time.perf_counter() - started
        walls, tokens = [], []
        for i in range(args.warmup, args.warmup + args.steps):
            wall, n = timed(lambda i=i: step(i), device)
            walls.append(wall)
            tokens.append(n)
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])
        with torch.profiler.profile(activities=activities) as prof:
            for i in range(args.warmup + args.steps, args.warmup + 2 * args.steps):
                step(i)
            sync(device)
        model.eval()
        eval_s, metrics = timed(lambda: task.evaluate(model), device)
    wall = statistics.median(walls)
    counts = profile_counts(prof, args.steps, on_gpu)
    busy = counts.get("device_busy_s")
    return dict(recipe=str(args.recipe), overrides=args.overrides, device=str(device),
                alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                device_name=torch.cuda.get_device_name(device) if on_gpu else "cpu", torch=torch.__version__,
                precision=precision.name, compile=train.compile, parameters=sum(p.numel() for p in model.parameters()),
                steps=args.steps, step_s=wall, steps_s=walls, tokens_per_step=statistics.median(tokens),
                tokens_per_s=statistics.median(tokens) / wall, warmup_s=warmup_s, warmup_steps=args.warmup,
                device_busy=None if busy is None else busy / wall, **counts, setup_s=setup_s,
                batches_per_epoch=len(batches), collate_epoch_s=collate_s, eval_s=eval_s,
                eval_metrics=metrics)


def report(r: dict) -> str:
    busy = "" if r["device_busy"] is None else (
        f", device busy {1000 * r['device_busy_s']:.1f} ms ({100 * r['device_busy']:.0f}% of the step), "
        f"{r['kernels_per_step']:.0f} kernels")
    lines = [
        f"{r['recipe']} {' '.join(r['overrides'])} on {r['device_name']} (torch {r['torch']}), {r['precision']}"
        f"{', compiled' if r['compile'] else ''}, {r['parameters'] / 1e6:.1f}M parameters",
        f"step: {1000 * r['step_s']:.1f} ms wall (median of {r['steps']}), {r['tokens_per_step']:.0f} target "
        f"tokens, {r['tokens_per_s']:,.0f} tokens/s{busy}",
        f"host: {r['ops_per_step']:.0f} operators a step"
        + ("" if r["device_busy"] is None else f", waits for the device {r['syncs_per_step']:.0f} times a step, "
                                               f"asks the driver for memory {r['allocs_per_step']:.1f} times"),
        f"outside the steps: first {r['warmup_steps']} steps {r['warmup_s']:.1f} s; collating an epoch "
        f"({r['batches_per_epoch']} batches) {r['collate_epoch_s']:.2f} s; one evaluation {r['eval_s']:.1f} s; "
        f"setup (tokenizer, data, model) {r['setup_s']:.1f} s",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    """Measure, print the report and (--out) write the JSON; returns the results. A recipe or override that
    cannot be used is a one-line message and exit code 2 (SystemExit)."""
    args = parse_args(argv)
    result = run_main(lambda: measure(args), "step_profile")
    print(report(result), flush=True)
    if args.out is not None:
        write_json(args.out, result)
        print(f"wrote {args.out}", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
