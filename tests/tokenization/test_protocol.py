"""The `Tokenizer` protocol (tokenization/protocol.py): every tokenizer class of `tformer.tokenization` follows
it, by the members it has (`isinstance`) and by their signatures, and a trained one answers each member with
the type the protocol says."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import tformer.tokenization as tokenization
from tformer.tokenization import BPETokenizer, CharTokenizer, HFTokenizer, Tokenizer, WordPieceTokenizer

TEXTS = ["the cat sat on the mat", "der Hund schläft", "a dog, a cat and a bird"] * 20


def made() -> dict[type, Tokenizer]:
    """One small trained instance of every tokenizer class."""
    bpe = BPETokenizer.train(TEXTS, vocab_size=300)
    return {CharTokenizer: CharTokenizer.train(TEXTS), BPETokenizer: bpe,
            WordPieceTokenizer: WordPieceTokenizer.train(TEXTS, vocab_size=100), HFTokenizer: HFTokenizer(bpe.backend)}


TOKENIZERS = made()
METHODS = ("encode", "encode_batch", "decode", "token", "save")


def test_every_tokenizer_class_is_listed() -> None:
    """A new tokenizer class of the package is tested here too: the list is every class exported with `encode`."""
    exported = {obj for name in tokenization.__all__ if isinstance(obj := getattr(tokenization, name), type)
                and obj is not Tokenizer and hasattr(obj, "encode")}
    assert exported == set(TOKENIZERS)


@pytest.mark.parametrize("cls", list(TOKENIZERS), ids=lambda c: c.__name__)
def test_each_tokenizer_follows_the_protocol(cls: type, tmp_path: Path) -> None:
    tokenizer = TOKENIZERS[cls]
    assert isinstance(tokenizer, Tokenizer)
    for name in METHODS:  # the same parameters, by name and kind, as the protocol's
        want = list(inspect.signature(getattr(Tokenizer, name)).parameters.values())
        have = list(inspect.signature(getattr(cls, name)).parameters.values())
        assert [(p.name, p.kind) for p in have] == [(p.name, p.kind) for p in want], (cls.__name__, name)
    ids = tokenizer.encode("the cat")
    assert ids and all(isinstance(i, int) for i in ids)
    assert tokenizer.encode_batch(["the cat", "a dog"])[0] == ids
    assert isinstance(tokenizer.decode(ids), str) and isinstance(tokenizer.token(ids[0]), str)
    assert isinstance(tokenizer.vocab_size, int) and max(ids) < tokenizer.vocab_size
    assert all(isinstance(getattr(tokenizer, role), int) for role in ("pad_id", "bos_id", "eos_id"))
    assert tokenizer.save(tmp_path).is_file()


def test_an_object_without_a_member_is_no_tokenizer() -> None:
    class Half:
        pad_id = bos_id = eos_id = unk_id = 0
        vocab_size = 4

        def encode(self, text: str) -> list[int]:
            return []

    assert not isinstance(Half(), Tokenizer)
