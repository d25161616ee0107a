"""Translating with an encoder-decoder: the decoding settings (`DecodeConfig`, a recipe's `decode:` section)
and `translate`, which the CLI, the server and a translation recipe's evaluation all call.

A translator's run directory holds recipe.yaml beside its checkpoints; its `decode:` section is how the run
chose to decode, so translating with one of its checkpoints starts from those settings (`run_decode`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from tformer.configio import check_finite, from_dict, read_yaml
from tformer.data.device import device_of
from tformer.data.lines import TRUNCATE_NOTE, check_line_lengths, normalise_text
from tformer.data.padding import pad
from tformer.decoding import beam_search, greedy
from tformer.decoding.beam import STOPPING, check_beam
from tformer.decoding.layout import DecodingLayout
from tformer.errors import UserError
from tformer.inference.loaded import check_kind


@dataclass(kw_only=True)
class DecodeConfig:
    beam: int = 4
    lenpen: float = 1.0  # fairseq: score = log p / length ** lenpen
    max_len_a: float = 1.5  # at most a * source_length + b target tokens
    max_len_b: int = 10
    stopping: str = "finished"  # beam search: "finished" (as fairseq, CTranslate2) or "best" (decoding.beam.STOPPING)
    batch_size: int = 64  # sentences per decoding batch

    def __post_init__(self) -> None:
        check_finite(self, where="decode.")
        check_beam(self.beam, what="decode.beam")
        if self.batch_size < 1:
            raise UserError(f"decode.batch_size={self.batch_size} must be at least 1")
        if self.stopping not in STOPPING:
            raise UserError(f"decode.stopping={self.stopping!r} is not allowed; choose one of {', '.join(STOPPING)} "
                             "(finished: once beam hypotheses have finished; best: once none can beat them)")
        if self.max_len_a < 0 or self.max_len_b < 0:
            raise UserError(f"decode.max_len_a={self.max_len_a} and decode.max_len_b={self.max_len_b} must be >= 0 "
                             "(at most a * source length + b target tokens)")


def decode_config(base: DecodeConfig | None = None, *, beam: int | None = None, lenpen: float | None = None,
                  stopping: str | None = None, batch_size: int | None = None) -> DecodeConfig:
    """`base`'s settings (the defaults without one), with those given here (not None) over them; checked as
    a recipe's own are."""
    given = {"beam": beam, "lenpen": lenpen, "stopping": stopping, "batch_size": batch_size}
    return DecodeConfig(**{**(vars(base) if base is not None else {}),
                           **{k: v for k, v in given.items() if v is not None}})


def run_decode(checkpoint: str | Path, *, command: str = "translate") -> DecodeConfig | None:
    """The decoding settings of the run a translator's checkpoint belongs to (the `decode:` section of
    RUN_DIR/recipe.yaml beside RUN_DIR/last), or None if there is no recipe.yaml. The checkpoint's kind is
    checked first, for `command`, so the run of another task is named as such."""
    check_kind(checkpoint, command)
    path = Path(checkpoint).resolve().parent / "recipe.yaml"
    if not path.is_file():
        return None
    try:
        recipe = read_yaml(path, what="the file") or {}
        if not isinstance(recipe, dict):
            raise UserError(f"the file holds a {type(recipe).__name__}, not a mapping of sections")
        return from_dict(DecodeConfig, recipe.get("decode") or {}, where="decode.")
    except (ValueError, TypeError) as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        raise UserError(f"{path} (the run's recipe beside the checkpoint) is not a valid recipe: {reason}") from None


@torch.inference_mode()
def translate(model: nn.Module, tokenizer: Any, sentences: list[str], decode: DecodeConfig, *,
              truncate: bool = False, where: str = "input", progress: bool = False, first_line: int = 1,
              layout: DecodingLayout | None = None) -> list[str]:
    """Detokenized translations, in input order; batches sorted by length to waste little padding.
    A sentence longer than the model's context (max_len tokens) is refused with a ValueError naming its
    line of `where` (counted from `first_line`), unless `truncate`, which translates its first max_len tokens
    (as evaluation over a corpus does). `progress`: a bar over the sentences on stderr (a test set with beam
    search takes minutes). `layout`: the model's decoding layout, kept by its holder (`Loaded.layout`).
    A sentence's leading byte-order mark is dropped (`data.lines.normalise_text`)."""
    ids = tokenizer.encode_batch([normalise_text(s) for s in sentences])
    limit = model.config.max_len
    if not truncate:
        check_line_lengths(map(len, ids), limit=limit, max_len=limit, where=where, note=TRUNCATE_NOTE,
                           first=first_line)
    ids = [x[:limit] for x in ids]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = [""] * len(ids)
    todo = [i for i in order if ids[i]]  # an empty line translates to an empty line
    bar = tqdm(total=len(sentences), initial=len(sentences) - len(todo), desc="translating", unit="sentence",
               file=sys.stderr, disable=not progress, dynamic_ncols=True)
    for start in range(0, len(todo), decode.batch_size):
        chunk = todo[start : start + decode.batch_size]
        src = pad([ids[i] for i in chunk], tokenizer.pad_id, device=device_of(model))  # (B, S)
        common = dict(max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, layout=layout)
        if decode.beam == 1:
            tokens = greedy(model, src, **common)
        else:
            tokens = [h[0].tokens for h in beam_search(model, src, beam=decode.beam, lenpen=decode.lenpen,
                                                       stopping=decode.stopping, **common)]
        for i, t in zip(chunk, tokens, strict=True):
            out[i] = tokenizer.decode(t)
        bar.update(len(chunk))
    bar.close()
    return out


__all__ = ["DecodeConfig", "decode_config", "run_decode", "translate"]
