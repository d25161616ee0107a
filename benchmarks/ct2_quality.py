"""What the rows of `benchmarks.ct2_speed` give in quality: BLEU and chrF on all of Acts (the translator's
test split, beam 4, both engines stopping once `beam` hypotheses have finished), tformer and CTranslate2,
fp32 and int8; and the GPT's perplexity per token on Acts, tformer fp32 and int8.

    python -m benchmarks.ct2_quality [--translator runs/demo/best] [--gpt runs/bench/gpt/best] [--threads 2]
        [--out FILE]

Each engine is called as in `ct2_speed` (ours: `inference.load` and `inference.translate`; CTranslate2:
`translate_batch` on the tokenizer's pieces, its defaults otherwise), here in one process: quality does not
depend on which process runs a call.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import torch

from benchmarks import ct2_speed
from benchmarks.common import write_json
from tformer import inference
from tformer.data.text import load_text_corpus
from tformer.evaluation import score_corpus
from tformer.interop.ct2 import checkpoint_to_ct2
from tformer.tasks.translation import load_split, run_recipe


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--translator", type=Path, default=Path("runs/demo/best"))
    p.add_argument("--gpt", type=Path, default=Path("runs/bench/gpt/best"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=None, help="the first N sentences (default: all of Acts)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    refs = [t for _, t in load_split(run_recipe(args.translator, command="evaluate", required=True).data, "test")]
    refs = refs[:args.limit]
    work = argparse.Namespace(sentences=len(refs), batch=64, gen_new_tokens=0)
    result: dict = {"sentences": len(refs), "bleu": {}, "chrf": {}, "perplexity": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for q in ("fp32", "int8"):
            quantization = None if q == "fp32" else "int8"
            checkpoint_to_ct2(args.translator, Path(tmp) / f"translator-{q}", quantization=quantization)
        for contender in ct2_speed.CONTENDERS:
            if contender.startswith("ct2"):
                fn = ct2_speed.theirs("beam-equal", contender, args.translator, Path(tmp), work, args.threads)
            else:
                fn = ct2_speed.ours("beam-equal", contender, args.translator, work)
            scores = score_corpus(fn(), refs)
            result["bleu"][contender], result["chrf"][contender] = scores.bleu, scores.chrf
    docs = load_text_corpus("bible", "test")
    for q in ("fp32", "int8"):
        loaded = inference.load(args.gpt, quantization=None if q == "fp32" else "int8")
        scores = inference.score_lines(loaded.model, loaded.tokenizer, docs)
        result["perplexity"][f"tformer {q}"] = math.exp(-sum(s.log_prob for s in scores) /
                                                        sum(s.n_tokens for s in scores))
    print("| | BLEU | chrF |\n|---|---:|---:|")
    for c in ct2_speed.CONTENDERS:
        print(f"| {c} | {result['bleu'][c]:.2f} | {result['chrf'][c]:.2f} |")
    print(f"\n{len(refs)} sentences of Acts, beam 4. GPT perplexity per token on Acts: " +
          ", ".join(f"{k} {v:.3f}" for k, v in result["perplexity"].items()))
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
