"""The synthetic corpus (data/synthetic.py, `data.corpus: synthetic`): the same splits for the same seed, every
length of the range in every split and equally often, right targets, no source twice; a range, an alphabet or
a size that cannot be made is refused in one line when the recipe is built."""

from __future__ import annotations

from collections import Counter

import pytest

from tformer.data.synthetic import ALPHABET, synthetic_splits
from tformer.errors import UserError
from tformer.tasks import load_recipe
from tformer.tasks.translation import DataConfig, SyntheticConfig, load_split


def splits(**kw: object) -> list[list[tuple[str, str]]]:
    args = dict(task="reverse", min_len=3, max_len=9, symbols=8, sizes=(70, 14, 21), seed=0) | kw
    return synthetic_splits(**args)


def test_the_same_seed_gives_the_same_splits_and_another_seed_others() -> None:
    assert splits() == splits()
    assert splits(seed=1) != splits()
    assert SyntheticConfig(train=50, valid=5, test=5).splits() == SyntheticConfig(train=50, valid=5, test=5).splits()


@pytest.mark.parametrize(("min_len", "max_len"), [(1, 1), (4, 4), (3, 9), (5, 80), (1, 30)])
def test_every_length_of_the_range_in_every_split_equally_often(min_len: int, max_len: int) -> None:
    k = max_len - min_len + 1
    sizes = (3 * k + 2, k, k + 1)
    for split, n in zip(splits(min_len=min_len, max_len=max_len, sizes=sizes, symbols=32), sizes, strict=True):
        counts = Counter(len(s) for s, _ in split)
        assert len(split) == n and set(counts) == set(range(min_len, max_len + 1))
        assert max(counts.values()) - min(counts.values()) <= 1


@pytest.mark.parametrize("task", ["reverse", "copy"])
def test_targets_are_the_reverse_or_the_copy_over_the_alphabet(task: str) -> None:
    for split in splits(task=task):
        for source, target in split:
            assert target == (source[::-1] if task == "reverse" else source)
            assert set(source) <= set(ALPHABET[:8])
    assert synthetic_splits(task="reverse", min_len=3, max_len=3, symbols=2, sizes=(8,), seed=0)[0] != []


def test_no_source_twice_within_or_across_splits() -> None:
    drawn = splits(symbols=2, min_len=5, max_len=6, sizes=(40, 10, 12))  # 31 of the 32 sequences of length 5
    sources = [s for split in drawn for s, _ in split]
    assert len(sources) == len(set(sources)) == 62
    long = [s for split in splits(min_len=40, max_len=41, symbols=32) for s, _ in split]
    assert len(long) == len(set(long))


def test_the_recipe_key_reads_the_corpus_with_one_token_per_symbol() -> None:
    data = DataConfig(corpus="synthetic", synthetic=SyntheticConfig(task="copy", min_len=2, max_len=6, symbols=5,
                                                                    train=40, valid=6, test=9, seed=3))
    assert [len(load_split(data, s)) for s in ("train", "valid", "test")] == [40, 6, 9]
    assert load_split(data, "test") == data.synthetic.splits()[2]


@pytest.mark.parametrize(("overrides", "message"), [
    (["data.synthetic.min_len=10", "data.synthetic.max_len=5"],
     "data.synthetic.min_len=10, max_len=5 is not a length range; need 1 <= min_len <= max_len"),
    (["data.synthetic.min_len=0"], "data.synthetic.min_len=0, max_len=80 is not a length range"),
    (["data.synthetic.symbols=63"], "data.synthetic.symbols=63 is not allowed; choose 2 to 62"),
    (["data.synthetic.task=sort"], "data.synthetic.task='sort' is not allowed; choose reverse or copy"),
    (["data.synthetic.train=0"], "data.synthetic.train=0 must be a positive integer"),
    (["data.synthetic.min_len=1", "data.synthetic.max_len=1"],
     "data.synthetic asks for up to 21500 distinct sequences of length 1, but 32 symbols make only 32"),
    (["data.synthetic.max_len=200"], "data.synthetic.max_len=200 is longer than data.max_len=128"),
    (["data.corpus=bible", "data.synthetic.max_len=40"],
     "data.synthetic is set but data.corpus='bible'; it needs data.corpus='synthetic'"),
])
def test_a_bad_synthetic_corpus_is_refused_in_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError) as e:
        load_recipe("synthetic-attention", overrides)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_min_len_equal_to_max_len_is_one_length() -> None:
    recipe = load_recipe("synthetic-rnn", ["data.synthetic.min_len=7", "data.synthetic.max_len=7",
                                           "data.synthetic.train=30", "data.synthetic.valid=3",
                                           "data.synthetic.test=3"])
    assert {len(s) for split in recipe.data.synthetic.splits() for s, _ in split} == {7}
