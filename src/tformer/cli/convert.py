"""`tformer convert --from-hf DIR --out DIR` and `tformer convert --to-hf CHECKPOINT --out DIR`: Hugging
Face checkpoints in and out (`tformer.interop`), each with its tokenizer where there is one.
`tformer convert --to-ct2 CHECKPOINT --out DIR [--quantization int8]`: a CTranslate2 model
(`tformer.interop.ct2`, needs the `[ct2]` extra)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from tformer.cli import options
from tformer.errors import UserError


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="Hugging Face checkpoints in and out; CTranslate2 models out")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--from-hf", metavar="DIR", help="a local Hugging Face model directory to import")
    group.add_argument("--to-hf", metavar="CHECKPOINT", help="a tformer checkpoint to export")
    group.add_argument("--to-ct2", metavar="CHECKPOINT", help="a tformer checkpoint to export for CTranslate2")
    p.add_argument("--out", required=True, help="output directory (a symbolic link: its target is written)")
    p.add_argument("--quantization", metavar="TYPE", type=options.text,
                   help="with --to-ct2: the weights' type, e.g. int8 or float16 (default float32)")
    p.set_defaults(run=cmd_convert)


def cmd_convert(args: argparse.Namespace) -> int:
    from tformer.files import check_output_name
    from tformer.interop import checkpoint_to_hf, from_hf
    from tformer.interop.hf import tokenizer_file

    if args.quantization is not None and not args.to_ct2:
        raise UserError(f"--quantization {args.quantization} applies to --to-ct2 only")
    check_output_name(args.out, what="--out", folder=True)  # what is there: each writer's own check
    if args.to_ct2:
        from tformer.interop.ct2 import checkpoint_to_ct2

        model = checkpoint_to_ct2(args.to_ct2, args.out, quantization=args.quantization)
        weights = args.quantization or "float32"
        print(f"exported {type(model).__name__} from {args.to_ct2} to {args.out} (CTranslate2, {weights} weights)")
    elif args.from_hf:
        from tformer.training.checkpoint import save_checkpoint  # writing one; reading needs no training

        model, config = from_hf(args.from_hf)
        tokenizer = tokenizer_file(args.from_hf)  # kept beside the weights, in the same atomic write
        save_checkpoint(Path(args.out), model=model, config=config,
                        tokenizer=CopiedFile(tokenizer) if tokenizer else None)
        print(f"imported {type(model).__name__} from {args.from_hf} into {args.out}")
    else:
        model = checkpoint_to_hf(args.to_hf, args.out)  # with its tokenizer, if transformers can read it
        print(f"exported {type(model).__name__} from {args.to_hf} to {args.out}")
    return 0


class CopiedFile:
    """A tokenizer for `save_checkpoint` that is just a file to copy into the checkpoint's tokenizer/."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def save(self, directory: Path) -> None:  # into the checkpoint's temporary folder (files.atomic_directory)
        shutil.copy(self.path, directory / self.path.name)
