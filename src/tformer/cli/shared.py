"""The options the commands share, spelled and read the same way everywhere:

    -i/--input FILE    the text a command reads, one item a line; - (the default) is stdin
    -o/--output FILE   where its text goes, one result a line; - (the default) is stdout
    --device D         where the model runs: auto (a GPU if torch sees one), cpu, cuda, cuda:N or mps
    --dtype T          what its weights and activations are: float32, bfloat16 or float16

and the help formatter every parser uses, which ends each option's help with its default (unless the help
already says it, or there is none to show). `answer_lines` runs a command that answers each line of its
input (translate, classify): line by line as the lines arrive from a pipe, whole from a file.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from tformer.cli import options

if TYPE_CHECKING:
    from tformer.tokenization import Tokenizer

STD = "-"


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, with ` (default: X)` after every option's help that has a default worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS) and action.option_strings
        if not shown or "default" in text:
            return text
        return f"{text} (default: %(default)s)"


def add_input(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("-i", "--input", default=STD, metavar="FILE", help=f"{what}, one a line; - for stdin")


def add_output(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("-o", "--output", default=STD, metavar="FILE",
                   help=f"{what}, one a line; - for stdout (a file is written whole, atomically, at the end)")


def add_repetition(p: argparse.ArgumentParser, *, default: str) -> None:
    """--no-repeat-ngram-size and --repetition-penalty (`decoding.Repetition`, which checks their range, so
    the command line, a recipe and the server refuse the same values in the same words)."""
    p.add_argument("--no-repeat-ngram-size", type=options.integer(), default=None, metavar="N",
                   help=f"never write the same N tokens twice (0 = off; default: {default})")
    p.add_argument("--repetition-penalty", type=options.real(), default=None, metavar="X",
                   help="make each token already written less likely, as CTRL: a number >= 1 (1 = off; "
                        f"1.2 is usual; default: {default})")


def add_placement(p: argparse.ArgumentParser, *, int8: bool = False) -> None:
    """--device and --dtype of a command that runs a model, and --int8 where the command can use it."""
    p.add_argument("--device", default="auto",
                   help="where the model runs: auto (a GPU if torch sees one; the CPU with --int8), cpu, cuda, "
                        "cuda:N or mps")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                   help="the model's floating-point type (the half types halve memory; float16 overflows more)")
    if int8:
        p.add_argument("--int8", action="store_true", help=options.INT8_HELP)


def placement(args: argparse.Namespace) -> dict[str, str | None]:
    """The keyword arguments of `inference.load` that place (and maybe quantize) the model."""
    quantization = "int8" if getattr(args, "int8", False) else None
    return {"device": args.device, "dtype": args.dtype, "quantization": quantization}


def add_no_progress(p: argparse.ArgumentParser, *, what: str = "no progress bar") -> None:
    """--no-progress, of a command that shows a progress bar (`progress` decides whether it does); `what`:
    its help."""
    p.add_argument("--no-progress", action="store_true",
                   help=f"{what} (default: a bar on stderr when it is a terminal)")


def progress(args: argparse.Namespace) -> bool:
    """Whether a command shows its progress bar: only on a terminal (stderr), so that a log or a pipe never
    fills with its redrawn lines, and not with --no-progress. Every command with a bar asks here."""
    return not getattr(args, "no_progress", False) and sys.stderr.isatty()


def warn(message: str) -> None:
    """`tformer: warning: message`, one line on stderr: something the user should know that stops nothing."""
    print(f"tformer: warning: {message}", file=sys.stderr, flush=True)


def unknown_warner(tokenizer: Tokenizer) -> Callable[[Sequence[str]], None]:
    """A function to call with each batch of input texts: the first time the texts so far hold tokens the
    model's tokenizer cannot represent, it warns once (`inference.unknown_tokens`, as the server's answers
    say it in `warnings`)."""
    from tformer.inference import Unknown, unknown_tokens

    seen, warned = Unknown(count=0, total=0, examples=()), False

    def check(texts: Sequence[str]) -> None:
        nonlocal seen, warned
        if warned:
            return
        seen = seen + unknown_tokens(tokenizer, texts)
        if (line := seen.warning()) is not None:
            warn(line)
            warned = True

    return check


def is_std(path: str | None) -> bool:
    return path is None or path == STD


def check_output(path: str | None, *, what: str = "--output") -> None:
    """Refuse an output file that cannot be written before any work starts, not after
    (`files.check_output`: - is stdout; an empty name, a directory, a missing folder/ are refused)."""
    from tformer.files import check_output

    if path is not None:
        check_output(path, what=what)


def write_text(path: str | None, text: str) -> None:
    """`text` to stdout (flushed), or to the file `path`: both by `files.write_output`, the one writer of
    what a user names (atomic for a regular file; a link's target, a FIFO or a device in place)."""
    from tformer.files import write_output

    write_output(STD if path is None else path, text)


def answer_lines(args: argparse.Namespace, answer: Callable[[list[str], int], Iterable[str]], *,
                 max_batch: int) -> None:
    """Run `answer(lines, number of the first line)` over the batches of `--input`
    (`data.lines.line_batches`: each batch as it arrives from a pipe or terminal, a file whole) and write
    one result a line: to stdout after each batch, so that a line in gets its answer at once, or to
    `--output` once all are answered (a file is never left half-written). A line longer than the model's
    context is refused naming --truncate, the option of the commands that answer lines (translate, classify),
    where the Python API names `truncate=True`."""
    from tformer.data.lines import LineTooLong, format_lines, line_batches

    first, done = 1, []
    for lines in line_batches(args.input, max_batch=max_batch):
        try:
            text = format_lines(answer(lines, first))
        except LineTooLong as e:
            raise e.spelt("--truncate") from None
        first += len(lines)
        if is_std(args.output):
            write_text(STD, text)
        else:
            done.append(text)
    if not is_std(args.output):
        write_text(args.output, "".join(done))


__all__ = ["STD", "HelpFormatter", "add_input", "add_no_progress", "add_output", "add_placement", "add_repetition",
           "answer_lines", "check_output", "is_std", "placement", "progress", "unknown_warner", "warn", "write_text"]
