"""WordPiece (BERT's tokenizer) trained with Hugging Face tokenizers: fixed special ids, ## pieces, reload."""

from tformer.tokenization import WordPieceTokenizer, load_tokenizer

TEXTS = ["The tokenizer splits words into pieces.", "Tokenizers and tokenization: pieces of words!"] * 20


def test_special_ids_pieces_and_round_trip(tmp_path) -> None:  # noqa: ANN001
    tok = WordPieceTokenizer.train(TEXTS, vocab_size=120)
    assert [tok.token(i) for i in range(5)] == ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
    assert (tok.pad_id, tok.cls_id, tok.sep_id, tok.unk_id, tok.mask_id) == (0, 1, 2, 3, 4)
    ids = tok.encode("The Tokenizer splits pieces")
    assert tok.decode(ids) == "the tokenizer splits pieces"  # uncased: lower case, as BERT-uncased
    starts = tok.word_starts("tokenization pieces")
    pieces = [tok.token(i) for i in tok.encode("tokenization pieces")]
    assert starts == [not p.startswith("##") for p in pieces] and starts[0] and sum(starts) == 2
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert isinstance(again, WordPieceTokenizer) and again.encode("splits words") == tok.encode("splits words")


def test_training_is_deterministic() -> None:
    # the trainer numbers word-inner pieces in a hash map's order, which changed the vocabulary from one
    # training to the next (7 different vocabularies in 8 trainings on these texts) until we fixed it
    vocabs = [WordPieceTokenizer.train(TEXTS, vocab_size=120).backend.get_vocab() for _ in range(4)]
    assert all(v == vocabs[0] for v in vocabs)
    tok = WordPieceTokenizer.train(TEXTS, vocab_size=120)
    assert sorted(t.content for t in tok.backend.get_added_tokens_decoder().values()) == sorted(
        ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"])  # "##e" and the like are ordinary pieces
    assert tok.decode(tok.encode("pointers")) == "pointers"  # new word, known letters: no piece lost
