"""Quality at equal budget: every attention kind as the token mixer of the same small character-level GPT,
trained on the same text for the same steps; validation loss, bits per character, speed and decoding memory.

    python -m benchmarks.quality [--steps 300] [--variants exact mqa ...] [--runs runs/quality]
                                 [--out docs/bench/quality] [--quick] [--no-progress]

The recipe is gpt-bible (src/tformer/recipes/gpt-bible.yaml) read by tformer's own loader (`load_recipe`)
with key=value overrides,
the same for every variant but the attention: a smaller model (d 128, 4 heads, m 512, 4 layers, learned
positions as in the preset), 16 blocks of 256 characters a step, the same seed (so the same batches in
the same order), `--steps` optimizer steps with the preset's warm-up fraction and a cosine decay ending at
the last step, no time budget, no sampling, and one evaluation at the end on the first ~20,000 characters
of the validation split (Romans). Each variant is one `train_lm` run under RUNS/<variant>.

Reported per variant:
    val loss      nats per token on the validation text (one token is one character; </s> counts as one)
    bits/char     LMTask's bits per character
    tokens/s      training tokens per second: the median of the windows fit() logs to metrics.jsonl (the
                  median shrugs off the slow first window); evaluation is not counted
    time          wall time of the whole run (data, tokenizer, training, the evaluation, checkpoints)
    params        parameters of the trained model (a tied matrix counted once)
    cache bytes   what cached generation keeps per sequence (batch 1, float32), measured: the tensors of each
                  layer's cache from `model.new_caches(1, n)` summed at n = 1,024 positions. The exact,
                  windowed, sparse and LSH kinds keep keys and values, 2 * L * Hk * D * 4 bytes per position;
                  linear attention keeps S (Hk, D, D) and z (Hk, D) per layer and the SSM the state h (E, N)
                  and the last K - 1 convolution inputs (E, K - 1), E = expand * d: constant in the length.
                  The figure is what tformer allocates: a windowed layer reads only the last r + 1 positions
                  of its full-length cache, so a ring buffer could keep less.
The SSM's scan runs in 16-step chunks rather than the default 64: on a CPU that is faster, and the result
is the same (the chunk only bounds the scan's memory).
Tokens/s and time compare only between variants run on the same otherwise idle machine.

A variant that fails (to build, to train) gets its error in the table and the run goes on. Writes
OUT/results.json and OUT/table.md and prints the table. `--quick` (3 steps, small batches, a tiny evaluation)
only checks that everything runs. Not a test; not run in CI.

L layers, Hk key/value heads, D head width, d model width, E SSM channels, N SSM state, K convolution width.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from benchmarks.lm_sweep import CONFIG, MODEL, each, recipe_with, short_run, train_fresh, write_results
from tformer.checkpoints import load_model
from tformer.config import GPTConfig
from tformer.runs import RunDir
from tformer.tasks import load_recipe
from tformer.tasks.lm import LMRecipe

BLOCK_SIZE, BATCH_SIZE, EVAL_TOKENS = 256, 16, 20_000
CACHE_POSITIONS = 1024


class Variant(NamedTuple):
    label: str  # the table's "attention" column
    overrides: dict[str, Any]  # model.overrides beyond the shared ones


VARIANTS: dict[str, Variant] = {
    "exact": Variant("sdpa, 4 kv heads (MHA)", {"attention": "sdpa"}),
    "mqa": Variant("sdpa, 1 kv head (MQA)", {"attention": "sdpa", "n_kv_heads": 1}),
    "gqa": Variant("sdpa, 2 kv heads (GQA)", {"attention": "sdpa", "n_kv_heads": 2}),
    "windowed": Variant("windowed, r 32", {"attention": {"kind": "windowed", "window": 32}}),
    "sparse-strided": Variant("sparse strided, l 16",
                              {"attention": {"kind": "sparse", "pattern": "strided", "block": 16}}),
    "sparse-fixed": Variant("sparse fixed, l 16, c 4",
                            {"attention": {"kind": "sparse", "pattern": "fixed", "block": 16, "summary": 4}}),
    "linear": Variant("linear (elu + 1), chunk 64", {"attention": {"kind": "linear", "chunk": 64}}),
    "lsh": Variant("LSH, 8 buckets x 2 rounds, chunk 32",
                   {"attention": {"kind": "lsh", "buckets": 8, "rounds": 2, "chunk": 32}}),
    "ssm": Variant("SSM (Mamba-style), N 16, E 2d, K 4",  # chunk: only speed (the scan's block length)
                   {"attention": {"kind": "ssm", "state": 16, "expand": 2, "conv": 4, "chunk": 16}}),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300, help="optimizer steps of every variant")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--config", type=Path, default=CONFIG, help="the recipe the overrides apply to")
    p.add_argument("--runs", type=Path, default=Path("runs/quality"), help="run directories: RUNS/<variant>")
    p.add_argument("--out", type=Path, default=Path("docs/bench/quality"), help="results.json and table.md go here")
    p.add_argument("--quick", action="store_true", help="3 steps, small batches, a tiny evaluation: a smoke run")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.quick:
        args.steps = 3
    if args.steps < 1:
        p.error(f"--steps={args.steps} must be a positive integer")
    return args


# --- the recipe ---------------------------------------------------------------------------------------


def shared_overrides(config: Path, *, steps: int, quick: bool) -> dict[str, Any]:
    """Dotted recipe keys -> values, the same for every variant."""
    return short_run(config, steps=steps, block=BLOCK_SIZE, max_len=BLOCK_SIZE, batch=4 if quick else BATCH_SIZE,
                     eval_tokens=1024 if quick else EVAL_TOKENS)


def variant_recipe(name: str, args: argparse.Namespace) -> LMRecipe:
    """The recipe of one variant, through `load_recipe` as `tformer train CONFIG key=value ...` would read it."""
    return recipe_with(args.config, {**shared_overrides(args.config, steps=args.steps, quick=args.quick),
                                     **{f"model.overrides.{k}": v for k, v in VARIANTS[name].overrides.items()},
                                     "out_dir": str(args.runs / name)})


# --- measurements -------------------------------------------------------------------------------------


def state_bytes(state: object) -> int:
    """Bytes of the tensors one layer's cache holds (KVCache k, v; LinearState s, z; SSMState conv, h)."""
    return sum(t.numel() * t.element_size() for t in vars(state).values() if isinstance(t, Tensor))


def cache_bytes(model: nn.Module, positions: int = CACHE_POSITIONS) -> int:
    """Bytes of the decoding caches of all layers for one sequence of `positions` tokens, as allocated."""
    return sum(state_bytes(c.mixer_state) for c in model.new_caches(1, positions))


def expected_cache_bytes(config: GPTConfig, positions: int = CACHE_POSITIONS) -> tuple[int, bool]:
    """(bytes, whether they grow with the length) from the config alone, float32, batch 1."""
    a, n_layers, hk, d = config.attention, config.n_layers, config.n_kv_heads, config.head_dim
    if a.kind == "ssm":
        channels = a.expand * config.d_model
        return n_layers * (channels * a.state + channels * (a.conv - 1)) * 4, False
    if a.kind == "linear":
        return n_layers * hk * (d * d + d) * 4, False
    return 2 * n_layers * hk * d * 4 * positions, True


def n_parameters(model: nn.Module) -> int:
    """Trainable numbers; a tied matrix counts once."""
    return sum(p.numel() for p in model.parameters())


def read_metrics(run: Path) -> list[dict[str, Any]]:
    file = RunDir(run).metrics
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()] if file.is_file() else []


def train_speed(records: list[dict[str, Any]]) -> float | None:
    """Median training tokens/s over the logged windows (the median shrugs off a slow first window)."""
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    return statistics.median(rates) if rates else None


def run_variant(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train one variant from scratch (its run directory replaced) and measure it."""
    recipe = variant_recipe(name, args)
    run = Path(recipe.out_dir)
    state, wall = train_fresh(recipe, progress=not args.no_progress)
    model, config = load_model(RunDir(run).last)
    records = read_metrics(run)
    expected, grows = expected_cache_bytes(config)
    measured = cache_bytes(model)
    return {
        "valid_loss": state["metrics"]["valid_loss"], "bits_per_char": state["metrics"]["bits_per_char"],
        "valid_ppl": state["metrics"]["valid_ppl"], "tokens_per_s": train_speed(records),
        "train_s": next((r["elapsed_s"] for r in reversed(records) if "elapsed_s" in r), None),
        "wall_s": wall, "parameters": n_parameters(model), "steps": state["step"],
        "cache_bytes": measured, "cache_bytes_expected": expected, "cache_grows": grows,
        "attention": dict(vars(config.attention)), "n_kv_heads": config.n_kv_heads, "run": str(run),
    }


# --- report -------------------------------------------------------------------------------------------


def cache_cell(r: dict[str, Any]) -> str:
    cell = f"{r['cache_bytes']:,}"
    cell += f" ({r['cache_bytes'] // CACHE_POSITIONS:,} B/token)" if r["cache_grows"] else " (constant)"
    if r["cache_bytes"] != r["cache_bytes_expected"]:
        cell += f"; formula {r['cache_bytes_expected']:,}"
    return cell


def markdown(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    o = info["overrides"]
    lines = [f"{info['steps']} steps of {o['data.batch_size']} x {o['data.block_size']} characters (Bible, char "
             f"tokenizer), seed {info['seed']}, the same batches for every variant; GPT d {MODEL['d_model']}, "
             f"{MODEL['n_heads']} heads, m {MODEL['d_ff']}, {MODEL['n_layers']} layers, learned positions. "
             f"Validation: the first ~{o['data.eval_tokens']:,} characters of Romans. tokens/s: median of the "
             f"logged training windows ({info['threads']} threads, {info['machine']}); time: the whole run. "
             f"Cache: bytes kept for generating one sequence at {CACHE_POSITIONS:,} positions (float32, measured "
             "from model.new_caches); key/value caches grow 2 * L * Hk * D * 4 bytes a position, linear "
             "attention and the SSM keep a state of constant size.", "",
             "| variant | attention | val loss | bits/char | tokens/s | time | params | cache bytes at 1,024 tokens |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            message = r["error"].replace("|", "\\|")
            lines.append(f"| {r['variant']} | {VARIANTS[r['variant']].label} | failed: {message} | | | | | |")
            continue
        speed = "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:,.0f}"
        lines.append(f"| {r['variant']} | {VARIANTS[r['variant']].label} | {r['valid_loss']:.4f} | "
                     f"{r['bits_per_char']:.4f} | {speed} | {r['wall_s']:.0f} s | {r['parameters']:,} | "
                     f"{cache_cell(r)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = each(args.variants, lambda name: run_variant(name, args), key="variant")
    info = {"args": vars(args),
            "steps": args.steps, "seed": load_recipe(args.config).train.seed,
            "overrides": shared_overrides(args.config, steps=args.steps, quick=args.quick),
            "model": MODEL, "cache_positions": CACHE_POSITIONS, "threads": torch.get_num_threads(),
            "machine": f"{platform.machine()} CPU",
            "torch": torch.__version__}
    table = markdown(rows, info)
    print(table)
    write_results(args.out, info, rows, table)
    return 0 if all(math.isfinite(r.get("valid_loss", math.nan)) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
