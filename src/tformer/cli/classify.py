"""`tformer classify --checkpoint DIR [--input F] [--top N]`: each line of text's most likely labels, as
`label<TAB>probability` pairs on one line (`tasks.classify.top_labels`)."""

from __future__ import annotations

import argparse


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("classify", help="label lines with a BERT classifier (stdin or a file)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--input", help="file of texts, one a line (default: stdin)")
    p.add_argument("--top", type=int, default=1, help="print the N most likely labels of each line")
    p.set_defaults(run=cmd_classify)


def cmd_classify(args: argparse.Namespace) -> int:
    from tformer.data.lines import read_lines
    from tformer.tasks.base import load_checkpoint
    from tformer.tasks.classify import top_labels

    if args.top < 1:
        raise ValueError(f"--top={args.top} must be a positive integer")
    model, _, tokenizer = load_checkpoint(args.checkpoint, command="classify")
    for labels in top_labels(model, tokenizer, read_lines(args.input), top=args.top):
        print("\t".join(f"{name}\t{p:.4f}" for name, p in labels))
    return 0
