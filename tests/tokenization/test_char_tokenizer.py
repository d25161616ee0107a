"""The character tokenizer, the Hugging Face tokenizer.json wrapper, and `load_tokenizer` choosing between
them and BPE by the saved files."""

import pytest
from tokenizers import Tokenizer as Backend
from tokenizers import decoders, models, pre_tokenizers, trainers

from tformer.tokenization import BPETokenizer, CharTokenizer, HFTokenizer, Tokenizer, load_tokenizer

TEXTS = ["Hello, world!", "Grüße aus Köln", "tab\tand\nnewline"]


def test_vocabulary_is_specials_then_sorted_characters() -> None:
    tok = CharTokenizer.train(["cab", "bca "])
    assert tok.chars == [" ", "a", "b", "c"]
    assert tok.vocab_size == 8
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.encode("abc a") == [5, 6, 7, 4, 5]
    assert isinstance(tok, Tokenizer)


def test_round_trip_and_unknown_characters() -> None:
    tok = CharTokenizer.train(TEXTS)
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == text
        assert len(tok.encode(text)) == len(text)
    ids = tok.encode("Hé!")  # é was never seen
    assert ids[1] == tok.unk_id and tok.unk_id not in ids[::2]
    assert tok.decode(ids) == "H\ufffd!"
    assert tok.decode([tok.bos_id, *tok.encode("Hz"), tok.eos_id, tok.pad_id]) == "H\ufffd"  # z unseen too
    assert tok.encode_batch(["ab", ""]) == [tok.encode("ab"), []]


def test_save_load(tmp_path) -> None:  # noqa: ANN001
    tok = CharTokenizer.train(TEXTS + ["\ud800 lone surrogate"])
    path = tok.save(tmp_path / "tok")
    assert path.name == "char_tokenizer.json"
    for source in (tmp_path / "tok", path):
        again = CharTokenizer.load(source)
        assert again.chars == tok.chars
        assert again.encode(TEXTS[1]) == tok.encode(TEXTS[1])
    with pytest.raises(FileNotFoundError, match="no char_tokenizer.json"):
        CharTokenizer.load(tmp_path)
    (tmp_path / "char_tokenizer.json").write_text('{"kind": "bpe"}')
    with pytest.raises(ValueError, match="not a character tokenizer"):
        CharTokenizer.load(tmp_path)


def _gpt2_like() -> Backend:
    """A small byte-level BPE whose only special token is <|endoftext|>, like GPT-2's."""
    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(TEXTS * 10, trainer=trainer)
    backend.decoder = decoders.ByteLevel()
    return backend


def test_hf_tokenizer_json(tmp_path) -> None:  # noqa: ANN001
    _gpt2_like().save(str(tmp_path / "tokenizer.json"))
    tok = HFTokenizer.load(tmp_path)
    assert (tok.bos_id, tok.eos_id, tok.unk_id, tok.pad_id) == (0, 0, 0, None)  # <|endoftext|> is id 0
    assert tok.vocab_size == tok.backend.get_vocab_size() > 256
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == text
    assert tok.decode([tok.eos_id, *tok.encode("Hello")]) == "Hello"
    assert tok.encode_batch(TEXTS[:2]) == [tok.encode(TEXTS[0]), tok.encode(TEXTS[1])]
    again = HFTokenizer.load(tok.save(tmp_path / "copy"))
    assert again.encode(TEXTS[1]) == tok.encode(TEXTS[1])


def test_load_tokenizer_picks_the_class_by_files(tmp_path) -> None:  # noqa: ANN001
    CharTokenizer.train(TEXTS).save(tmp_path / "char")
    BPETokenizer.train(TEXTS * 5, vocab_size=300).save(tmp_path / "bpe")
    _gpt2_like().save(str(tmp_path / "tokenizer.json"))
    assert type(load_tokenizer(tmp_path / "char")) is CharTokenizer
    assert type(load_tokenizer(tmp_path / "bpe")) is BPETokenizer
    assert type(load_tokenizer(tmp_path / "bpe" / "tokenizer.json")) is BPETokenizer
    assert type(load_tokenizer(tmp_path)) is HFTokenizer
    checkpoint = tmp_path / "ckpt"
    CharTokenizer.train(TEXTS).save(checkpoint / "tokenizer")
    assert type(load_tokenizer(checkpoint)) is CharTokenizer  # a checkpoint directory: its tokenizer/
    with pytest.raises(FileNotFoundError, match="no tokenizer at"):
        load_tokenizer(tmp_path / "char" / "missing")
