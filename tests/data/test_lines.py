"""The one reader of user text (`tformer.data.lines`): lines at "\\n" only, strict UTF-8 from stdin and files
alike, one result a line out, and long lines refused by name; its one UTF-8 decoder and one JSON Lines reader,
whose messages every reader of `tformer.data` shares."""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path

import pytest

import tformer.data.lines as lines_module
from tformer.data.labelled import read_labelled
from tformer.data.lines import (
    DataError,
    LineReader,
    LineTooLong,
    check_line_chars,
    check_line_lengths,
    decode_utf8,
    format_lines,
    line_batches,
    normalise_text,
    read_jsonl_records,
    read_lines,
    read_utf8,
    source_name,
    split_lines,
)
from tformer.data.parallel import read_jsonl, read_pair, read_parallel, read_tsv
from tformer.data.text import read_text_file, read_text_jsonl, read_texts


@pytest.mark.parametrize(("text", "lines"), [
    ("", []),
    ("\n", [""]),
    ("a", ["a"]),
    ("a\nb\n", ["a", "b"]),
    ("a\r\nb\r\n", ["a", "b"]),
    ("a\n\nb", ["a", "", "b"]),
    ("a\u2028b\x0cc\x85d\x1ce\u2029f\x0bg\rh\n", ["a\u2028b\x0cc\x85d\x1ce\u2029f\x0bg\rh"]),
])
def test_split_lines_at_newline_only(text: str, lines: list[str]) -> None:
    assert split_lines(text) == lines


def stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


@pytest.mark.parametrize("data", [b"\xef\xbb\xbfthe cat\r\nsees\xe2\x80\xa8it\n", b"the cat\nsees\xe2\x80\xa8it"])
def test_stdin_and_a_file_read_alike(data: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "in.txt").write_bytes(data)
    stdin(monkeypatch, data)
    assert read_lines(None) == read_lines(tmp_path / "in.txt") == ["the cat", "sees\u2028it"]
    stdin(monkeypatch, data)
    assert read_lines("-") == ["the cat", "sees\u2028it"]


@pytest.mark.parametrize(("text", "normal"), [
    ("\ufeffIn the beginning", "In the beginning"), ("\ufeff", ""), ("\ufeff\ufeff", ""), ("\ufeff \t", " \t"),
    ("\ufeff\ufeffa", "a"), ("a\ufeffb", "a\ufeffb"), ("a\ufeff", "a\ufeff"), (" \ufeffa", " \ufeffa"), ("", ""),
])
def test_normalise_text_drops_the_byte_order_marks_a_text_starts_with(text: str, normal: str) -> None:
    """Only marks that start the text: inside it U+FEFF is a zero-width no-break space (text)."""
    assert normalise_text(text) == normal
    assert normalise_text(normal) == normal  # normalising twice changes nothing


def test_every_line_read_drops_its_byte_order_mark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line that starts with a mark reads as the line without it (a file made of files that each had one),
    and a line that is only a mark as an empty line, from a file, from stdin read whole or read live."""
    data = "\ufeffone\n\ufefftwo\r\n\ufeff\nthree\ufefffour\n".encode()
    expected = ["one", "two", "", "three\ufefffour"]
    (tmp_path / "in.txt").write_bytes(data)
    assert read_lines(tmp_path / "in.txt") == expected
    stdin(monkeypatch, data)
    assert read_lines(None) == expected
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(pipe, encoding="utf-8"))
        assert [line for batch in line_batches(None, max_batch=2) for line in batch] == expected


def test_a_bad_byte_is_named_with_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"ok\nfine\nthe \xff cat\n"
    (tmp_path / "in.txt").write_bytes(data)
    bad = r":3: not valid UTF-8 \(byte 0xff at column 5\); the text must be UTF-8$"
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path / 'in.txt'))}{bad}"):
        read_lines(tmp_path / "in.txt")
    stdin(monkeypatch, data)
    with pytest.raises(ValueError, match=rf"^stdin{bad}"):
        read_lines(None)


def test_a_missing_file_a_closed_stdin_and_the_names_of_sources(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(ValueError, match="there is no stdin to read; give --input FILE"):
        read_lines(None)
    with pytest.raises(ValueError, match="does not exist"):
        read_lines(tmp_path / "none.txt")
    assert source_name(None) == source_name("-") == "stdin" and source_name("a.txt") == "a.txt"


def test_format_lines_keeps_one_result_a_line() -> None:
    assert format_lines(["a\nb", "c\r\nd", "e\rf", "", "g\u2028h"]) == "a b\nc d\ne f\n\ng\u2028h\n"


def test_check_line_lengths_names_the_first_long_line() -> None:
    check_line_lengths([3, 4], limit=4, max_len=4, where="in.txt")
    with pytest.raises(LineTooLong, match=r"^in.txt:2: the line is 5 tokens, longer than the model's context "
                                          r"max_len=6, which leaves 4 for text; shorten it, or cut it to the "
                                          r"context on purpose \(truncate=True\)$") as e:
        check_line_lengths([1, 5, 9], limit=4, max_len=6, where="in.txt")
    assert str(e.value.spelt("--truncate")).endswith("on purpose (--truncate)")


def test_every_reader_names_the_same_bad_bytes_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One decoder (`decode_utf8`): user text, plain-text documents, parallel and labelled corpora, stdin."""
    data = b"a\tb\ncaf\xe9\tx\n"  # Latin-1 in line 2
    path, other = tmp_path / "c.tsv", tmp_path / "c.de"
    path.write_bytes(data)
    other.write_text("x\ny\n")
    readers = [read_lines, read_text_file, read_texts, read_tsv, read_parallel, read_labelled, read_utf8,
               lambda p: read_pair(p, other), lambda p: decode_utf8(p.read_bytes(), where=str(p))]
    for read in readers:
        with pytest.raises(DataError) as e:
            read(path)
        assert str(e.value) == f"{path}:2: not valid UTF-8 (byte 0xe9 at column 4); the text must be UTF-8"
    stdin(monkeypatch, data)
    with pytest.raises(DataError, match=r"^stdin:2: not valid UTF-8 \(byte 0xe9 at column 4\); the text must be "
                                        r"UTF-8$"):
        read_lines(None)


JSONL_READERS = [  # (reader, the fields it needs as its messages name them)
    (lambda p: read_jsonl(p, src_field="text", tgt_field="label"), "'text' and 'label'"),
    (read_parallel, "'src' and 'tgt'"),
    (read_labelled, "'text' and 'label'"),
    (read_text_jsonl, "'text'"),
    (read_texts, "'text'"),
    (lambda p: list(read_jsonl_records(p, strings=["text"], values=["label"])), "'text' and 'label'"),
]


@pytest.mark.parametrize(("line", "message"), [
    (b"not json", "not valid JSON (Expecting value at column 1)"),
    (b'{"text": "a", "label": "x"', "not valid JSON (Expecting ',' delimiter at column 27)"),
    (b"[1, 2]", "expected a JSON object with {fields}, got list"),
    (b'"text"', "expected a JSON object with {fields}, got str"),
    (b'{"text": "caf\xe9", "label": "x"}', "not valid UTF-8 (byte 0xe9 at column 14); the text must be UTF-8"),
])
def test_every_jsonl_reader_names_the_same_bad_line_alike(tmp_path: Path, line: bytes, message: str) -> None:
    """One JSON Lines reader (`read_jsonl_records`), whatever the fields each reader needs."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "fine", "label": "x", "src": "a", "tgt": "b"}\n\n' + line + b"\n")
    for read, fields in JSONL_READERS:
        with pytest.raises(DataError) as e:
            read(path)
        assert str(e.value) == f"{path}:3: " + message.format(fields=fields)


@pytest.mark.parametrize(("line", "message"), [
    ('{"label": "x"}', "missing field 'text'"),
    ('{"text": 3, "label": "x"}', "field 'text' must be a string, got int"),
    ('{"text": null, "label": "x"}', "field 'text' must be a string, got NoneType"),
])
def test_a_missing_or_wrong_field_is_named_alike(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "fine", "label": "x"}\n' + line + "\n")
    for read, fields in JSONL_READERS:
        if "'src'" in fields:
            continue
        with pytest.raises(DataError) as e:
            read(path)
        assert str(e.value) == f"{path}:2: {message}"


def test_jsonl_readers_drop_a_byte_order_mark_and_windows_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"src": "a", "tgt": "b", "text": " one ", "label": 1}\r\n\r\n'
                     b'{"src": "c", "tgt": "d", "text": "two", "label": "x"}\r\n')
    assert read_jsonl(path) == [("a", "b"), ("c", "d")]
    assert read_text_jsonl(path) == ["one", "two"]
    labelled = read_labelled(path)
    assert labelled.texts == ["one", "two"] and labelled.names == ["1", "x"]  # a number is a label too
    assert [n for n, _ in read_jsonl_records(path, strings=["text"])] == [1, 3]


def test_a_missing_file_is_named_alike(tmp_path: Path) -> None:
    path = tmp_path / "none.jsonl"
    for read, _ in JSONL_READERS[:1] + JSONL_READERS[2:4]:
        with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: no such file$"):
            read(path)


def test_a_line_longer_than_the_cap_is_refused_without_reading_it_whole(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A line without its end after MAX_LINE_BYTES is refused by the reader, from a file, stdin or a pipe, the
    lines before it read (and from a pipe, yielded) first; /dev/zero, one endless line, at the real cap."""
    monkeypatch.setattr(lines_module, "MAX_LINE_BYTES", 1000)
    data = b"one\ntwo\n" + b"x" * 300_000  # a few hundred KB, no line end
    (tmp_path / "in.txt").write_bytes(data)
    message = "in.txt:3: the line is longer than 1000 bytes (1000 bytes), the most a line may hold"
    with pytest.raises(DataError, match=re.escape(message)):
        read_lines(tmp_path / "in.txt")
    read, write = os.pipe()
    os.write(write, data[:60_000])  # what a pipe holds; the writer is still there
    with os.fdopen(read, "rb") as pipe:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(pipe, encoding="utf-8"))
        batches = line_batches(None, max_batch=10)
        assert next(batches) == ["one", "two"]
        with pytest.raises(DataError, match="^stdin:3: the line is longer than 1000 bytes"):
            next(batches)
    os.close(write)
    monkeypatch.undo()
    if Path("/dev/zero").exists():
        with pytest.raises(DataError, match=r"^/dev/zero:1: the line is longer than 4194304 bytes \(4 MiB\)"):
            read_lines("/dev/zero")


def test_a_line_just_at_the_cap_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines_module, "MAX_LINE_BYTES", 1000)
    (tmp_path / "in.txt").write_bytes(b"a" * 1000 + b"\n" + b"b" * 1000)
    assert read_lines(tmp_path / "in.txt") == ["a" * 1000, "b" * 1000]
    (tmp_path / "in.txt").write_bytes(b"a" * 1001 + b"\n")
    with pytest.raises(DataError, match="in.txt:1: the line is longer than 1000 bytes"):
        read_lines(tmp_path / "in.txt")


def test_the_reader_gives_the_lines_before_a_bad_one() -> None:
    """Pushed in pieces cut anywhere (inside a character, a line end), the lines come whole and numbered from
    the start; a bad byte stops the reading after the lines before its line."""
    reader = LineReader("in")
    data = "één\r\ntwo\n".encode() + b"ok\nbad \xff\nlater\n"
    got = [line for i in range(0, len(data), 3) for line in reader.push(data[i : i + 3])]
    assert got == ["één", "two", "ok"]
    assert str(reader.error) == "in:4: not valid UTF-8 (byte 0xff at column 5); the text must be UTF-8"
    assert reader.push(b"more\n", eof=True) == []


def test_check_line_chars_refuses_or_cuts_before_tokenizing() -> None:
    assert check_line_chars(["ab", "c" * 200], max_len=2, where="in") == ["ab", "c" * 200]
    with pytest.raises(LineTooLong, match=r"^in:4: the line is 201 characters, more than the model's context "
                                          r"max_len=2 can hold \(200, at 100 characters a token\)"):
        check_line_chars(["ab", "c" * 201], max_len=2, where="in", first=3)
    assert check_line_chars(["ab", "c" * 201], max_len=2, where="in", truncate=True) == ["ab", "c" * 200]
