"""Where a trained translator's decoding time goes: the whole call, the encoder alone, and the operators.

    python -m benchmarks.beam_profile [--checkpoint runs/demo/best] [--sentences 200] [--beam 4] [--threads 1]
        [--top 12]

Translates the first --sentences of the translator's test split (as `benchmarks.ct2_speed` does) with the
run's decoding settings at --beam, in batches of 64: the fastest of 3 calls after a warm-up, the encoder's
share (the same batches through `model.encode` alone), then one call under torch's profiler, its operators by
self CPU time. Time it alone on the machine (`benchmarks.quiet`); docs/results.md reads the figures.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.common import run_main
from benchmarks.ct2_speed import sentences
from tformer import inference
from tformer.data.padding import pad


def best_of(fn: object, reps: int = 3) -> float:
    """The fastest of `reps` calls, after one warm-up."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, default=Path("runs/demo/best"))
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    texts = sentences(args.checkpoint, args.sentences)
    loaded = inference.load(args.checkpoint)
    decode = inference.with_given(inference.run_decode(args.checkpoint), beam=args.beam, batch_size=64)

    def call() -> list[str]:
        return inference.translate(loaded.decoder, loaded.tokenizer, texts, decode, truncate=True)

    whole = best_of(call)
    encoded = inference.encode_sentences(loaded.tokenizer, texts, max_len=loaded.config.max_len, truncate=True)
    order = sorted(range(len(texts)), key=lambda i: len(encoded.ids[i]))
    pad_id = loaded.tokenizer.pad_id

    @torch.inference_mode()
    def encode() -> None:
        for start in range(0, len(order), 64):
            src = pad([encoded.ids[i] for i in order[start:start + 64]], pad_id)  # (B, S)
            loaded.model.encode(src, src != pad_id)

    encoder = best_of(encode)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    events = sorted((e for e in prof.key_averages() if e.self_cpu_time_total > 0),
                    key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    print(f"{args.threads} thread(s), beam {args.beam}: {whole:.3f} s a call ({len(texts) / whole:.1f} sentences/s), "
          f"the encoder {encoder:.3f} s; profiled self CPU {total / 1e6:.3f} s")
    rows = [{"op": e.key, "seconds": e.self_cpu_time_total / 1e6, "calls": e.count,
             "share": e.self_cpu_time_total / total} for e in events[:args.top]]
    for r in rows:
        print(f"{r['op']:50s} {r['seconds']:7.3f} s {r['calls']:7d} calls {100 * r['share']:5.1f}%")
    return {"seconds": whole, "encoder_seconds": encoder, "operators": rows}


if __name__ == "__main__":
    run_main(main, "beam_profile")
