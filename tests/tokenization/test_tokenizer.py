"""Joint byte-level BPE: fixed special ids, exact round trips, deterministic training, save/load identity."""

import random
from pathlib import Path

import pytest

from tformer.tokenization import SPECIAL_TOKENS, BPETokenizer, Tokenizer, WordPieceTokenizer

SENTENCES = [
    "In the beginning God created the heavens and the earth.",
    "Now the earth was formless and empty. Darkness was on the surface of the deep.",
    "God's Spirit was hovering over the surface of the waters.",
    'God said, "Let there be light," and there was light.',
    "Am Anfang schuf Gott die Himmel und die Erde.",
    "Und die Erde war wüst und leer, und Finsternis war über der Tiefe.",
    "Und Gott sprach: Es werde Licht! und es ward Licht. Größe, Äpfel, Öl, Übel, daß.",
    "Au commencement, Dieu créa les cieux et la terre.",
    "La terre était informe et vide: il y avait des ténèbres à la surface de l'abîme.",
    "Dieu dit: Que la lumière soit! Et la lumière fut.",
    "L'Éternel, où, garçon, naïf, fête, île, cœur, Noël.",
]
CORPUS = SENTENCES * 20

UNSEEN = [
    "Then Job answered: \"Why don't you rejoice?\" (Selah.)",
    "Glückselig die im Wege untadelig sind, die da wandeln im Gesetze Jehovas!",
    "Heureux ceux qui sont intègres dans leur voie; Qui marchent selon la loi de l'Éternel!",
    "Ça, c'était où? À Noël: «Élève» — naïve façon; 100% ok...",
    "Mixed  spaces\tand\nlines, 日本語 and an emoji 😀.",
]


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train(CORPUS, vocab_size=400)


def test_special_ids(tok: BPETokenizer) -> None:
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert [tok.token(i) for i in range(4)] == list(SPECIAL_TOKENS)
    assert tok.vocab_size == 400
    assert isinstance(tok, Tokenizer)


@pytest.mark.parametrize("text", SENTENCES + UNSEEN)
def test_round_trip(tok: BPETokenizer, text: str) -> None:
    ids = tok.encode(text)
    assert tok.unk_id not in ids  # byte-level: every string has a spelling
    assert all(4 <= i < tok.vocab_size for i in ids)  # encode adds no special tokens
    assert tok.decode(ids) == text


def test_merges_compress(tok: BPETokenizer) -> None:
    text = CORPUS[0]
    assert len(tok.encode(text)) < len(text.encode()) / 2  # seen text packs several bytes a token


def test_decode_skips_specials(tok: BPETokenizer) -> None:
    ids = tok.encode(CORPUS[4])
    assert tok.decode([tok.bos_id, *ids, tok.eos_id, tok.pad_id, tok.pad_id]) == CORPUS[4]


def test_encode_batch(tok: BPETokenizer) -> None:
    texts = SENTENCES + UNSEEN
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]
    assert tok.decode_batch(tok.encode_batch(texts)) == texts


def test_deterministic_training(tok: BPETokenizer) -> None:
    shuffled = list(CORPUS)
    random.Random(0).shuffle(shuffled)
    again = BPETokenizer.train(iter(shuffled), vocab_size=400)
    assert again.backend.to_str() == tok.backend.to_str()


def test_save_load_identity(tok: BPETokenizer, tmp_path: Path) -> None:
    path = tok.save(tmp_path / "ckpt" / "tokenizer")
    assert path == tmp_path / "ckpt" / "tokenizer" / "tokenizer.json"
    loaded = BPETokenizer.load(path.parent)
    assert loaded.backend.to_str() == tok.backend.to_str()
    assert BPETokenizer.load(path).vocab_size == tok.vocab_size
    for text in UNSEEN:
        assert loaded.encode(text) == tok.encode(text)
    assert loaded.save(tmp_path / "again").read_bytes() == path.read_bytes()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"vocab_size=100 must be in \[260, 2097152\] \(at least 4 special tokens"):
        BPETokenizer.train(CORPUS, vocab_size=100)
    for huge in (2**21 + 1, 2**32, 2**63 - 1):  # the trainer reserved ~70 bytes a token at once: a Rust abort
        with pytest.raises(ValueError, match=f"vocab_size={huge} must be in"):
            BPETokenizer.train(CORPUS, vocab_size=huge)
        with pytest.raises(ValueError, match=rf"vocab_size={huge} must be in \[100, 2097152\]"):
            WordPieceTokenizer.train(CORPUS, vocab_size=huge)
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        BPETokenizer.load(tmp_path)
