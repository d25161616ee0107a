"""A trained translator scored where each source has one right answer (the synthetic corpus: a sequence and
its reverse or copy): exact-sequence and token accuracy by source length, on a split of its recipe's data.

Lengths and tokens are the checkpoint's own tokenizer's (on the synthetic corpus, one token per symbol): a
source's length is the number of tokens the encoder reads (no </s>), and hypothesis and reference are compared
token by token (`evaluation.accuracy`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tformer.data.lines import normalise_text
from tformer.decoding.settings import DecodeConfig
from tformer.evaluation.accuracy import accuracy_by_length, length_buckets
from tformer.inference.loaded import load
from tformer.inference.translate import translate
from tformer.tasks.translation import DataConfig, load_split

BUCKET_WIDTH = 10  # source lengths per bucket


def source_length_range(data: DataConfig, lengths: list[int]) -> tuple[int, int]:
    """The source lengths the buckets span: from the shortest to the longest source seen, and on the synthetic
    corpus at least its [min_len, max_len], so that runs on one corpus share their buckets."""
    bounds = [data.synthetic.min_len, data.synthetic.max_len] if data.corpus == "synthetic" else []
    seen = [*lengths, *bounds] or [1]
    return min(seen), max(seen)


def accuracy_of_checkpoint(checkpoint: str | Path, data: DataConfig, split: str, decode: DecodeConfig, *,
                           width: int = BUCKET_WIDTH, limit: int | None = None, progress: bool = False,
                           device: str = "cpu") -> dict[str, Any]:
    """Translate a split (its first `limit` pairs) with a checkpoint and measure it: {"sequences", "exact",
    "token_accuracy" (over the whole split), "buckets" (`evaluation.accuracy.accuracy_by_length`, `width`
    source lengths each), "examples" (the first few source, reference and hypothesis)}."""
    loaded = load(checkpoint, command="evaluate", device=device)
    pairs = load_split(data, split)[:limit]
    hyps = translate(loaded.decoder, loaded.tokenizer, [s for s, _ in pairs], decode, truncate=True,
                     progress=progress)
    tok = loaded.tokenizer
    lengths = [len(ids) for ids in tok.encode_batch([normalise_text(s) for s, _ in pairs])]
    hyp_ids = tok.encode_batch(hyps)
    ref_ids = tok.encode_batch([normalise_text(t) for _, t in pairs])
    lo, hi = source_length_range(data, lengths)
    (whole,) = accuracy_by_length(lengths, hyp_ids, ref_ids, [(lo, hi)])
    return {"split": split, "sequences": len(pairs), "exact": whole["exact"],
            "token_accuracy": whole["token_accuracy"],
            "buckets": accuracy_by_length(lengths, hyp_ids, ref_ids, length_buckets(lo, hi, width)),
            "examples": [{"source": s, "reference": t, "hypothesis": h}
                         for (s, t), h in zip(pairs[:5], hyps[:5], strict=True)]}


__all__ = ["BUCKET_WIDTH", "accuracy_of_checkpoint"]
