"""Length extrapolation: the same small character-level GPT trained at context 128 with each position
scheme, then evaluated on longer blocks of the same validation text.

    python -m benchmarks.extrapolation [--steps 400] [--positions sinusoidal learned rope alibi]
                                       [--lengths 128 256 512 1024] [--eval-chars 32768]
                                       [--runs runs/extrapolation] [--out docs/bench/extrapolation] [--quick]

Training: the gpt-bible recipe (src/tformer/recipes/gpt-bible.yaml) read by tformer's own loader
(`load_recipe`) with key=value overrides, the
same for every scheme but `positions`: d 128, 4 heads, m 512, 4 layers (the model of benchmarks/quality.py),
blocks of 128 characters, 32 a step (the 4,096 tokens a step of the preset), the same seed and batches,
`--steps` steps with the preset's warm-up fraction and a cosine decay ending at the last step, no sampling,
one evaluation at the end. max_len is 1,024, so the stack accepts the longest evaluation block: for learned
positions this makes a 1,024-row table whose rows 128..1,023 are never trained (they keep their random
initialisation, shrunk a little by weight decay); such a table has no row at all past max_len.
Sinusoidal positions are a fixed function defined at every position, RoPE rotates queries and keys by
angles proportional to the position, ALiBi adds a distance penalty to the scores (Press et al. 2022,
https://arxiv.org/abs/2108.12409); none of the three has parameters tied to a length, but only ALiBi was
designed to extrapolate. Each scheme is one `train_lm` run under RUNS/<kind>.

Evaluation: each trained model is loaded from its run's best/ (else last/) checkpoint with
`tformer.checkpoints.load_model`, with its tokenizer. The validation split (Romans) becomes one
token stream as LMTask builds it (</s> before every chapter), cut to its first `--eval-chars` + 1 tokens,
and packed into non-overlapping blocks of length L (`pack_padded`, `split_block`), so every L predicts the
same characters. Perplexity = exp(mean negative log-likelihood over all predicted tokens), per character
(the tokenizer has one token a character; </s> counts as one). The mean is over every position of every
block: a block's first positions have little context whatever L is, so a model that extrapolates perfectly
gains from a longer L, and ppl@1024 still has 1/8 of its positions within the trained range 0..127. A
second table splits the L = 1,024 evaluation by position within the block.

Writes OUT/results.json and OUT/table.md and prints the tables. `--quick` (3 steps, small batches, 2,048
evaluation characters) only checks that everything runs. Not a test; not run in CI.

B batch (blocks), L block length (context), V vocabulary.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks.lm_sweep import CONFIG, MODEL, each, recipe_with, short_run, train_fresh, write_results
from tformer.checkpoints import load_model, tokenizer_dir
from tformer.config import POSITION_KINDS
from tformer.runs import RunDir
from tformer.tasks import load_recipe
from tformer.tasks.lm import LMRecipe, load_split, pack_padded, split_block, token_stream
from tformer.tokenization.hf import load_tokenizer

TRAIN_BLOCK, BATCH_SIZE, EVAL_TOKENS = 128, 32, 20_000
BATCH_TOKENS = 8192  # evaluation: blocks per forward = BATCH_TOKENS // L

# Each scheme's model overrides. "sinusoidal-paper" adds the paper's embedding scale: token embeddings
# normal(0, d^-1/2) times sqrt(d), at the sinusoids' unit amplitude (the GPT preset's normal(0, 0.02)
# embeddings, unscaled, are 30 times smaller than the sinusoids added to them).
SCHEMES = {
    **{kind: {"positions": {"kind": kind}} for kind in POSITION_KINDS},
    "sinusoidal-paper": {"positions": {"kind": "sinusoidal"}, "scale_embeddings": True, "init": {"kind": "xavier"}},
}
NOTES = {
    "sinusoidal": "fixed sin/cos of the position: defined everywhere, but positions >= {train} never seen",
    "sinusoidal-paper": "the same, with the paper's embeddings x sqrt(d) (xavier init)",
    "learned": "rows {train}..{max_len_1} of the table never trained (random init); no row past max_len = {max_len}",
    "rope": "relative in the scores; rotation angles past {train} never seen",
    "alibi": "linear distance penalty on the scores, no table; built to extrapolate",
    "none": "no position signal (causal masking alone)",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400, help="optimizer steps of every scheme")
    p.add_argument("--positions", nargs="+", choices=list(SCHEMES),
                   default=["sinusoidal", "sinusoidal-paper", "learned", "rope", "alibi"])
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024], help="evaluation block lengths")
    p.add_argument("--eval-chars", type=int, default=32768, help="validation tokens predicted at every length")
    p.add_argument("--config", type=Path, default=CONFIG, help="the recipe the overrides apply to")
    p.add_argument("--runs", type=Path, default=Path("runs/extrapolation"), help="run directories: RUNS/<kind>")
    p.add_argument("--out", type=Path, default=Path("docs/bench/extrapolation"),
                   help="results.json and table.md go here")
    p.add_argument("--quick", action="store_true", help="3 steps, small batches, a tiny evaluation: a smoke run")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.eval_chars = 3, 2048
    for name in ("steps", "eval_chars"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} must be a positive integer")
    if min(args.lengths) < 1:
        p.error(f"--lengths {args.lengths}: every length must be a positive integer")
    return args


# --- training -----------------------------------------------------------------------------------------


def shared_overrides(config: Path, *, steps: int, max_len: int, quick: bool) -> dict[str, Any]:
    """Dotted recipe keys -> values, the same for every scheme: trained at context TRAIN_BLOCK, positions
    up to `max_len`."""
    return short_run(config, steps=steps, block=TRAIN_BLOCK, max_len=max_len, batch=4 if quick else BATCH_SIZE,
                     eval_tokens=1024 if quick else EVAL_TOKENS)


def scheme_recipe(kind: str, args: argparse.Namespace) -> LMRecipe:
    values = {**shared_overrides(args.config, steps=args.steps, max_len=max(args.lengths), quick=args.quick),
              **{f"model.overrides.{k}": v for k, v in SCHEMES[kind].items()}, "out_dir": str(args.runs / kind)}
    return recipe_with(args.config, values)


def chosen_checkpoint(run: Path) -> Path:
    """RUN/best when the run kept one, else RUN/last."""
    return RunDir(run).trained() or RunDir(run).last


# --- evaluation ---------------------------------------------------------------------------------------


@torch.inference_mode()
def position_nll(model: nn.Module, stream: Tensor, *, length: int, pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed negative log-likelihood and token count at each position 0..L-1 of the stream's
    non-overlapping blocks of `length` tokens; (L,) each."""
    blocks = pack_padded(stream, block_size=length, pad_id=pad_id)  # (N, L + 1)
    total, count = torch.zeros(length, dtype=torch.float64), torch.zeros(length, dtype=torch.long)
    step = max(1, BATCH_TOKENS // length)
    for i in range(0, len(blocks), step):
        batch = split_block(blocks[i : i + step])
        logits = model(batch.inputs)  # (B, L, V)
        nll = F.cross_entropy(logits.float().transpose(1, 2), batch.targets, ignore_index=pad_id,
                              reduction="none")  # (B, L), 0 at padding
        total += nll.double().sum(0)
        count += (batch.targets != pad_id).sum(0)
    return total, count


def perplexity(total: Tensor, count: Tensor) -> float:
    return math.exp(min(float(total.sum()) / max(int(count.sum()), 1), 700.0))


def spans(length: int, train: int) -> list[tuple[int, int]]:
    """[0, train), then doubling spans up to `length`: [train, 2 train), [2 train, 4 train), ..."""
    edges = [0, min(train, length)]
    while edges[-1] < length:
        edges.append(min(2 * edges[-1], length))
    return list(zip(edges[:-1], edges[1:], strict=True))


def evaluate_run(run: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Perplexity of the run's checkpoint at every length, and by position span."""
    checkpoint = chosen_checkpoint(run)
    model, config = load_model(checkpoint)
    directory = tokenizer_dir(checkpoint)
    if directory is None:
        raise ValueError(f"{checkpoint} has no tokenizer/")
    tokenizer = load_tokenizer(directory)
    recipe = load_recipe(RunDir(run).recipe)
    stream = token_stream(load_split(recipe.data, "valid"), tokenizer)[: args.eval_chars + 1]  # (N + 1,)
    result: dict[str, Any] = {"checkpoint": str(checkpoint), "predicted": len(stream) - 1, "ppl": {},
                              "by_position": {}, "parameters": sum(p.numel() for p in model.parameters())}
    for length in args.lengths:
        total, count = position_nll(model, stream, length=length, pad_id=tokenizer.pad_id)
        result["ppl"][str(length)] = perplexity(total, count)
        result["by_position"][str(length)] = [
            {"start": a, "end": b, "ppl": perplexity(total[a:b], count[a:b])} for a, b in spans(length, TRAIN_BLOCK)]
    return result


def run_scheme(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train one scheme from scratch (its run directory replaced), then evaluate it at every length."""
    recipe = scheme_recipe(kind, args)
    run = Path(recipe.out_dir)
    state, train_s = train_fresh(recipe, progress=not args.no_progress)
    return {"valid_loss_at_train_length": state["metrics"]["valid_loss"], "train_s": train_s, "run": str(run),
            **evaluate_run(run, args)}


# --- report -------------------------------------------------------------------------------------------


def note(kind: str, max_len: int) -> str:
    return NOTES[kind].format(train=TRAIN_BLOCK, max_len=max_len, max_len_1=max_len - 1)


def markdown(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    lengths, max_len = info["lengths"], max(info["lengths"])
    lines = [f"Trained {info['steps']} steps at context {TRAIN_BLOCK} (max_len {max_len}); per-character "
             f"perplexity on the first {info['eval_chars']:,} characters of Romans, cut into non-overlapping "
             "blocks of L; the mean is over all positions of each block (early positions have short context "
             "whatever L is).", "",
             "| positions | " + " | ".join(f"ppl@{n}" for n in lengths) + " | note |",
             "|---|" + "---:|" * len(lengths) + "---|"]
    for r in rows:
        if "error" in r:
            message = r["error"].replace("|", "\\|")
            lines.append(f"| {r['positions']} |" + " |" * len(lengths) + f" failed: {message} |")
            continue
        cells = " | ".join(f"{r['ppl'][str(n)]:.3f}" for n in lengths)
        lines.append(f"| {r['positions']} | {cells} | {note(r['positions'], max_len)} |")
    done = [r for r in rows if "error" not in r]
    if done:
        parts = done[0]["by_position"][str(max_len)]
        lines += ["", f"By position within the blocks of {max_len} (positions < {TRAIN_BLOCK} were trained):", "",
                  "| positions | " + " | ".join(f"{p['start']}..{p['end'] - 1}" for p in parts) + " |",
                  "|---|" + "---:|" * len(parts)]
        for r in done:
            lines.append(f"| {r['positions']} | "
                         + " | ".join(f"{p['ppl']:.3f}" for p in r["by_position"][str(max_len)]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = each(args.positions, lambda kind: run_scheme(kind, args), key="positions")
    info = {"args": vars(args),
            "steps": args.steps, "lengths": args.lengths, "eval_chars": args.eval_chars,
            "train_block": TRAIN_BLOCK, "model": MODEL,
            "overrides": shared_overrides(args.config, steps=args.steps, max_len=max(args.lengths), quick=args.quick),
            "threads": torch.get_num_threads(), "machine": f"{platform.machine()} CPU", "torch": torch.__version__}
    table = markdown(rows, info)
    print(table)
    write_results(args.out, info, rows, table)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
