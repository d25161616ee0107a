"""User text, one item a line: the one reader of a file (or stdin) of sentences to translate, texts to
classify, lines to score; the one check of a line against a model's context; the one writer of results one a
line; and the check, made before a long job starts, that the file results go to can be written. Each fails
with a ValueError of one line naming the file (or stdin), the line and what is wrong.

One line in, one line out: a line ends at "\\n" (a "\\r" before it, a Windows line end, is dropped), and at
nothing else. `str.splitlines` would also split at U+2028, U+2029, U+0085, form feed, vertical tab and the
separators \\x1c-\\x1e, which appear inside real sentences (PDF extractions, old Mac text), so 3 lines in would
give 6 out. stdin is read as bytes and decoded here, as a file is, so a byte that is not UTF-8 gets the same
message from both, whatever the locale.

A byte-order mark (U+FEFF) that starts a text is no part of it (`normalise_text`): the readers here drop it
from every line, the server from every text it is sent, and the library's inference functions from what they
are given, so "\\ufeffIn the beginning" is answered as "In the beginning" and a line that is only a mark is an
empty line. A U+FEFF inside a text is a zero-width no-break space, and stays.

Every input is read in pieces (`LineReader`), never whole: a line of more than MAX_LINE_BYTES (4 MiB) is
refused once that much of it has come, so /dev/zero is one line refused, not a MemoryError; a bad line stops
the reading after the lines before it, which a command reading a pipe answers first. A line longer than a
model's context at any tokenization (`check_line_chars`, CHARS_PER_TOKEN) is refused before it is tokenized.

Also the one UTF-8 decoder of a user's file (`decode_utf8`, `read_utf8`: every reader in `tformer.data`
calls it) and the one JSON Lines reader (`read_jsonl_records`), so that a bad byte or a bad record line
gets one message, whichever reader meets it:
    FILE:LINE: not valid UTF-8 (byte 0xff at column 7); the text must be UTF-8
    FILE:LINE: not valid JSON (Expecting value at column 1)
    FILE:LINE: expected a JSON object with 'src' and 'tgt', got list
    FILE:LINE: missing field 'tgt'
    FILE:LINE: field 'tgt' must be a string, got int
"""

from __future__ import annotations

import json
import os
import select
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tformer.errors import UserError

STDIN = "stdin"
JSONL_SUFFIXES = (".jsonl", ".ndjson")
BOM = "\ufeff"  # the byte-order mark, U+FEFF
CHUNK = 1 << 16  # bytes read at a time
MAX_LINE_BYTES = 1 << 22  # 4 MiB: the most one line may hold, refused as soon as a line holds more
CHARS_PER_TOKEN = 100  # more characters a token than any tokenizer makes of text, on average over a line


class DataError(UserError):
    """Malformed input data (what the user fixes in the file); the message names the file and line."""


class LineTooLong(UserError):
    """A line longer than the model's context (`check_line_lengths`). The message ends with how to cut such a
    line on purpose, in the caller's words: `truncate=True` for the Python API; the CLI, whose option is
    --truncate, says that instead (`spelt`)."""

    def __init__(self, problem: str, *, cut: str = "truncate=True") -> None:
        super().__init__(f"{problem}; shorten it, or cut it to the context on purpose ({cut})")
        self.problem = problem

    def spelt(self, cut: str) -> LineTooLong:
        """The same refusal, naming `cut` (e.g. "--truncate") as the way to cut the line."""
        return LineTooLong(self.problem, cut=cut)


def source_name(path: str | os.PathLike | None) -> str:
    """How messages name the input: "stdin" for None or "-", else the path."""
    return STDIN if path is None or str(path) == "-" else str(path)


def read_lines(path: str | os.PathLike | None) -> list[str]:
    """The lines of UTF-8 text from the file `path`, or from stdin when it is None or "-", without their
    line ends (see the module docstring). A byte-order mark at the start of a line is dropped
    (`normalise_text`). The input is read in pieces, never whole (`LineReader`): a line of more than
    MAX_LINE_BYTES is refused before it is read to its end."""
    name = source_name(path)
    if name == STDIN:
        if sys.stdin is None:  # started with stdin closed (`<&-`)
            raise UserError("there is no stdin to read; give --input FILE")
        if not hasattr(sys.stdin, "buffer"):  # replaced by a text stream in memory
            return _all_lines(iter([sys.stdin.read().encode("utf-8")]), where=name)
        return _all_lines(iter(lambda: sys.stdin.buffer.read(CHUNK), b""), where=name)
    try:
        with open(path, "rb") as f:
            return _all_lines(iter(lambda: f.read(CHUNK), b""), where=name)
    except FileNotFoundError:
        raise UserError(f"input file {path} does not exist") from None
    except IsADirectoryError:
        raise UserError(f"input file {path} is a directory; give a file of text, one item a line") from None


def _all_lines(chunks: Iterator[bytes], *, where: str) -> list[str]:
    """Every line of the pieces `chunks` of one input; its first bad line raises before any is returned."""
    reader, lines = LineReader(where), []
    for chunk in chunks:
        lines += reader.push(chunk)
        if reader.error is not None:
            raise reader.error
    lines += reader.push(b"", eof=True)
    if reader.error is not None:
        raise reader.error
    return lines


class LineReader:
    """One input's bytes, given piece by piece (`push`), cut into its lines as they become whole: the one
    place a line of user text is cut, decoded and held to MAX_LINE_BYTES, so that a file, a pipe and a
    device (/dev/zero) are read alike, in pieces, and a line is numbered from the start of the input.

    A bad line stops the reading: `push` returns the lines before it and sets `error` (a DataError naming
    `where` and the line), so that a caller that answers as it reads answers them first. Bytes that are not
    UTF-8 are found once their line is whole; a line longer than MAX_LINE_BYTES as soon as that many bytes
    of it have come, without waiting for its end."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.pending = bytearray()  # the start of a line whose "\n" has not come yet
        self.line = 1  # the number of that line
        self.error: DataError | None = None

    def push(self, chunk: bytes, *, eof: bool = False) -> list[str]:
        """The lines `chunk` completes (with `eof`, the input's last line too, without its "\n")."""
        if self.error is not None:
            return []
        end = len(chunk) if eof else chunk.rfind(b"\n") + 1
        if end == 0 and not eof:  # no line ends here: the current line goes on
            self.pending += chunk
            self._check_length(len(self.pending), self.line)
            return []
        whole, rest = bytes(self.pending + chunk[:end]), chunk[end:]
        if not whole:
            return []
        self.pending = bytearray(rest)
        first = whole.find(b"\n")
        if self._check_length(len(whole) if first < 0 else first, self.line):
            return []
        lines, self.error = _decoded_lines(whole, where=self.where, first_line=self.line)
        self.line += whole.count(b"\n")
        if self.error is None:
            self._check_length(len(self.pending), self.line)
        return lines

    def _check_length(self, n: int, line: int) -> bool:
        """Whether line `line`, of at least `n` bytes, is too long (then `error` says so)."""
        if n > MAX_LINE_BYTES:
            self.error = DataError(f"{self.where}:{line}: the line is longer than {MAX_LINE_BYTES} bytes "
                                   f"({_size(MAX_LINE_BYTES)}), the most a line may hold; give text, one item a line")
        return self.error is not None


def _decoded_lines(raw: bytes, *, where: str, first_line: int) -> tuple[list[str], DataError | None]:
    """The lines of `raw`, whole lines of an input starting at line `first_line` (`decode_utf8`, `text_lines`),
    and the DataError of the first line that is not UTF-8 (None if all are): the lines returned are those
    before it."""
    try:
        return text_lines(decode_utf8(raw, where=where, first_line=first_line)), None
    except DataError as error:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            good = raw[: raw.rfind(b"\n", 0, e.start) + 1]  # the lines before the bad byte's
        return text_lines(decode_utf8(good, where=where, first_line=first_line)), error


def _size(n: float) -> str:
    """`n` bytes in the largest binary unit that keeps it at least 1: "16 MiB"."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.3g} {unit}" if unit != "bytes" else f"{int(n)} bytes"
        n /= 1024
    raise AssertionError("unreachable")


def normalise_text(text: str) -> str:
    """`text` without the byte-order marks (U+FEFF) it starts with: the one normalisation of a user's text,
    made by the line readers, the server and the library's inference functions alike (all of them, so that
    normalising twice changes nothing). A U+FEFF after the first other character is a zero-width no-break
    space, which is text, and stays."""
    return text.lstrip(BOM)


def decode_utf8(raw: bytes, *, where: str, first_line: int = 1) -> str:
    """`raw`, the bytes of a user's file (or stdin) named `where`, as UTF-8 text, its line ends kept; a
    byte-order mark at the start of the input is dropped. Bytes that are not UTF-8 raise a DataError naming
    `where`, the line, the first bad byte and its column (in bytes, from 1):
    "FILE:LINE: not valid UTF-8 (byte 0xff at column 7); the text must be UTF-8".
    `first_line`: the number of the line `raw` starts with when it is a piece of a longer input cut at line
    ends (one line of a file read line by line; the lines of stdin read so far); only line 1 is the start."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + first_line
        column = e.start - raw.rfind(b"\n", 0, e.start)  # counted from the line's "\n", or from -1 on line 1
        raise DataError(f"{where}:{line}: not valid UTF-8 (byte {raw[e.start]:#04x} at column {column}); "
                        f"the text must be UTF-8") from None
    return text.removeprefix(BOM) if first_line == 1 else text


def existing_file(path: str | os.PathLike) -> Path:
    """`path` as a Path; a DataError "PATH: no such file" if it is not a file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    return path


def read_utf8(path: str | os.PathLike) -> str:
    """The text of the user's file `path` (`existing_file`, `decode_utf8`)."""
    path = existing_file(path)
    return decode_utf8(path.read_bytes(), where=str(path))


def read_jsonl_records(path: str | os.PathLike, *, strings: Sequence[str] = (),
                       values: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each line of the JSON Lines file `path` that is not blank: one JSON
    object a line, the text read by `read_utf8` and cut by `split_lines`. Each object must hold the fields
    `strings`, with strings, and `values`, with any JSON value; other fields are ignored. A DataError naming
    the file and the line otherwise (the formats in the module docstring), raised when that line is reached,
    so that a caller's own checks of the lines before it come first."""
    path = Path(path)
    fields = [repr(field) for field in [*strings, *values]]
    wanted = " and ".join([", ".join(fields[:-1]), fields[-1]] if len(fields) > 1 else fields)  # 'a', 'b' and 'c'
    for number, line in enumerate(split_lines(read_utf8(path)), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}:{number}: not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(record, dict):
            with_fields = f" with {wanted}" if wanted else ""
            raise DataError(f"{path}:{number}: expected a JSON object{with_fields}, got {type(record).__name__}")
        for field in [*strings, *values]:
            if field not in record:
                raise DataError(f"{path}:{number}: missing field {field!r}")
        for field in strings:
            if not isinstance(record[field], str):
                raise DataError(f"{path}:{number}: field {field!r} must be a string, got "
                                f"{type(record[field]).__name__}")
        yield number, record


def line_batches(path: str | os.PathLike | None, *, max_batch: int) -> Iterator[list[str]]:
    """The lines of `path` (as `read_lines` reads them) in batches, for a command that answers as it reads.

    From stdin that is a pipe, a terminal or a device, each line is yielded as soon as it has arrived whole,
    together with the lines already waiting behind it (at most `max_batch`), so that a line written into an
    open pipe is answered before the next one is written; a bad line (not UTF-8, too long) raises once the
    lines before it have been yielded. A file, or stdin redirected from one, is yielded whole in one batch,
    as `read_lines` returns it (so a bad line anywhere fails before any answer)."""
    fd = _live_stdin(path)
    if fd is None:
        yield read_lines(path)
        return
    yield from _live_batches(fd, max_batch=max_batch)


def _live_stdin(path: str | os.PathLike | None) -> int | None:
    """stdin's file descriptor when `path` names stdin and it is a pipe, a socket, a terminal or a device,
    else None."""
    if source_name(path) != STDIN:
        return None
    if sys.stdin is None:  # started with stdin closed (`<&-`)
        raise UserError("there is no stdin to read; give --input FILE")
    try:
        fd = sys.stdin.fileno()
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except (AttributeError, OSError, ValueError):  # replaced by an in-memory stream
        return None
    return None if regular else fd


def _live_batches(fd: int, *, max_batch: int) -> Iterator[list[str]]:
    """Batches of the whole lines read from `fd` (`LineReader`): a blocking read for the first bytes, then
    what `select` says is there without waiting, until `max_batch` lines are whole. The line numbers of an
    error count from the start of stdin; the lines before a bad one are yielded before it raises."""
    reader = LineReader(STDIN)
    eof = False
    while not eof:
        chunk = os.read(fd, CHUNK)
        eof = not chunk
        lines = reader.push(chunk, eof=eof)
        while (not eof and reader.error is None and len(lines) < max_batch
               and select.select([fd], [], [], 0)[0]):
            chunk = os.read(fd, CHUNK)
            eof = not chunk
            lines += reader.push(chunk, eof=eof)
        for start in range(0, len(lines), max_batch):
            yield lines[start : start + max_batch]
        if reader.error is not None:
            raise reader.error


def split_lines(text: str) -> list[str]:
    """`text` cut at "\\n" only (and "\\r\\n"); a last line without its "\\n" counts, an empty text has none."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":  # the "\n" that ends the last line
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def text_lines(text: str) -> list[str]:
    """The lines of a user's `text` (`split_lines`), each without a leading byte-order mark (`normalise_text`)."""
    return [normalise_text(line) for line in split_lines(text)]


def format_lines(items: Iterable[str]) -> str:
    """One result a line, each ended by "\\n"; a line end inside a result ("\\n", "\\r", which a decoded
    translation can hold) becomes a space, so that line i of the output always answers line i of the input."""
    return "".join(item.replace("\r\n", " ").replace("\n", " ").replace("\r", " ") + "\n" for item in items)


def check_line_chars(lines: Sequence[str], *, max_len: int, where: str, first: int = 1,
                     truncate: bool = False) -> list[str]:
    """`lines` checked by their characters before they are tokenized (tokenizing a line of megabytes takes
    gigabytes): a line of more than max_len x CHARS_PER_TOKEN characters holds more tokens than the model's
    context `max_len` at any plausible tokenization, so it raises a `LineTooLong` naming its line (numbered
    from `first`, of `where`) and its length, or with `truncate` is cut to that many characters, which keeps
    the first max_len tokens that truncating its tokens keeps."""
    limit = max_len * CHARS_PER_TOKEN
    if truncate:
        return [line[:limit] for line in lines]
    for number, line in enumerate(lines, first):
        if len(line) > limit:
            raise LineTooLong(f"{where}:{number}: the line is {len(line)} characters, more than the model's "
                              f"context max_len={max_len} can hold ({limit}, at {CHARS_PER_TOKEN} characters a "
                              "token)")
    return list(lines)


def check_line_lengths(lengths: Iterable[int], *, limit: int, max_len: int, where: str, first: int = 1) -> None:
    """A `LineTooLong` (a ValueError) naming the first line (numbered from `first`, of `where`) of more than
    `limit` tokens (what the model's context `max_len` leaves for text): refused, not cut silently, so that no
    answer is about a text other than the one given; its message says how to cut lines on purpose."""
    room = f"max_len={max_len}" if limit == max_len else f"max_len={max_len}, which leaves {limit} for text"
    for number, n in enumerate(lengths, first):
        if n > limit:
            raise LineTooLong(f"{where}:{number}: the line is {n} tokens, longer than the model's context {room}")


__all__ = ["BOM", "CHARS_PER_TOKEN", "JSONL_SUFFIXES", "MAX_LINE_BYTES", "STDIN", "DataError", "LineReader",
           "LineTooLong", "check_line_chars", "check_line_lengths", "decode_utf8", "existing_file", "format_lines",
           "line_batches", "normalise_text", "read_jsonl_records", "read_lines", "read_utf8", "source_name",
           "split_lines", "text_lines"]
