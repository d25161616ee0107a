"""The `tformer` command.

    tformer --version
    tformer train CONFIG.yaml|NAME [key=value ...] [--resume | --overwrite] [--no-progress] [--tensorboard]
    tformer average CHECKPOINT CHECKPOINT... --out DIR [--overwrite]
    tformer translate --checkpoint DIR [-i F] [-o F] [--truncate] [--beam N] [--lenpen X] [--batch-size N]
    tformer evaluate --checkpoint DIR [--split test] [--limit N] [--json] [--hyp-out F] [-o F] [--beam N]
                     [--no-progress]
    tformer demo CONFIG.yaml|NAME [key=value ...] [--overwrite] [--no-progress]
    tformer generate --checkpoint DIR [--prompt TEXT ...] [-i F] [-o F] [-n N] [--json] [--max-new-tokens N]
                     [--temperature T] [--top-k K] [--top-p P] [--seed S] [--no-stop]
    tformer score --checkpoint DIR [FILE | -i F] [-o F] [--per-token]
    tformer classify --checkpoint DIR [-i F] [-o F] [--top N] [--truncate]
    tformer convert --from-hf DIR --out DIR   |   tformer convert --to-hf|--to-ct2 CHECKPOINT --out DIR
    tformer plot attention --checkpoint DIR --text TEXT [--target TEXT] [--part P] [--layer L] [--head H] [-o F]
    tformer plot positions [--max-len N] [--d-model D] [--heads H] [--out-dir DIR] [--format png|svg]
    tformer plot curves RUN_DIR [RUN_DIR ...] [-o FILE]
    tformer plot complexity [--results docs/bench/complexity/results.json] [--out-dir DIR] [--format png|svg]
    tformer report RUN_DIR [-o FILE]
    tformer serve --checkpoint DIR [--host H] [--port P] [--device D] [--max-batch N] [--batch-wait-ms MS] ...
    tformer recipes list   |   tformer recipes copy NAME DEST [--overwrite]

Every inference command (translate, evaluate, generate, score, classify, plot attention) also takes
`--device` and `--dtype`; `-i`/`-o` take `-` for stdin/stdout (`cli.shared`, docs/cli.md). A command's options
and its arguments (`key=value` overrides, files) come in any order. A progress bar (train, demo, evaluate) is
drawn on a terminal only, and never with `--no-progress` (`cli.shared.progress`).

One module per group of commands registers its commands and turns their arguments into calls of the
library, which checks and interprets prompts, files and decoding settings (so the Python API gets the same
checks): `train` (train), `translate` (translate, evaluate, demo), `lm` (generate, score), `classify`,
`convert`, `viz` (plot, report), `serve`, `recipes` (list, copy). The library is imported inside each command,
so `--help` stays quick.

A user error (`tformer.errors.UserError`: bad config, bad file, bad value; or an OSError: a path the system
refuses, a full disk) prints one line `tformer: error: ...` and exits with 2; any other exception is a bug of
the package and shows its traceback (exit 1), except memory running out (`errors.out_of_memory`), one line naming the
step it ran out in, and exit 2. Every write names its file (`tformer.ioerrors`), so a full disk or a file-size
limit (SIGXFSZ is ignored, so the write fails with EFBIG) reads `PATH: REASON`.
Numbers and text arguments are typed by `cli.options` (finite, within range, valid UTF-8), so a bad one is
refused while the arguments are parsed, before anything loads or prints.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any, NoReturn

from tformer.cli import average, classify, convert, lm, recipes, serve, train, translate, viz
from tformer.cli.shared import HelpFormatter
from tformer.errors import UserError, is_allocation_failure, out_of_memory, too_low_for_torch

EXIT_USER_ERROR = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a tool that SIGPIPE ended
GROUPS = (train, translate, lm, classify, convert, average, viz, serve, recipes)  # the order `--help` lists them in


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0), or a usage error already printed as one line (2)
        return e.code if isinstance(e.code, int) else EXIT_USER_ERROR
    ignore_file_size_signal()
    try:
        code = args.run(args)
        _flush_stdout()  # what print() left buffered fails here, named, not in Python's exit
        return code
    except BrokenPipeError:  # the reader left (`tformer ... | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return EXIT_BROKEN_PIPE
    except (UserError, OSError) as e:  # what the user can fix; anything else is our bug and shows its traceback
        if isinstance(e, OSError) and e.filename and e.strerror:  # "path: Permission denied", not "[Errno 13] ..."
            message = f"{e.filename}: {e.strerror}"
        else:
            message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"tformer: error: {message}", file=sys.stderr)
        return EXIT_USER_ERROR
    except (MemoryError, RuntimeError) as e:  # memory ran out: one line naming the step; other errors are bugs
        if not is_allocation_failure(e):
            raise
        print(f"tformer: error: {out_of_memory(e)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except ImportError as e:  # a command's import of torch under a memory limit too low for its libraries
        if (message := too_low_for_torch(e)) is None:
            raise
        print(f"tformer: error: {message}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("tformer: interrupted", file=sys.stderr)
        return 130


def ignore_file_size_signal() -> None:
    """A write past the file-size limit (`ulimit -f`, RLIMIT_FSIZE) fails with EFBIG, an OSError that names its
    file, instead of the signal SIGXFSZ killing the process with a core dump and no word on which file."""
    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _flush_stdout() -> None:
    from tformer.files import STDOUT_NAME
    from tformer.ioerrors import writing

    if sys.stdout is not None and not sys.stdout.closed:
        with writing(STDOUT_NAME):
            sys.stdout.flush()


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error printed as every other user error is: one line `tformer: error: ...`
    (no usage block), exit code 2, and each command's options and arguments in any order. Subcommand parsers
    inherit it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)  # every option's help ends with its default
        super().__init__(*args, **kwargs)
        self._intermixing = False

    def error(self, message: str) -> NoReturn:
        print(f"tformer: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """argparse's, with a word on what unrecognized arguments were likely meant as: a command sets
        `unknown_hint` (its parser's default), a function of the arguments left over that returns the
        hint, or None."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            hint = getattr(parsed, "unknown_hint", None)
            said = hint(extras) if hint is not None else None
            self.error(f"unrecognized arguments: {' '.join(extras)}" + (f"; {said}" if said else ""))
        return parsed

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        """A command's options and positional arguments in any order (`tformer train demo --resume
        out_dir=runs/x`): a parser without subcommands parses intermixed; `tformer` itself, which has
        them, as argparse does (argparse cannot intermix subcommands)."""
        if self._intermixing or any(a.nargs == argparse.PARSER for a in self._actions):
            return super().parse_known_args(args, namespace)
        self._intermixing = True  # argparse's intermixed parse calls this method for each of its two passes
        try:
            return super().parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tformer", description="The Transformer family end to end.")
    parser.add_argument("--version", action="version", version=f"tformer {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_commands(sub)
    return parser


def installed_version() -> str:
    """The version of the installed distribution (its metadata), as pip reports it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tformer")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from tformer import __version__

        return f"{__version__} (not installed)"


__all__ = ["build_parser", "installed_version", "main"]
