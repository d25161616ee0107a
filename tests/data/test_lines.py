"""The one reader of user text (`tformer.data.lines`): lines at "\\n" only, strict UTF-8 from stdin and files
alike, one result a line out, and long lines refused by name."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from tformer.data.lines import check_line_lengths, format_lines, read_lines, source_name, split_lines


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


def test_a_bad_byte_is_named_with_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"ok\nfine\nthe \xff cat\n"
    (tmp_path / "in.txt").write_bytes(data)
    with pytest.raises(ValueError, match=r"in.txt is not UTF-8 \(byte 12\): 0xff in line 3$"):
        read_lines(tmp_path / "in.txt")
    stdin(monkeypatch, data)
    with pytest.raises(ValueError, match=r"^stdin is not UTF-8 \(byte 12\): 0xff in line 3$"):
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
    with pytest.raises(ValueError, match=r"^in.txt:2: the line is 5 tokens, longer than the model's context "
                                         r"max_len=6, which leaves 4 for text!$"):
        check_line_lengths([1, 5, 9], limit=4, max_len=6, where="in.txt", note="!")
