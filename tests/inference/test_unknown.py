"""Input a model cannot represent (`inference.unknown`, issue 32): each tokenizer's unknown token counted, the
text behind it shown, and one warning line; none for a byte-level BPE, which represents every text."""

from __future__ import annotations

import pytest

from tformer.inference import Unknown, unknown_tokens, unknown_warning
from tformer.tokenization import BPETokenizer, CharTokenizer, HFTokenizer, WordPieceTokenizer

TEXT = ["the cat sees the dog", "a big red house", "the small blue cat sleeps"]


def test_a_character_tokenizer_counts_each_unseen_character() -> None:
    chars = CharTokenizer.train(TEXT)
    found = unknown_tokens(chars, ["the Жук", "\ufeffcat"])  # a leading byte-order mark is no part of a text
    assert found == Unknown(count=3, total=10, examples=("Ж", "у", "к"))
    assert found.warning() == ("30% of the input's tokens (3 of 10) are unknown to this model's tokenizer "
                               "(e.g. 'Ж', 'у', 'к'); its output will be poor")
    assert unknown_warning(chars, TEXT) is None


def test_wordpiece_counts_a_word_it_cannot_split_once() -> None:
    pieces = WordPieceTokenizer.train(TEXT * 3, vocab_size=100)
    found = unknown_tokens(pieces, ["the 猫 cat 狗狗", "the cat"])
    assert (found.count, found.examples) == (3, ("猫", "狗"))  # each CJK character is a word of its own
    assert unknown_warning(pieces, ["the\x07 cat"]) is None  # its normaliser drops control characters
    assert "(e.g. '\\x07')" in unknown_warning(CharTokenizer.train(TEXT), ["the\x07 cat"])  # shown escaped


def test_a_byte_level_tokenizer_has_no_unknown_tokens() -> None:
    bpe = BPETokenizer.train(TEXT * 3, vocab_size=280)
    assert unknown_tokens(bpe, ["the Жук 猫"]).count == 0
    gpt2_like = HFTokenizer(bpe.backend)  # its unk_id is <unk>, a real unknown token, never produced
    assert unknown_warning(gpt2_like, ["the Жук 猫"]) is None


def test_an_unknown_that_is_another_special_token_is_not_counted() -> None:
    """GPT-2's vocabulary names <|endoftext|> for every special role, the unknown one included: a text that
    holds that token is not unknown text."""

    class EndOfText(CharTokenizer):
        unk_id = CharTokenizer.eos_id

    chars = EndOfText(sorted(set("".join(TEXT))))
    assert unknown_tokens(chars, ["the Ж"]).count == 0


@pytest.mark.parametrize("count, total, shown", [(1, 8, "12%"), (1, 700, "0.1%"), (3, 10000, "0.03%"),
                                                 (1, 1, "100%")])
def test_the_share_is_shown_with_a_digit_that_is_not_zero(count: int, total: int, shown: str) -> None:
    line = Unknown(count=count, total=total, examples=()).warning()
    assert line is not None and line.startswith(f"{shown} of the input's tokens ({count} of {total})")


def test_batches_add_up() -> None:
    chars = CharTokenizer.train(TEXT)
    both = unknown_tokens(chars, ["the Ж"]) + unknown_tokens(chars, ["aЖb", "йцукен"])
    assert both == unknown_tokens(chars, ["the Ж", "aЖb", "йцукен"])
    assert both.examples == ("Ж", "й", "ц")
