"""Classifying texts with a fine-tuned BERT: [CLS] text [SEP] -> the pooled [CLS] vector -> a linear layer ->
class probabilities. The CLI (`tformer classify`), the server and a classification recipe's training and
evaluation share the encoding here.

B batch, T length, C classes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from tformer.configio import shown
from tformer.data.device import device_of, to_device
from tformer.data.lines import check_line_chars, check_line_lengths, normalise_text
from tformer.data.padding import pad, valid_mask
from tformer.errors import UserError, allocating
from tformer.tokenization import Tokenizer


class ClassBatch(NamedTuple):
    ids: Tensor  # (B, T) [CLS] text [SEP], padded
    valid: Tensor  # (B, T)
    labels: Tensor  # (B,)


def encode_texts(tokenizer: Tokenizer, texts: list[str], max_len: int, *, truncate: bool = True,
                 where: str = "input", first_line: int = 1) -> list[list[int]]:
    """[CLS] pieces [SEP] per text, the pieces cut to max_len - 2 (training data); without `truncate`, a
    text of more pieces is refused with a ValueError naming its line of `where` (user text to classify;
    `first_line`: the number of the first text's line). A text too long at any tokenization is refused (or
    cut) before it is tokenized (`data.lines.check_line_chars`)."""
    texts = check_line_chars(texts, max_len=max_len, where=where, first=first_line, truncate=truncate)
    pieces = tokenizer.encode_batch(texts)
    if not truncate:
        check_line_lengths(map(len, pieces), limit=max_len - 2, max_len=max_len, where=where, first=first_line)
    return [[tokenizer.bos_id, *ids[: max_len - 2], tokenizer.eos_id] for ids in pieces]


def collate_texts(rows: list[list[int]], labels: list[int], *, pad_id: int) -> ClassBatch:
    ids = pad(rows, pad_id)  # (B, T)
    return ClassBatch(ids, valid_mask([len(r) for r in rows], width=ids.shape[1]), torch.tensor(labels))


def check_top(top: int, *, what: str = "top") -> None:
    """The one check of how many labels to return (`top_labels`, `tformer classify --top`, the server's /classify):
    a positive integer that fits 64 bits (more than the model has returns them all); a ValueError naming it as
    `what` otherwise."""
    if top < 1:
        raise UserError(f"{what}={top} must be a positive integer (the labels to return)")
    if top >= 2**63:
        raise UserError(f"{what}={shown(top)} does not fit 64 bits; give an integer in [1, 2**63 - 1]")


def label_names(config: Any) -> list[str]:
    """The classifier's labels as named in training, else LABEL_<i>."""
    return list(config.label_names) or [f"LABEL_{i}" for i in range(config.n_labels)]


@torch.inference_mode()
def classify(model: nn.Module, tokenizer: Tokenizer, texts: list[str], *, truncate: bool = False,
             where: str = "input", batch_size: int = 64, first_line: int = 1) -> Tensor:
    """Class probabilities (N, C) of `texts`, in input order (float32, on the CPU, wherever the model runs).
    A text longer than the context (max_len - 2 pieces) is refused, naming its line of `where` (counted from
    `first_line`), unless `truncate`, which classifies its first pieces. A text's leading byte-order mark is
    dropped (`data.lines.normalise_text`)."""
    texts = [normalise_text(t) for t in texts]
    rows = encode_texts(tokenizer, texts, model.config.max_len, truncate=truncate, where=where,
                        first_line=first_line)
    out = torch.empty(len(rows), model.config.n_labels)
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        with allocating(f"classifying batch {start // batch_size + 1} ({len(chunk)} texts)"):
            batch = to_device(collate_texts(chunk, [0] * len(chunk), pad_id=tokenizer.pad_id), device_of(model))
            out[start : start + len(chunk)] = model(batch.ids, valid=batch.valid).float().softmax(-1).cpu()
    return out


def top_labels(model: nn.Module, tokenizer: Tokenizer, texts: list[str], *, top: int = 1, truncate: bool = False,
               where: str = "input", first_line: int = 1) -> list[list[tuple[str, float]]]:
    """The `top` most likely labels of each text (all of them if there are fewer), with their probabilities,
    most likely first, named by `label_names`. `truncate`, `where`, `first_line`: as `classify`'s."""
    check_top(top)
    config = model.config
    names = label_names(config)
    probs = classify(model, tokenizer, texts, truncate=truncate, where=where, first_line=first_line)  # (N, C)
    best = probs.topk(min(top, config.n_labels), dim=-1)  # (N, top)
    return [[(names[i], p) for p, i in zip(values, indices, strict=True)]
            for values, indices in zip(best.values.tolist(), best.indices.tolist(), strict=True)]


__all__ = ["ClassBatch", "check_top", "classify", "collate_texts", "encode_texts", "label_names", "top_labels"]
