"""Where one word attends: the row of one query word of an attention map, over the map's key words, in every
layer and head; drawn as a heat strip (a row per layer and head, a column per key word, each cell's weight
written in it) and given as a table of the same numbers. The Transformer notes' example is the word "it" in
"The animal didn't cross the street because it was too tired" (`tformer plot attention --query it`).

Words are the map's groups of tokens (`viz.attention.words`). A word split into pieces ("street" ->
"stre" + "et") is read as Clark et al. read BERT's (https://arxiv.org/abs/1906.04341, section 2): attention
*from* a split word is the mean of its pieces' rows, attention *to* a split word the sum of its pieces'
columns, so each row of the strip still sums to 1.

L layers, H heads, Tq query tokens, Tk key tokens, W key words.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tformer.errors import UserError
from tformer.viz.attention import AttentionMap, Word, select

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLUMN = 0.62  # inches per key word
ROW = 0.32  # inches per layer and head
ROW_LABELS = 1.3  # inches for "layer l, head h" on the left
TITLE = 0.75  # inches for the two lines of the title
LABELS = 1.0  # inches for the key words below
COLORBAR = 0.9
WRITTEN = 40  # the most key words whose cells get their weight written in them
LISTED = 40  # the most words and tokens an error message lists


@dataclass(frozen=True)
class WordRow:
    """Where one query word of a map attends, in every layer and head."""

    part: str
    title: str  # the map's title
    word: str  # the query word as decoded
    tokens: list[str]  # the labels of its tokens
    keys: list[str]  # W key words
    weights: Tensor  # (L, H, W): the mean of the word's token rows, summed over each key word's tokens
    itself: int | None  # the column of the query word itself, in self-attention


def words_of(labels: list[str], words: tuple[Word, ...]) -> tuple[Word, ...]:
    """A map's words, or each token a word for a map made without them."""
    return words or tuple(Word(label, (i,)) for i, label in enumerate(labels))


def check_query(query: str) -> str:
    """`query` if it is one word: not empty, no whitespace in it; else a UserError naming it."""
    if not query.strip() or any(c.isspace() for c in query):
        raise UserError(f"--query {query!r} is not one word; give one word of the text, such as it")
    return query


def _bare(text: str) -> str:
    """`text` casefolded, less the punctuation at its ends ("Tired." -> "tired")."""
    start, end = 0, len(text)
    while start < end and unicodedata.category(text[start]).startswith("P"):
        start += 1
    while end > start and unicodedata.category(text[end - 1]).startswith("P"):
        end -= 1
    return text[start:end].casefold()


def find_word(words: list[str], query: str) -> int | None:
    """The index of the first of `words` that is `query`, ignoring case and punctuation at either end (a word
    of punctuation alone must match itself); None if none is."""
    for i, word in enumerate(words):
        if word.casefold() == query.casefold() or (_bare(query) and _bare(word) == _bare(query)):
            return i
    return None


def _listed(items: list[str], sep: str) -> str:
    return sep.join(items[:LISTED]) + (f"{sep}... ({len(items)} in all)" if len(items) > LISTED else "")


def word_row(m: AttentionMap, query: str) -> WordRow:
    """Where the first word of `m`'s queries that is `query` attends; a UserError naming it, the queries'
    words and their tokens where no word is."""
    check_query(query)
    rows, cols = words_of(m.queries, m.query_words), words_of(m.keys, m.key_words)
    found = find_word([w.text for w in rows], query)
    if found is None:
        raise UserError(f"--query {query!r} is not a word of the {m.part} attention's queries; they are: "
                        f"{_listed([w.text for w in rows if w.text != '·'], ' ')} (tokens: {_listed(m.queries, '|')})")
    mine = list(rows[found].tokens)
    weights = m.weights[:, :, mine].mean(dim=2)  # (L, H, Tk): the mean of the word's token rows
    weights = torch.stack([weights[..., list(w.tokens)].sum(-1) for w in cols], dim=-1)  # (L, H, W)
    same = m.queries == m.keys and rows == cols
    return WordRow(part=m.part, title=m.title, word=rows[found].text, tokens=[m.queries[i] for i in mine],
                   keys=[w.text for w in cols], weights=weights, itself=found if same else None)


def focus(maps: list[AttentionMap], query: str, *, part: str | None = None, layer: int | None = None,
          head: int | None = None) -> tuple[WordRow, list[int], list[int]]:
    """(row, layer indices, head indices): where `query` attends in the map of `part` (by default the first
    map: an encoder-decoder's encoder, a GPT's or BERT's only one), in `layer` and `head` if given."""
    ((m, layers, heads),) = select(maps, part=part or maps[0].part, layer=layer, head=head)
    return word_row(m, query), layers, heads


def describe(row: WordRow) -> str:
    """One line on how the row was read from the tokens."""
    if len(row.tokens) > 1:
        source = f"\u201c{row.word}\u201d is {len(row.tokens)} tokens ({'|'.join(row.tokens)}): their rows' mean"
    else:
        source = f"\u201c{row.word}\u201d is one token"
    return f"{source}; a column is a word, its tokens' weights summed; each row sums to 1"


def plot_word_row(row: WordRow, *, layers: list[int], heads: list[int]) -> Figure:
    """The heat strip: a row per (layer, head), a column per key word, colours on [0, 1], each cell's weight
    written in it (up to `WRITTEN` words), the query word's own column in bold, a line between layers."""
    from tformer.viz.figures import heatmap, new_figure

    pairs = [(li, hi) for li in layers for hi in heads]
    matrix = torch.stack([row.weights[li, hi] for li, hi in pairs]).numpy()  # (len(pairs), W)
    width = ROW_LABELS + COLORBAR + max(4.0, COLUMN * len(row.keys))
    fig = new_figure(width, TITLE + LABELS + ROW * max(3, len(pairs)))
    fig.suptitle(f"{row.title}: where \u201c{row.word}\u201d attends\n{describe(row)}", fontsize=9)
    ax = fig.subplots()
    image = heatmap(ax, matrix, rows=[f"layer {li}, head {hi}" for li, hi in pairs], cols=row.keys,
                    inches=COLUMN * len(row.keys), vmin=0.0, vmax=1.0)
    ax.tick_params(axis="y", labelsize=8)
    for label in ax.get_xticklabels():  # words read better aslant than upright
        label.set(rotation=40, horizontalalignment="right", rotation_mode="anchor")
    if row.itself is not None:
        ax.get_xticklabels()[row.itself].set_fontweight("bold")
    if len(row.keys) <= WRITTEN:
        for r, values in enumerate(matrix):
            for c, x in enumerate(values):
                ax.text(c, r, f"{x:.2f}".lstrip("0"), ha="center", va="center", fontsize=7,
                        color="white" if x < 0.6 else "black")
    for r in range(len(heads), len(pairs), len(heads)):  # between layers
        ax.axhline(r - 0.5, color="white", linewidth=2)
    fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    return fig


def word_table(row: WordRow, *, layers: list[int], heads: list[int]) -> str:
    """The strip's numbers as text: a header line, then a line per (layer, head), three decimals."""
    widths = [max(5, len(k)) for k in row.keys]
    lines = [f"{row.title}: where \u201c{row.word}\u201d attends ({describe(row)})",
             "layer head  " + " ".join(k.rjust(w) for k, w in zip(row.keys, widths, strict=True))]
    for li in layers:
        for hi in heads:
            values = " ".join(f"{x:.3f}".rjust(w) for x, w in zip(row.weights[li, hi].tolist(), widths, strict=True))
            lines.append(f"{li:5d} {hi:4d}  {values}")
    return "\n".join(lines)


__all__ = ["WordRow", "check_query", "describe", "find_word", "focus", "plot_word_row", "word_row", "word_table"]
