"""`tformer classify --checkpoint DIR [-i F] [-o F] [--top N] [--truncate] [--device D] [--dtype T]`: each line
of text's most likely labels, as `label<TAB>probability` pairs on one line (`inference.top_labels`); one
line out for each line in, each answered as it arrives from a pipe (`cli.shared.answer_lines`)."""

from __future__ import annotations

import argparse

from tformer.cli import options, shared

BATCH = 64  # texts classified together


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("classify", help="label lines with a BERT classifier (stdin or a file)")
    p.add_argument("--checkpoint", required=True, help="a BERT classifier's checkpoint directory")
    shared.add_input(p, "texts")
    shared.add_output(p, "labels with their probabilities")
    p.add_argument("--top", type=options.integer(), default=1, help="print the N most likely labels of each line")
    p.add_argument("--truncate", action="store_true",
                   help="classify the first pieces of a text longer than the context (default: refuse it)")
    shared.add_placement(p, int8=True)
    p.set_defaults(run=cmd_classify)


def cmd_classify(args: argparse.Namespace) -> int:
    from tformer.data.lines import source_name
    from tformer.inference import check_top, load, top_labels

    check_top(args.top, what="--top")  # before the load
    shared.check_output(args.output, inputs=[args.input])
    loaded = load(args.checkpoint, command="classify", **shared.placement(args))
    check_unknown = shared.unknown_warner(loaded.tokenizer)

    def answer(lines: list[str], first: int) -> list[str]:
        results = top_labels(loaded.model, loaded.tokenizer, lines, top=args.top, truncate=args.truncate,
                             where=source_name(args.input), first_line=first)
        check_unknown(lines)  # once the batch passed its checks: a refusal is the one line
        return ["\t".join(f"{name}\t{p:.4f}" for name, p in labels) for labels in results]

    shared.answer_lines(args, answer, max_batch=BATCH)
    return 0
