"""Parallel-text readers: good files read back as pairs; bad data raises DataError naming file and line."""

import json
import re
from pathlib import Path

import pytest

from tformer.data import DataError, read_jsonl, read_pair, read_parallel, read_tsv

PAIRS = [("Hello, world.", "Hallo, Welt."), ("Größe über Äpfel.", "Élève naïve."), ("a", "b")]


def write(path: Path, data: str | bytes) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def raises_at(path: Path, line: int, what: str):
    """DataError whose message starts `<path>:<line>:` and mentions `what`."""
    return pytest.raises(DataError, match=rf"^{re.escape(str(path))}:{line}: .*{what}")


def test_read_tsv(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", "".join(f"{s}\t{t}\r\n" for s, t in PAIRS))
    assert read_tsv(path) == PAIRS
    assert read_parallel(path) == PAIRS
    assert read_parallel(str(path)) == PAIRS


def test_read_pair(tmp_path: Path) -> None:
    src = write(tmp_path / "c.en", "\ufeff" + "".join(f"{s}\n" for s, _ in PAIRS))  # a BOM is dropped
    tgt = write(tmp_path / "c.de", "".join(f"  {t} \n" for _, t in PAIRS))  # surrounding spaces are dropped
    assert read_pair(src, tgt) == PAIRS
    assert read_parallel((src, tgt)) == PAIRS
    assert read_parallel([str(src), str(tgt)]) == PAIRS


def test_read_jsonl(tmp_path: Path) -> None:
    records = [{"src": s, "tgt": t, "id": i} for i, (s, t) in enumerate(PAIRS)]
    lines = [json.dumps(r, ensure_ascii=r["id"] % 2 == 0) for r in records]  # \u escapes and raw UTF-8
    path = write(tmp_path / "c.jsonl", "\n".join(lines) + "\n\n")  # blank lines are skipped
    assert read_jsonl(path) == PAIRS
    assert read_parallel(path) == PAIRS


def test_unequal_line_counts(tmp_path: Path) -> None:
    src = write(tmp_path / "c.en", "a\nb\nc\n")
    tgt = write(tmp_path / "c.de", "x\ny\n")
    with raises_at(src, 3, "no matching line in .*c.de"):
        read_pair(src, tgt)
    with raises_at(src, 3, "no matching line"):  # whichever file is longer is the one named
        read_pair(tgt, src)


@pytest.mark.parametrize("line", ["\tHallo", "Hello\t", "   \tHallo"])
def test_empty_side_tsv(tmp_path: Path, line: str) -> None:
    path = write(tmp_path / "c.tsv", f"a\tb\n{line}\n")
    with raises_at(path, 2, "empty (source|target)"):
        read_tsv(path)


def test_empty_line_two_files(tmp_path: Path) -> None:
    src = write(tmp_path / "c.en", "a\nb\n")
    tgt = write(tmp_path / "c.de", "x\n \n")
    with raises_at(tgt, 2, "empty target"):
        read_pair(src, tgt)


def test_missing_and_extra_column(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", "a\tb\nonly source\n")
    with raises_at(path, 2, "expected 2 tab-separated columns .* found 1"):
        read_tsv(path)
    path = write(tmp_path / "d.tsv", "a\tb\tc\n")
    with raises_at(path, 1, "found 3"):
        read_tsv(path)


def test_undecodable_utf8(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", b"a\tb\n" + b"caf\xe9\tx\n")  # Latin-1, not UTF-8
    with raises_at(path, 2, "not valid UTF-8 .*0xe9"):
        read_tsv(path)
    tgt = write(tmp_path / "c.de", b"ok\n\xff\n")
    src = write(tmp_path / "c.en", "a\nb\n")
    with raises_at(tgt, 2, "not valid UTF-8"):
        read_pair(src, tgt)


@pytest.mark.parametrize(("record", "what"), [
    ('{"src": "a"}', "missing field 'tgt'"),
    ('{"tgt": "a"}', "missing field 'src'"),
    ('{"src": "a", "tgt": 3}', "field 'tgt' must be a string"),
    ('{"src": " ", "tgt": "b"}', "empty source"),
    ('["a", "b"]', "expected a JSON object"),
    ('{"src": "a", "tgt": "b"', "not valid JSON"),
])
def test_bad_jsonl(tmp_path: Path, record: str, what: str) -> None:
    path = write(tmp_path / "c.jsonl", '{"src": "x", "tgt": "y"}\n' + record + "\n")
    with raises_at(path, 2, re.escape(what)):
        read_jsonl(path)


def test_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"c\.csv: unknown parallel-corpus suffix '\.csv'"):
        read_parallel(tmp_path / "c.csv")
    with pytest.raises(DataError, match="exactly 2 paths"):
        read_parallel([tmp_path / "a", tmp_path / "b", tmp_path / "c"])


def test_data_error_is_value_error() -> None:
    assert issubclass(DataError, ValueError)
