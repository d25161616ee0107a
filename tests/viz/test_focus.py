"""Where one word attends (`viz.focus`, `tformer plot attention --query`): each tokenizer's tokens grouped
into words; a word's row is the mean of its tokens' rows, summed over each key word's tokens (against a map
written by hand); the command's picture has the predicted size and its table the library's numbers; a word
not in the text, or not one word, is a one-line error with exit code 2 that leaves no file behind."""

import random

import pytest
import torch
from matplotlib.image import imread

import tformer
from tformer.cli import main
from tformer.inference import load
from tformer.tokenization import BPETokenizer, CharTokenizer, WordPieceTokenizer
from tformer.training.checkpoint import save_checkpoint
from tformer.viz import figures, focus
from tformer.viz.attention import AttentionMap, Word, attention_maps, words

VOCABULARY = "the a house cat dog sees big small red blue runs sleeps".split()
TEXT = [" ".join(random.Random(i).choices(VOCABULARY, k=6)) + "." for i in range(60)]
SENTENCE = "the big cat didn't sleep."


def texts(ws: tuple[Word, ...], n: int) -> list[str]:
    """The words' texts, after checking that their tokens are 0..n-1 in order, each in one word."""
    assert [k for w in ws for k in w.tokens] == list(range(n))
    return [w.text for w in ws]


# --- words ----------------------------------------------------------------------------------------------------


def test_bpe_pieces_join_into_words_and_punctuation_at_the_ends_stands_alone() -> None:
    bpe = BPETokenizer.train(TEXT * 3, vocab_size=270)  # few merges: most words are several pieces
    ids = bpe.encode(SENTENCE)
    ws = words(bpe, ids)
    assert [t for t in texts(ws, len(ids)) if t != "·"] == ["the", "big", "cat", "didn't", "sleep", "."]
    assert max(len(w.tokens) for w in ws) >= 3  # "didn't" and "sleep" are split


def test_characters_and_word_pieces_join_into_words() -> None:
    chars = CharTokenizer.train(TEXT + ["ok, no"])
    ids = chars.encode("the cat, ok.")
    assert texts(words(chars, ids), len(ids)) == ["the", "·", "cat", ",", "·", "ok", "."]
    pieces = WordPieceTokenizer.train(TEXT * 3, vocab_size=100)
    ids = [pieces.bos_id, *pieces.encode("the cats"), pieces.eos_id]
    ws = words(pieces, ids)
    assert texts(ws, len(ids)) == ["[CLS]", "the", "cats", "[SEP]"]
    assert len(ws[2].tokens) == 2  # cat ##s


# --- one word's row -------------------------------------------------------------------------------------------


def hand_map() -> AttentionMap:
    torch.manual_seed(0)
    weights = torch.randn(2, 3, 4, 4).softmax(-1)  # (L, H, Tq, Tk)
    labels = ["The", "stre", "et", "."]
    ws = (Word("The", (0,)), Word("street", (1, 2)), Word(".", (3,)))
    return AttentionMap(part="encoder", title="self", weights=weights, queries=labels, keys=labels,
                        query_words=ws, key_words=ws)


def test_a_split_words_row_is_its_pieces_mean_summed_over_each_key_word() -> None:
    m = hand_map()
    row = focus.word_row(m, "Street")  # case aside
    mean = (m.weights[:, :, 1] + m.weights[:, :, 2]) / 2  # (L, H, Tk)
    assert torch.allclose(row.weights, torch.stack([mean[..., 0], mean[..., 1] + mean[..., 2], mean[..., 3]], -1))
    assert torch.allclose(row.weights.sum(-1), torch.ones(2, 3))
    assert (row.word, row.tokens, row.keys, row.itself) == ("street", ["stre", "et"], ["The", "street", "."], 1)
    assert torch.equal(focus.word_row(m, "THE").weights[..., 1], m.weights[:, :, 0, 1] + m.weights[:, :, 0, 2])
    bare = AttentionMap(part="cross", title="x", weights=m.weights, queries=["x", "y", "et", "z"], keys=m.keys)
    row = focus.word_row(bare, "et")  # a map without words: each token is one
    assert row.keys == m.keys and torch.equal(row.weights, m.weights[:, :, 2]) and row.itself is None


def test_finding_a_word_ignores_case_and_end_punctuation_and_takes_the_first() -> None:
    ws = ["The", "cat,", "didn't", "the", "."]
    assert focus.find_word(ws, "the") == 0 and focus.find_word(ws, "THE") == 0
    assert focus.find_word(ws, "cat") == 1 and focus.find_word(ws, '"cat"') == 1
    assert focus.find_word(ws, "didn't") == 2 and focus.find_word(ws, ".") == 4
    assert focus.find_word(ws, "dog") is None and focus.find_word(ws, "'") is None


# --- the command ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def translator(tmp_path_factory):  # noqa: ANN001, ANN201
    """An untrained encoder-decoder (2 layers, 4 heads) whose BPE splits most words into pieces."""
    bpe = BPETokenizer.train(TEXT * 3, vocab_size=270)
    torch.manual_seed(0)
    config = tformer.preset("transformer-tiny", {"d_model": 32, "d_ff": 64, "n_heads": 4, "n_layers": 2,
                                                 "max_len": 64, "vocab_size": bpe.vocab_size, "pad_id": bpe.pad_id,
                                                 "bos_id": bpe.bos_id, "eos_id": bpe.eos_id})
    path = tmp_path_factory.mktemp("focus") / "mt"
    save_checkpoint(path, model=tformer.build_model(config), config=config, tokenizer=bpe)
    return path


def table(out: str) -> tuple[list[str], dict[tuple[int, int], list[float]]]:
    """The key words and the rows (layer, head) -> weights of `plot attention --query`'s printed table."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("layer head"))
    rows = {}
    for line in lines[at + 1:]:
        layer, head, *values = line.split()
        rows[int(layer), int(head)] = [float(v) for v in values]
    return lines[at].split()[2:], rows


def size(row: focus.WordRow, n_rows: int) -> tuple[float, float]:
    return (focus.ROW_LABELS + focus.COLORBAR + max(4.0, focus.COLUMN * len(row.keys)),
            focus.TITLE + focus.LABELS + focus.ROW * max(3, n_rows))


def test_plot_attention_query_draws_and_prints_the_words_row(translator, tmp_path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "it.png"
    assert main(["plot", "attention", "--checkpoint", str(translator), "--text", SENTENCE, "--query", "sleep",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "\u201csleep\u201d is 3 tokens" in printed
    loaded = load(translator)
    row, _, _ = focus.focus(attention_maps(loaded.model, loaded.tokenizer, SENTENCE), "sleep")
    assert row.part == "encoder" and len(row.tokens) == 3  # the first map by default
    keys, rows = table(printed)
    assert keys == [k for k in row.keys] and sorted(rows) == [(li, hi) for li in range(2) for hi in range(4)]
    for (li, hi), values in rows.items():
        assert values == pytest.approx(row.weights[li, hi].tolist(), abs=5e-4)
        assert sum(values) == pytest.approx(1, abs=len(values) * 5e-4)
    image = imread(out)
    width, height = size(row, 8)
    assert image.shape[:2] == (round(height * figures.DPI), round(width * figures.DPI))
    assert image[..., :3].var() > 0


def test_plot_attention_query_in_one_head_of_the_cross_attention(translator, tmp_path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "cross.png"
    assert main(["plot", "attention", "--checkpoint", str(translator), "--text", SENTENCE, "--target", "a red house",
                 "--part", "cross", "--layer", "1", "--head", "2", "--query", "house", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cross-attention" in printed
    keys, rows = table(printed)
    assert list(rows) == [(1, 2)] and "didn't" in keys  # the source's words
    loaded = load(translator)
    maps = attention_maps(loaded.model, loaded.tokenizer, SENTENCE, target="a red house")
    row, layers, heads = focus.focus(maps, "house", part="cross", layer=1, head=2)
    assert (layers, heads, row.itself) == ([1], [2], None)
    assert rows[1, 2] == pytest.approx(row.weights[1, 2].tolist(), abs=5e-4)
    width, height = size(row, 1)
    assert imread(out).shape[:2] == (round(height * figures.DPI), round(width * figures.DPI))


@pytest.mark.parametrize(("extra", "words_"), [
    (["--query", "dog"], ["--query 'dog' is not a word of the encoder", "the big cat didn't sleep .",
                          "(tokens: t|h|e|"]),
    (["--query", "big cat"], ["--query 'big cat' is not one word"]),
    (["--query", ""], ["--query '' is not one word"]),
    (["--query", "cat", "--part", "nope"], ["--part 'nope' is not in this model", "encoder, decoder, cross"]),
    (["--query", "cat", "--head", "4"], ["--head 4 is out of range", "(0..3)"]),
], ids=["not-in-the-text", "two-words", "empty", "bad-part", "bad-head"])
def test_query_bad_values_are_one_line_errors(translator, tmp_path, capsys, extra, words_) -> None:  # noqa: ANN001
    args = ["plot", "attention", "--checkpoint", str(translator), "--text", SENTENCE, "--out", str(tmp_path / "a.png")]
    assert main(args + extra) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("tformer: error: ") and captured.err.count("\n") == 1, captured.err
    assert all(w in captured.err for w in words_), captured.err
    assert captured.out == "" and list(tmp_path.iterdir()) == []
