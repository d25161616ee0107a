"""Translation commands:

    tformer translate --checkpoint DIR [--input F] [--output F] [--truncate] [--beam N] [--lenpen X]
                      [--batch-size N]
    tformer evaluate --checkpoint DIR [--split test] [--limit N] [--beam N] [--lenpen X] [--batch-size N]
    tformer demo CONFIG.yaml [key=value ...]

Decoding settings not given come from the run's recipe.yaml beside the checkpoint
(`tasks.translation.run_recipe`), else the defaults. Input is read by `data.lines.read_lines` (one sentence a
line, split at "\n" only) and the translations written one a line by `files.write_output`, which writes a
FIFO, a pipe (`--output >(cmd)`) or a symbolic link's target in place and a regular file atomically.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tformer.cli import options


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate lines (stdin to stdout, or files)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--input", help="file of source sentences, one a line (default, or -: stdin)")
    p.add_argument("--output", help="file for the translations, one a line (default: stdout)")
    p.add_argument("--truncate", action="store_true",
                   help="translate the first max_len tokens of a longer sentence (default: refuse it)")
    add_decode_args(p)
    p.set_defaults(run=cmd_translate)

    p = sub.add_parser("evaluate", help="translate a split and print sacrebleu BLEU and chrF")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--split", default="test", choices=("train", "valid", "test"))
    p.add_argument("--limit", type=options.integer(), default=None, help="score only the first N sentences")
    add_decode_args(p)
    p.set_defaults(run=cmd_evaluate)

    p = sub.add_parser("demo", help="train a translator, then score it on the test split")
    p.add_argument("config", help="YAML recipe, e.g. configs/demo.yaml")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in OUT_DIR")
    p.set_defaults(run=cmd_demo)


def add_decode_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beam", type=options.integer(), default=None, help="beam size (1 = greedy); default: the recipe's")
    p.add_argument("--lenpen", type=options.real(), default=None, help="length penalty exponent (a finite number)")
    p.add_argument("--batch-size", type=options.integer(), default=None, help="sentences per decoding batch")
    p.add_argument("--int8", action="store_true", help=options.INT8_HELP)


def decode_args(args: argparse.Namespace) -> dict:
    return {"beam": args.beam, "lenpen": args.lenpen, "batch_size": args.batch_size}


def int8(args: argparse.Namespace) -> str | None:
    return "int8" if args.int8 else None


def cmd_translate(args: argparse.Namespace) -> int:
    from tformer.data.lines import check_writable, format_lines, read_lines, source_name
    from tformer.files import write_output
    from tformer.tasks.base import load_checkpoint
    from tformer.tasks.translation import decode_config, run_recipe, translate

    if args.output:  # refuse an output that cannot be written before decoding, not after
        check_writable(args.output, what="--output")
    decode = decode_config(run_recipe(args.checkpoint), **decode_args(args))
    model, _, tokenizer = load_checkpoint(args.checkpoint, command="translate", quantization=int8(args))
    hyps = translate(model, tokenizer, read_lines(args.input), decode, truncate=args.truncate,
                     where=source_name(args.input))
    text = format_lines(hyps)
    if args.output:
        write_output(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from tformer.tasks.translation import decode_config, evaluate_checkpoint, run_recipe

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit={args.limit} must be a positive integer")
    recipe = run_recipe(args.checkpoint, command="evaluate", required=True)
    decode = decode_config(recipe, **decode_args(args))
    scores, pairs, _ = evaluate_checkpoint(args.checkpoint, recipe.data, args.split, decode, limit=args.limit,
                                           progress=True, quantization=int8(args))
    print(f"{args.split}: {len(pairs)} sentences, beam {decode.beam}, lenpen {decode.lenpen}")
    print(scores)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tformer.tasks import load_recipe
    from tformer.tasks.translation import evaluate_checkpoint, save_test_results, train_translation
    from tformer.training.loop import stop_summary

    recipe = load_recipe(args.config, args.overrides)
    print(f"training {recipe.model.preset} {recipe.data.src}->{recipe.data.tgt} for up to "
          f"{recipe.train.time_budget_min} min / {recipe.train.max_steps} steps; run directory {recipe.out_dir}")
    start = time.perf_counter()
    state = train_translation(recipe, overwrite=args.overwrite)
    stopped = stop_summary(state)
    print(stopped)
    checkpoint = Path(recipe.out_dir) / "best"
    scores, pairs, hyps = evaluate_checkpoint(checkpoint, recipe.data, "test", recipe.decode, progress=True)
    print(f"\ntest ({len(pairs)} sentences, beam {recipe.decode.beam}):\n{scores}\n")
    for i in range(0, len(pairs), max(1, len(pairs) // 5))[:5]:
        source, reference = pairs[i]
        print(f"source:    {source}\nreference: {reference}\ntformer:   {hyps[i]}\n")
    saved = save_test_results(Path(recipe.out_dir), "test", scores, hyps, state)
    print(f"test {scores.brief()}; training {stopped}; total {(time.perf_counter() - start) / 60:.1f} min; "
          f"results in {saved}")
    return 0
