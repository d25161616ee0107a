"""CTranslate2 against tformer on one translator checkpoint: the same translations? how much faster?

    python -m benchmarks.ct2_parity --checkpoint runs/slow-s1/best [--split test] [--limit 200] [--threads 2]
        [--batch-size 64] [--reps 3] [--out FILE]

The checkpoint is written with `tformer.interop.ct2.to_ct2` (float32, and int8) into a temporary directory.
The first --limit sentences of the split (the corpus named by the run's recipe.yaml; the Bible's test split is
Acts), encoded and cut to the model's context, are translated with the recipe's decoding limits (a * n + b)
and length penalty, ours and CTranslate2's, and compared token for token: greedy (float32 and int8) and
beam 4 at CTranslate2's patience 1 (its default) and 4. Then the seconds to translate them all: ours
(`greedy` / `beam_search`, sentences sorted by length and decoded --batch-size at a time, as `translate`
does) against CTranslate2 float32 and int8 (`translate_ids`, which lets CTranslate2 sort and batch), on the
CPU with --threads threads each (torch.set_num_threads; CTranslate2's intra_threads), the contenders
alternating within each of --reps rounds; the median is reported. Prints a Markdown table; `--out` writes JSON.

B batch, S source length.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from benchmarks.common import alternate, write_json
from tformer.data.padding import pad
from tformer.decoding import beam_search, greedy
from tformer.inference import load
from tformer.interop.ct2 import CT2Model, load_ct2, to_ct2, translate_ids
from tformer.tasks.translation import load_split, run_recipe

CPU = torch.device("cpu")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, required=True, help="a translator checkpoint in a run directory")
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=200, help="the first N sentences of the split")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="sentences per decoding batch (both sides)")
    p.add_argument("--reps", type=int, default=3, help="timed rounds (median)")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    return p.parse_args(argv)


def ours(model: nn.Module, sources: list[list[int]], *, beam: int, batch_size: int, **decode: float) -> list[list[int]]:
    """Our translations in input order: sorted by length, `batch_size` sentences per padded batch (B, S)."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        src = pad([sources[i] for i in chunk], model.config.pad_id)  # (B, S)
        if beam == 1:
            tokens = greedy(model, src, max_len_a=decode["max_len_a"], max_len_b=decode["max_len_b"])
        else:
            tokens = [h[0].tokens for h in beam_search(model, src, beam=beam, **decode)]
        for i, t in zip(chunk, tokens, strict=True):
            out[i] = t
    return out


def share(a: list[list[int]], b: list[list[int]]) -> float:
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    recipe = run_recipe(args.checkpoint, command="evaluate", required=True)
    decode = recipe.decode
    loaded = load(args.checkpoint, command="evaluate")
    model, config, tokenizer = loaded.model, loaded.config, loaded.tokenizer
    pairs = load_split(recipe.data, args.split)[: args.limit]
    sources = [ids[: config.max_len] for ids in tokenizer.encode_batch([s for s, _ in pairs])]
    limits = dict(max_len_a=decode.max_len_a, max_len_b=decode.max_len_b)
    with tempfile.TemporaryDirectory() as tmp:
        to_ct2(model, Path(tmp) / "fp32", tokenizer=tokenizer)
        to_ct2(model, Path(tmp) / "int8", tokenizer=tokenizer, quantization="int8")
        fp32, int8 = (load_ct2(Path(tmp) / name, threads=args.threads) for name in ("fp32", "int8"))
        result = compare(model, fp32, int8, sources, limits=limits, lenpen=decode.lenpen, args=args)
    result.update(checkpoint=args.checkpoint, split=args.split, sentences=len(sources), threads=args.threads,
                  batch_size=args.batch_size, decode=vars(decode))
    if args.out:
        write_json(args.out, result)
    return result


def compare(model: nn.Module, fp32: CT2Model, int8: CT2Model, sources: list[list[int]], *, limits: dict,
            lenpen: float, args: argparse.Namespace) -> dict:
    """The identical shares, then the timings, printed as they come."""
    batch = args.batch_size
    greedy_ours = ours(model, sources, beam=1, batch_size=batch, **limits)
    beam_ours = ours(model, sources, beam=4, batch_size=batch, lenpen=lenpen, **limits)
    shares = {
        "greedy float32": share(greedy_ours, translate_ids(fp32, sources, batch_size=batch, **limits)),
        "greedy int8": share(greedy_ours, translate_ids(int8, sources, batch_size=batch, **limits)),
        "beam 4 float32, patience 1": share(beam_ours, translate_ids(fp32, sources, beam=4, lenpen=lenpen,
                                                                      batch_size=batch, **limits)),
        "beam 4 float32, patience 4": share(beam_ours, translate_ids(fp32, sources, beam=4, lenpen=lenpen, patience=4,
                                                                      batch_size=batch, **limits)),
    }
    print("| identical to tformer, token for token | share |\n|---|---|")
    for name, value in shares.items():
        print(f"| {name} | {value:.1%} |")
    timings = {}
    print("\n| search | tformer s | CTranslate2 float32 s | int8 s | speed-up float32 | int8 |")
    print("|---|---|---|---|---|---|")
    for beam in (1, 4):
        settings = dict(limits, lenpen=lenpen) if beam > 1 else limits
        calls: dict[str, Callable[[], object]] = {
            "tformer": lambda beam=beam, s=settings: ours(model, sources, beam=beam, batch_size=batch, **s),
            "ct2 float32": lambda beam=beam, s=settings: translate_ids(fp32, sources, beam=beam, batch_size=batch, **s),
            "ct2 int8": lambda beam=beam, s=settings: translate_ids(int8, sources, beam=beam, batch_size=batch, **s),
        }
        times = {k: statistics.median(v) for k, v in alternate(calls, CPU, args.reps).items()}
        timings[f"beam {beam}"] = times
        t = times["tformer"]
        print(f"| beam {beam} | {t:.2f} | {times['ct2 float32']:.2f} | {times['ct2 int8']:.2f} | "
              f"{t / times['ct2 float32']:.1f}x | {t / times['ct2 int8']:.1f}x |")
    return {"identical": shares, "seconds": timings}


if __name__ == "__main__":
    main()
