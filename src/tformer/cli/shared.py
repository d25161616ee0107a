"""The options the commands share, spelled and read the same way everywhere:

    -i/--input FILE    the text a command reads, one item a line; - (the default) is stdin
    -o/--output FILE   where its text goes, one result a line; - (the default) is stdout
    --device D         where the model runs: auto (a GPU if torch sees one), cpu, cuda, cuda:N or mps
    --dtype T          what its weights and activations are: float32, bfloat16 or float16
    --draft D [--draft-tokens K]
                       a small GPT proposing K tokens a round for a GPT to verify (speculative decoding)

and the help formatter every parser uses, which ends each option's help with its default (unless the help
already says it, or there is none to show). `answer_lines` runs a command that answers each line of its
input (translate, classify): line by line as the lines arrive from a pipe, whole from a file.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from tformer.cli import options
from tformer.errors import UserError

if TYPE_CHECKING:
    from tformer.decoding.speculative import Draft
    from tformer.inference import Loaded
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


def add_input(p: argparse.ArgumentParser, what: str, *, positional: bool = False) -> None:
    """-i/--input; a command without a positional FILE (`positional`) tells a file given as one to use -i."""
    p.add_argument("-i", "--input", default=STD, metavar="FILE", help=f"{what}, one a line; - for stdin")
    if not positional:
        p.set_defaults(unknown_hint=input_hint)


def input_hint(extras: Sequence[str]) -> str | None:
    """For a command that reads its input from -i or stdin: a file given as an argument is shown the way."""
    given = next((a for a in extras if not a.startswith("-")), None)
    return None if given is None else f"give the input as -i {given} or < {given}"


def overrides_hint(extras: Sequence[str]) -> str | None:
    """For a command that takes a recipe's `key=value` overrides (train, demo): a setting spelt as an option
    (`--time-budget 2`, `--max-steps=10`) is shown the override it likely means
    (`tasks.meant_key`)."""
    from tformer.tasks import meant_key

    for i, arg in enumerate(extras):
        name, sep, value = arg.partition("=")
        if not name.startswith("--"):
            continue
        if not sep and i + 1 < len(extras) and not extras[i + 1].startswith("-"):
            value = extras[i + 1]
        key = meant_key(name)
        if key is not None:
            return f"a recipe's settings are key=value overrides: did you mean {key}={value or '...'}?"
    return None


def add_output(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("-o", "--output", default=STD, metavar="FILE",
                   help=f"{what}, one a line; - for stdout (a file is written whole, atomically, at the end)")


def add_settings(p: argparse.ArgumentParser, cls: type, *, default: str = "{}") -> None:
    """One flag for each field of a settings class (`decoding.settings`): --beam for `beam`, --no-stop for a
    field `stop` that is on by default; its help from the field, its default None (not given: the settings'
    own, or a run's recipe's), `default` saying which (formatted with the field's default)."""
    from tformer.decoding.settings import settings_fields

    for f, kind in settings_fields(cls):
        meta, flag = f.metadata, "--" + f.name.replace("_", "-")
        if kind is bool:
            p.add_argument(f"--no-{f.name.replace('_', '-')}", dest=f.name, action="store_const", const=False,
                           default=None, help=f"do not {meta['help']}")
            continue
        base = kind if kind in (int, float, str) else next(t for t in typing.get_args(kind) if t is not type(None))
        bounds = {k: meta[k] for k in ("low", "high") if meta[k] is not None}
        parse = {int: options.integer(**bounds), float: options.real(), str: str}[base]
        shown = f"none: {meta['none']}" if f.default is None else f.default
        metavar = meta["metavar"] or {int: "N", float: "X", str: "WORD"}[base]
        p.add_argument(flag, type=parse, default=None, metavar=metavar,
                       help=f"{meta['help']} (default: {default.format(shown)})")


def settings_given(args: argparse.Namespace, cls: type) -> dict:
    """The settings of `cls` given on the command line (`add_settings`'s flags; those not given are None)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}


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


def add_draft(p: argparse.ArgumentParser) -> None:
    """--draft and --draft-tokens of a command that writes with a GPT (generate, serve)."""
    p.add_argument("--draft", metavar="DIR", default=None,
                   help="a small GPT checkpoint with the target's tokenizer: it proposes tokens that the model "
                        "verifies in one pass (speculative decoding; greedy text unchanged, sampled text drawn "
                        "from the same distribution; default: none, no draft)")
    p.add_argument("--draft-tokens", type=options.integer(low=1), default=None, metavar="K",
                   help="tokens the draft proposes a round (default: 4; needs --draft)")


def check_draft(args: argparse.Namespace) -> None:
    """--draft-tokens without --draft: refused before anything loads."""
    if args.draft_tokens is not None and args.draft is None:
        raise UserError(f"--draft-tokens {args.draft_tokens} needs --draft DIR (a draft checkpoint to propose the "
                         "tokens)")


def draft_tokens(args: argparse.Namespace) -> int:
    """--draft-tokens, or its default."""
    from tformer.decoding.speculative import DRAFT_TOKENS

    return DRAFT_TOKENS if args.draft_tokens is None else args.draft_tokens


def draft_of(args: argparse.Namespace, loaded: Loaded) -> Draft | None:
    """The --draft checkpoint loaded for `loaded` (`inference.load_draft`), or None without --draft."""
    if args.draft is None:
        return None
    from tformer.inference import load_draft

    return load_draft(args.draft, loaded, tokens=draft_tokens(args))


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


def check_output(path: str | None, *, what: str = "--output", inputs: Sequence[str | None] = ()) -> None:
    """Refuse an output file that cannot be written before any work starts, not after
    (`files.check_output`: - is stdout; an empty name, a directory, a missing folder/, one of the command's
    `inputs` are refused)."""
    from tformer.files import check_output

    if path is not None:
        check_output(path, what=what, inputs=inputs)


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


__all__ = ["STD", "HelpFormatter", "add_input", "add_no_progress", "add_output", "add_placement", "add_settings",
           "answer_lines", "check_output", "input_hint", "is_std", "overrides_hint", "placement", "progress",
           "unknown_warner", "warn", "write_text"]
