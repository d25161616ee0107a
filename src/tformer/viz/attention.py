"""Attention maps: the softmax(Q K^T / sqrt(k)) weights of every layer and head for one example, and a
picture of them as a grid (rows: layers, columns: heads) of heatmaps with the tokens on the axes.

Which maps a model has:
    EncoderDecoder  encoder self-attention (source x source), decoder self-attention (causal, target inputs
                    x target inputs) and cross-attention: row t is the decoder position that predicts target
                    token y_t (labelled y_t, the last row </s>) and its columns the source tokens, so the
                    matrix is the model's soft source-target alignment (Bahdanau et al. 2015, fig. 3).
    GPT             causal self-attention over the prompt (after its start token, if the model has one).
    BERT            self-attention over [CLS] text [SEP].
    RNNEncoderDecoder  with attention: its alignment, one map (layer 0, head 0 to --layer and --head,
                    titled by its MATCH: "decoder attention (additive)") with the rows and columns of the
                    cross-attention above; without attention it has none, and is refused.

Each map also groups its query and key tokens into words (`words`), for `viz.focus`, which reads one word's row.

The weights come from `Attention.record_weights`, which runs the eager reference kernel and keeps them; only
exact attention has such a matrix, so other kinds are refused with a ValueError. An RNN decoder's attention
(`nn.alignment.Alignment`) records its weights the same way, one decoder step after the other.

L layers, H query heads, Tq query tokens, Tk key tokens.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor, nn

from tformer.data.device import device_of
from tformer.data.lines import normalise_text
from tformer.errors import UserError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from tformer.tokenization import Tokenizer

CELL = 2.4  # inches per heatmap in a grid
ZOOM = 6.5  # inches for a single heatmap (--layer and --head given)
TITLE = 0.5  # inches for a section's title
LABELS = 1.1  # inches for the tick labels on the left of / below a section
COLORBAR = 0.9  # inches for a section's colorbar
ROLE_NAMES = {"pad_id": "<pad>", "bos_id": "<s>", "eos_id": "</s>", "unk_id": "<unk>"}


class Word(NamedTuple):
    """A word of a map's queries or keys: its text and the positions of its tokens."""

    text: str  # as decoded ("street", "didn't"), a special token's name, "·" for whitespace
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class AttentionMap:
    """One kind of attention in a model, for one example."""

    part: str  # "encoder", "decoder" or "cross"
    title: str
    weights: Tensor  # (L, H, Tq, Tk): every row a probability distribution over the keys
    queries: list[str]  # Tq row labels
    keys: list[str]  # Tk column labels
    query_words: tuple[Word, ...] = ()  # the rows' tokens grouped into words (`words`); (): a word a token
    key_words: tuple[Word, ...] = ()  # the same for the columns
    cell: str = "layer {layer}, head {head}"  # each heatmap's title; an RNN's one map names its MATCH instead


# --- computing the maps ---------------------------------------------------------------------------------


def check_exact(model: nn.Module) -> None:
    """A ValueError unless every attention layer of `model` computes exact softmax attention (an RNN
    encoder-decoder's attention does; one without attention has no map)."""
    from tformer.models import RNNEncoderDecoder
    from tformer.nn.attention import Attention

    if isinstance(model, RNNEncoderDecoder):
        if model.decoder.alignment is None:
            raise UserError("attention maps need attention; this RNN encoder-decoder has match='none' (its "
                             "decoder sees the source only through the encoder's final state): train one with "
                             "model.overrides.match dot, general, additive or cosine")
        return
    kind = model.config.attention.kind
    mixers = [m for name, m in model.named_modules() if name.endswith(".mixer")]
    if not model.config.attention.exact or not all(isinstance(m, Attention) and m.kernel.exact for m in mixers):
        raise UserError(f"attention maps need exact attention (attention.kind sdpa or eager); this model has "
                         f"attention.kind={kind!r}")


@contextmanager
def recording(layers: list[nn.Module]) -> Iterator[None]:
    """Within the body, each `Attention` in `layers` keeps its weights; afterwards it runs as before."""
    for a in layers:
        a.record_weights = True
    try:
        yield
    finally:
        for a in layers:
            a.record_weights, a.weights = False, None


def record(model: nn.Module, parts: dict[str, list[nn.Module]], forward: Callable[[], object]) -> dict[str, Tensor]:
    """Run `forward()` in eval mode without gradients; returns each part's weights stacked (L, H, Tq, Tk)."""
    was_training = model.training
    model.eval()
    try:
        with recording([a for layers in parts.values() for a in layers]), torch.no_grad():
            forward()
            return {part: torch.stack([a.weights[0] for a in layers]).float().cpu() for part, layers in parts.items()}
    finally:
        model.train(was_training)


def token_label(tokenizer: Tokenizer, i: int) -> str:
    """A short, visible label for token id `i`: its decoded text, or its name for a special token."""
    text = tokenizer.decode([i])
    if text.strip():
        return text.strip()
    if text:
        return "·"  # a whitespace token (a space, a newline)
    name = tokenizer.token(i)
    roles = {getattr(tokenizer, role): label for role, label in ROLE_NAMES.items()}
    return name or roles.get(i) or f"#{i}"


def words(tokenizer: Tokenizer, ids: list[int]) -> tuple[Word, ...]:
    """The tokens `ids` grouped into words, in order, by the text each token adds to the decoded text. A run
    of tokens each added without whitespace before it is one word (" t" + "ired", "didn" + "'t", "didn" +
    "'" + "t"), less the tokens of punctuation alone at either end of the run, each a word of its own
    ("tired" + "."); a special token (it adds no text) and a token of whitespace alone are words of their
    own. A word's text is what its tokens add, stripped; a special token's is its label (`token_label`).
    Only the few tokens before each are decoded with it, so the cost is linear in the length."""
    added = []
    for k in range(len(ids)):
        before = tokenizer.decode(ids[max(0, k - 4):k])
        longer = tokenizer.decode(ids[max(0, k - 4):k + 1])
        added.append(longer[len(before):] if longer.startswith(before) else tokenizer.decode(ids[k:k + 1]))
    runs: list[list[int]] = []
    for k, text in enumerate(added):
        if k == 0 or not text.strip() or not added[k - 1].strip() or text[0].isspace():
            runs.append([k])
        else:
            runs[-1].append(k)

    def punctuation(k: int) -> bool:
        return bool(added[k].strip()) and all(unicodedata.category(c).startswith("P") for c in added[k].strip())

    def word(tokens: list[int]) -> Word:
        text = "".join(added[k] for k in tokens).strip()
        return Word(text or token_label(tokenizer, ids[tokens[0]]), tuple(tokens))

    out: list[Word] = []
    for run in runs:
        lo, hi = 0, len(run)
        while lo < hi and punctuation(run[lo]):
            lo += 1
        while hi > lo and punctuation(run[hi - 1]):
            hi -= 1
        out += [word([k]) for k in run[:lo]] + ([word(run[lo:hi])] if lo < hi else []) + [word([k]) for k in run[hi:]]
    return tuple(out)


def _batch(model: nn.Module, ids: list[int]) -> Tensor:  # (1, T) on the model's device
    return torch.tensor([ids], device=device_of(model))


def _check_length(n: int, max_len: int, what: str) -> None:
    if n > max_len:
        raise UserError(f"{what} has {n} tokens, more than the model's max_len={max_len}; give a shorter one")


def attention_maps(model: nn.Module, tokenizer: Tokenizer, text: str, *,
                   target: str | None = None) -> list[AttentionMap]:
    """The attention maps of `model` on `text` (for an encoder-decoder, the source; its `target` defaults to
    the model's greedy translation). A target may be as long as any translation: up to the model's max_len
    tokens, where a translation is cut; one that long has no row for the end symbol, which no position is
    left to predict. Every row of every returned matrix sums to 1. A leading byte-order mark of `text` or
    `target` is dropped (`data.lines.normalise_text`)."""
    from tformer.models import GPT, Bert, EncoderDecoder, RNNEncoderDecoder

    check_exact(model)
    ids = tokenizer.encode(normalise_text(text))
    if not ids:
        raise UserError(f"--text {text!r} has no tokens; give a sentence")
    if isinstance(model, EncoderDecoder | RNNEncoderDecoder):
        return _seq2seq_maps(model, tokenizer, ids, target)
    if target is not None:
        raise UserError(f"--target is only for an encoder-decoder, not a {type(model).__name__}")
    if isinstance(model, GPT):
        bos = model.config.bos_id
        ids = ([] if bos is None else [bos]) + ids
        _check_length(len(ids), model.config.max_len, "--text")
        weights = record(model, {"decoder": [x.mixer for x in model.decoder.layers]},
                         lambda: model(_batch(model, ids)))
        labels, groups = [token_label(tokenizer, i) for i in ids], words(tokenizer, ids)
        return [AttentionMap(part="decoder", title="self-attention (causal)", weights=weights["decoder"],
                             queries=labels, keys=labels, query_words=groups, key_words=groups)]
    bert = model if isinstance(model, Bert) else getattr(model, "bert", None)
    if not isinstance(bert, Bert):
        raise UserError(f"attention maps know EncoderDecoder, RNNEncoderDecoder, GPT and BERT models, not "
                         f"{type(model).__name__}")
    ids = [i for i in (tokenizer.bos_id, *ids, tokenizer.eos_id) if i is not None]  # [CLS] text [SEP]
    _check_length(len(ids), bert.config.max_len, "--text")
    weights = record(model, {"encoder": [x.mixer for x in bert.encoder.layers]},
                     lambda: model(_batch(model, ids)))
    labels, groups = [token_label(tokenizer, i) for i in ids], words(tokenizer, ids)
    return [AttentionMap(part="encoder", title="self-attention", weights=weights["encoder"], queries=labels,
                         keys=labels, query_words=groups, key_words=groups)]


def _seq2seq_maps(model: nn.Module, tokenizer: Tokenizer, src_ids: list[int], target: str | None) -> list[AttentionMap]:
    from tformer.decoding import greedy
    from tformer.models import RNNEncoderDecoder

    config = model.config
    _check_length(len(src_ids), config.max_len, "--text")
    src = _batch(model, src_ids)  # (1, S)
    if target is None:
        tgt_ids = greedy(model, src, max_len_a=1.5, max_len_b=10)[0]  # the model's own translation
    else:
        tgt_ids = tokenizer.encode(normalise_text(target))
        if not tgt_ids:
            raise UserError(f"--target {target!r} has no tokens; give a sentence or leave it out")
    _check_length(len(tgt_ids), config.max_len, "the target")
    tgt_in, predicted = [config.decoder_start_id, *tgt_ids], [*tgt_ids, config.eos_id]  # inputs shifted right
    if len(tgt_in) > config.max_len:  # as long as a translation may be, cut there: no end symbol follows it
        tgt_in, predicted = tgt_in[:-1], predicted[:-1]
    source = [token_label(tokenizer, i) for i in src_ids]
    inputs = [token_label(tokenizer, i) for i in tgt_in]
    outputs = [token_label(tokenizer, i) for i in predicted]  # what each position predicts
    source_words, input_words = words(tokenizer, src_ids), words(tokenizer, tgt_in)
    output_words = words(tokenizer, predicted)
    if isinstance(model, RNNEncoderDecoder):  # one attention, of the decoder over the source (`check_exact`)
        weights = record(model, {"cross": [model.decoder.alignment]}, lambda: model(src, _batch(model, tgt_in)))
        return [AttentionMap(part="cross", title=f"decoder attention ({config.match} match): each target token "
                             "(row) over the source", weights=weights["cross"], queries=outputs, keys=source,
                             query_words=output_words, key_words=source_words,
                             cell=f"decoder attention ({config.match})")]
    parts = {"encoder": [x.mixer for x in model.encoder.layers],
             "decoder": [x.mixer for x in model.decoder.layers],
             "cross": [x.cross_attn for x in model.decoder.layers]}
    weights = record(model, parts, lambda: model(src, _batch(model, tgt_in)))
    return [
        AttentionMap(part="encoder", title="encoder self-attention", weights=weights["encoder"], queries=source,
                     keys=source, query_words=source_words, key_words=source_words),
        AttentionMap(part="decoder", title="decoder self-attention (causal)", weights=weights["decoder"],
                     queries=inputs, keys=inputs, query_words=input_words, key_words=input_words),
        AttentionMap(part="cross", title="cross-attention: each target token (row) over the source",
                     weights=weights["cross"], queries=outputs, keys=source, query_words=output_words,
                     key_words=source_words),
    ]


# --- drawing them ---------------------------------------------------------------------------------------


def _indices(count: int, chosen: int | None, what: str, part: str) -> list[int]:
    if chosen is None:
        return list(range(count))
    if not 0 <= chosen < count:
        raise UserError(f"--{what} {chosen} is out of range: the {part} attention has {count} {what}s "
                         f"(0..{count - 1})")
    return [chosen]


def select(maps: list[AttentionMap], *, part: str | None = None, layer: int | None = None,
           head: int | None = None) -> list[tuple[AttentionMap, list[int], list[int]]]:
    """(map, layer indices, head indices) to draw: the maps of `part` (all by default), the one `layer`
    and / or `head` if given (0-based); a ValueError naming a value out of range."""
    parts = [m.part for m in maps]
    if part is not None and part not in parts:
        raise UserError(f"--part {part!r} is not in this model; it has {', '.join(parts)}")
    return [(m, _indices(m.weights.shape[0], layer, "layer", m.part), _indices(m.weights.shape[1], head, "head",
                                                                                 m.part))
            for m in maps if part is None or m.part == part]


def figure_size(shapes: list[tuple[int, int]]) -> tuple[float, float, float]:
    """(width, height, cell) in inches for sections of (layers, heads) heatmaps stacked vertically."""
    cell = ZOOM if all(r * c == 1 for r, c in shapes) else CELL
    width = LABELS + COLORBAR + cell * max(c for _, c in shapes)
    height = sum(TITLE + LABELS + cell * r for r, _ in shapes)
    return width, height, cell


def plot_attention(maps: list[AttentionMap], *, part: str | None = None, layer: int | None = None,
                   head: int | None = None) -> Figure:
    """One section per map (title, grid of layers x heads, colorbar on [0, 1]); a single large heatmap
    per section when `layer` and `head` are both given."""
    from tformer.viz.figures import heatmap, new_figure

    chosen = select(maps, part=part, layer=layer, head=head)
    width, height, cell = figure_size([(len(ls), len(hs)) for _, ls, hs in chosen])
    fig = new_figure(width, height)
    ratios = [TITLE + LABELS + cell * len(ls) for _, ls, _ in chosen]
    sections = fig.subfigures(len(chosen), 1, height_ratios=ratios, squeeze=False)[:, 0]
    for section, (m, layers, heads) in zip(sections, chosen, strict=True):
        section.suptitle(m.title, fontsize=11)
        axes = section.subplots(len(layers), len(heads), squeeze=False)
        for r, li in enumerate(layers):
            for c, hi in enumerate(heads):
                image = heatmap(axes[r, c], m.weights[li, hi].numpy(), rows=m.queries if c == 0 else [],
                                cols=m.keys if r == len(layers) - 1 else [], inches=cell, vmin=0.0, vmax=1.0)
                axes[r, c].set_title(m.cell.format(layer=li, head=hi), fontsize=8)
        section.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    return fig
