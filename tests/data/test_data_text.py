"""Plain-text readers (files, directories, JSONL; errors naming file and line) and the built-in Bible and
BBC News text splits."""

import json

import pytest

from tformer.data import DataError, load_text_corpus, read_text_file, read_text_jsonl, read_texts


def test_text_file_is_one_document(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "a.txt"
    path.write_bytes("\ufeffline one\r\nline two\r\n\n".encode())
    assert read_text_file(path) == ["line one\nline two"]
    (tmp_path / "blank.txt").write_text("  \n\n")
    assert read_text_file(tmp_path / "blank.txt") == []


def test_directory_reads_txt_files_recursively_in_sorted_order(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.txt").write_text("second")
    (tmp_path / "a.txt").write_text("first")
    (tmp_path / "b" / "3.txt").write_text("third")
    (tmp_path / "b" / "notes.md").write_text("not text")
    (tmp_path / "empty.txt").write_text("")
    assert read_texts(tmp_path) == ["first", "second", "third"]
    assert read_texts([tmp_path / "b" / "3.txt", tmp_path / "a.txt"]) == ["third", "first"]


def test_jsonl_documents(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"text": "one", "id": 1}) + "\n\n" + json.dumps({"text": "two\nlines"}) + "\n")
    assert read_text_jsonl(path) == ["one", "two\nlines"]
    assert read_texts(str(path)) == ["one", "two\nlines"]


@pytest.mark.parametrize(("line", "message"), [
    ("not json", r"docs.jsonl:2: not valid JSON \(Expecting value at column 1\)"),
    ("[1, 2]", r"docs.jsonl:2: expected a JSON object with 'text', got list"),
    ('{"body": "x"}', r"docs.jsonl:2: missing field 'text'"),
    ('{"text": 3}', r"docs.jsonl:2: field 'text' must be a string, got int"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, line: str, message: str) -> None:  # noqa: ANN001
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "fine"}\n' + line + "\n")
    with pytest.raises(DataError, match=message):
        read_texts(path)


def test_read_errors(tmp_path) -> None:  # noqa: ANN001
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\nstill ok\nbroken \xff here\n")
    with pytest.raises(DataError, match=r"bad.txt:3: not valid UTF-8 \(byte 0xff at column 8\); the text must be "
                                        r"UTF-8$"):
        read_texts(bad)
    with pytest.raises(DataError, match="no such file or directory"):
        read_texts(tmp_path / "missing.txt")
    (tmp_path / "sub").mkdir()
    with pytest.raises(DataError, match="holds no .txt files"):
        read_texts(tmp_path / "sub")
    (tmp_path / "blank.txt").write_text("\n")
    with pytest.raises(DataError, match="every document is empty"):
        read_texts(tmp_path / "blank.txt")
    with pytest.raises(ValueError, match="split='dev' is not allowed"):
        load_text_corpus("bible", "dev")


def test_bible_text_splits_are_whole_books() -> None:
    train, valid, test = (load_text_corpus("bible", s) for s in ("train", "validation", "test"))
    assert (len(train), len(valid), len(test)) == (1145, 16, 28)  # chapters; 1,189 in all
    assert [sum(map(len, d)) for d in (train, valid, test)] == [3_850_768, 50_020, 125_384]
    assert valid[0].startswith("Paul, a servant of Jesus Christ, called to be an apostle,")  # Romans 1
    assert test[0].startswith("The first book I wrote, Theophilus,")  # Acts 1
    assert train[0].startswith("In the beginning God created the heavens and the earth.\n")  # Genesis 1
    assert "`" not in "".join(train) and "[" not in "".join(train)  # cleaned as for translation


def test_bbc_splits_are_fixed_and_disjoint() -> None:
    train, valid, test = (load_text_corpus("bbc", s) for s in ("train", "validation", "test"))
    assert (len(train), len(valid), len(test)) == (1809, 106, 212)  # 2,225 articles less 98 duplicates
    assert not (set(train) & set(valid)) and not (set(train) & set(test)) and not (set(valid) & set(test))
    assert load_text_corpus("bbc", "validation") == valid  # the same split every time
    assert any("£15.8m" in a for a in train + valid + test)  # sports/199.txt is Windows-1252, decoded
