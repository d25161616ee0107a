"""`tformer classify --checkpoint DIR [--input F] [--top N] [--truncate]`: each line of text's most likely
labels, as `label<TAB>probability` pairs on one line (`tasks.classify.top_labels`); one line out for each line
in (`data.lines.read_lines`)."""

from __future__ import annotations

import argparse
import sys

from tformer.cli import options


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("classify", help="label lines with a BERT classifier (stdin or a file)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--input", help="file of texts, one a line (default, or -: stdin)")
    p.add_argument("--top", type=options.integer(), default=1, help="print the N most likely labels of each line")
    p.add_argument("--truncate", action="store_true",
                   help="classify the first pieces of a text longer than the context (default: refuse it)")
    p.add_argument("--int8", action="store_true", help=options.INT8_HELP)
    p.set_defaults(run=cmd_classify)


def cmd_classify(args: argparse.Namespace) -> int:
    from tformer.data.lines import format_lines, read_lines, source_name
    from tformer.tasks.base import load_checkpoint
    from tformer.tasks.classify import top_labels

    if args.top < 1:
        raise ValueError(f"--top={args.top} must be a positive integer")
    model, _, tokenizer = load_checkpoint(args.checkpoint, command="classify",
                                          quantization="int8" if args.int8 else None)
    results = top_labels(model, tokenizer, read_lines(args.input), top=args.top, truncate=args.truncate,
                         where=source_name(args.input))
    sys.stdout.write(format_lines("\t".join(f"{name}\t{p:.4f}" for name, p in labels) for labels in results))
    return 0
