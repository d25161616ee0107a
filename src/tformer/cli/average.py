"""`tformer average CHECKPOINT CHECKPOINT... --out DIR [--overwrite]`: one checkpoint whose weights are the
mean of several checkpoints of one run (`tformer.training.average`): same model config and tokenizer,
checked before anything is read further. `train.average_last: N` does the same during training."""

from __future__ import annotations

import argparse
from pathlib import Path

from tformer.errors import UserError


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("average", help="average the weights of checkpoints of one run into a new checkpoint")
    p.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT", help="two or more checkpoint directories")
    p.add_argument("--out", required=True, help="the averaged checkpoint's directory")
    p.add_argument("--overwrite", action="store_true", help="replace a checkpoint already at --out")
    p.set_defaults(run=cmd_average)


def cmd_average(args: argparse.Namespace) -> int:
    from tformer.files import check_output_name
    from tformer.training.average import average_checkpoints

    check_output_name(args.out, what="--out", folder=True)
    if Path(args.out).exists() and not args.overwrite:
        raise UserError(f"--out {args.out} already exists; add --overwrite to replace it")
    paths = average_checkpoints(args.checkpoints, args.out)
    print(f"averaged {len(paths)} checkpoints into {args.out}")
    return 0
