"""Next-sentence pairs: balanced, never a sentence with itself, segments matching [SEP], fair truncation."""

import numpy as np
import pytest

from tformer.data.nsp import collate_pairs, length_batches, make_pairs, truncate_pair

CLS, SEP = 1, 2


def documents(n_docs: int = 12, n_sentences: int = 6) -> list[list[list[int]]]:
    # sentence (d, i) is the unique token 100 * (d + 1) + i repeated (i + 1) times
    return [[[100 * (d + 1) + i] * (i + 1) for i in range(n_sentences)] for d in range(n_docs)]


def test_pairs_are_balanced_and_random_halves_come_from_other_documents() -> None:
    pairs = make_pairs(documents(), max_len=64, cls_id=CLS, sep_id=SEP, rng=np.random.default_rng(0))
    assert len(pairs) == 12 * 5
    assert sum(p.is_random for p in pairs) == len(pairs) // 2
    for p in pairs:
        first_sep = p.ids.index(SEP)
        a, b = p.ids[1:first_sep], p.ids[first_sep + 1 : -1]
        assert p.ids[0] == CLS and p.ids[-1] == SEP
        doc_a, i_a = divmod(a[0], 100)
        doc_b, i_b = divmod(b[0], 100)
        if p.is_random:
            assert doc_b != doc_a  # never A itself, never A's document
        else:
            assert (doc_b, i_b) == (doc_a, i_a + 1)
        # segment ids: 0 over [CLS] A [SEP], 1 over B [SEP]
        assert p.segments == [0] * (first_sep + 1) + [1] * (len(p.ids) - first_sep - 1)


def test_truncation_cuts_the_longer_side_first() -> None:
    a, b = truncate_pair(list(range(10)), list(range(4)), 8)
    assert (len(a), len(b)) == (4, 4) and a == [0, 1, 2, 3]
    a, b = truncate_pair(list(range(3)), list(range(20)), 8)
    assert (len(a), len(b)) == (3, 5)
    pairs = make_pairs([[[7] * 50, [8] * 50]] + documents(2), max_len=16, cls_id=CLS, sep_id=SEP,
                       rng=np.random.default_rng(1))
    assert max(len(p.ids) for p in pairs) <= 16


def test_collate_pads_and_marks_valid_positions() -> None:
    pairs = make_pairs(documents(3), max_len=64, cls_id=CLS, sep_id=SEP, rng=np.random.default_rng(0))
    batch = collate_pairs(pairs[:5], pad_id=0)
    lengths = [len(p.ids) for p in pairs[:5]]
    assert batch.ids.shape == (5, max(lengths))
    assert batch.valid.sum(1).tolist() == lengths
    assert (batch.ids[~batch.valid] == 0).all() and (batch.segments[~batch.valid] == 0).all()


def test_length_batches_cover_every_index_once() -> None:
    lengths = list(np.random.default_rng(0).integers(3, 60, 1000))
    batches = length_batches(lengths, batch_size=32, rng=np.random.default_rng(1))
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert all(len(b) <= 32 for b in batches)


def test_one_document_is_an_error() -> None:
    with pytest.raises(ValueError, match="two non-empty documents"):
        make_pairs(documents(1), max_len=64, cls_id=CLS, sep_id=SEP, rng=np.random.default_rng(0))
