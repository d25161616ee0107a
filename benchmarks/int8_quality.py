"""What `quantize(model, "int8")` costs in quality and gains in speed, on trained checkpoints, against fp32 and
CTranslate2 int8 in this one process.

    python -m benchmarks.int8_quality [--translator runs/demo/best] [--lm runs/gpt-bible/best] [--limit 200]
        [--batch-size 64] [--min-weights 0 ...] [--new-tokens 64] [--reps 3] [--threads 1] [--out docs/bench/int8.json]

Translator: the first --limit sentences of the test split (the Bible's: Acts), translated by `translate`
(greedy and beam 4, --batch-size sentences a batch, the recipe's length limits and penalty) with the fp32
model and with int8 models (one per --min-weights: the size under which a linear layer stays fp32), and
scored with sacrebleu BLEU; CTranslate2 int8 of the same weights is scored too. Then the seconds to
translate them (token ids in, as `benchmarks.ct2_parity` times them): the contenders alternate within each of
--reps rounds (`common.alternate`), and the median is reported, with each one's speed over fp32's and int8's
speed over CTranslate2 int8's (>= 1: at least as fast).

Language model: perplexity on the test split (Acts), fp32 against int8 (`LMTask.evaluate`); then batch-1 and
batch-8 greedy generation of --new-tokens tokens after 32-token prompts from Acts, tformer fp32 and int8
against CTranslate2 int8 (`generate_ids`), timed the same way.

All contenders run on the CPU with --threads threads (torch.set_num_threads; CTranslate2's intra_threads).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from benchmarks.common import alternate, write_json
from benchmarks.ct2_parity import ours
from tformer.decoding import generate_greedy
from tformer.evaluation.bleu import score_corpus
from tformer.inference import load, translate, with_given
from tformer.interop.ct2 import generate_ids, load_ct2, to_ct2, translate_ids
from tformer.quant import MIN_WEIGHTS, count_int8, quantize
from tformer.runs import RunDir
from tformer.tasks.translation import load_split, run_recipe

CPU = torch.device("cpu")


def int8_models(model: nn.Module, sizes: list[int]) -> dict[str, nn.Module]:
    """{"int8" or "int8 (>= N)": a quantized copy} for each threshold."""
    out = {}
    for n in sizes:
        name = "int8" if n == MIN_WEIGHTS else f"int8 (>= {n})"
        out[name] = quantize(copy.deepcopy(model), "int8", min_weights=n)
        print(f"{name}: {count_int8(out[name])} int8 layers", flush=True)
    return out


def timings(calls: dict[str, Callable[[], object]], reps: int, base: str = "fp32") -> dict:
    times = {k: statistics.median(v) for k, v in alternate(calls, CPU, reps).items()}
    for name, t in times.items():
        print(f"  {name:<22} {t:8.2f} s  {times[base] / t:5.2f}x fp32", flush=True)
    return times


def translator(path: Path, args: argparse.Namespace, tmp: Path) -> dict:
    recipe = run_recipe(path, command="evaluate", required=True)
    loaded = load(path, command="evaluate")
    model, config, tokenizer = loaded.model, loaded.config, loaded.tokenizer
    pairs = load_split(recipe.data, "test")[: args.limit]
    sentences, refs = [s for s, _ in pairs], [t for _, t in pairs]
    sources = [ids[: config.max_len] for ids in tokenizer.encode_batch(sentences)]
    models = {"fp32": model, **int8_models(model, args.min_weights)}
    to_ct2(model, tmp / "ct2-int8", tokenizer=tokenizer, quantization="int8")
    ct2 = load_ct2(tmp / "ct2-int8", threads=args.threads)
    result: dict = {"checkpoint": str(path), "sentences": len(pairs), "batch_size": args.batch_size,
                    "int8_layers": {k: count_int8(m) for k, m in models.items()}, "bleu": {}, "seconds": {}}
    for beam in (1, 4):
        decode = with_given(recipe.decode, beam=beam, batch_size=args.batch_size)
        limits = dict(max_len_a=decode.max_len_a, max_len_b=decode.max_len_b)
        settings = dict(limits, lenpen=decode.lenpen) if beam > 1 else limits
        bleu = {k: score_corpus(translate(m, tokenizer, sentences, decode, truncate=True), refs).bleu
                for k, m in models.items()}
        ct2_ids = translate_ids(ct2, sources, beam=beam, batch_size=args.batch_size, **settings)
        bleu["ct2 int8"] = score_corpus([tokenizer.decode(t) for t in ct2_ids], refs).bleu
        search = "greedy" if beam == 1 else f"beam {beam}"
        print(f"{search}: BLEU " + ", ".join(f"{k} {v:.2f}" for k, v in bleu.items()), flush=True)
        calls: dict[str, Callable[[], object]] = {
            k: (lambda m=m, b=beam, s=settings: ours(m, sources, beam=b, batch_size=args.batch_size, **s))
            for k, m in models.items()}
        calls["ct2 int8"] = lambda b=beam, s=settings: translate_ids(ct2, sources, beam=b, batch_size=args.batch_size,
                                                                     **s)
        result["bleu"][search], result["seconds"][search] = bleu, timings(calls, args.reps)
    return result


def language_model(path: Path, args: argparse.Namespace, tmp: Path) -> dict:
    from tformer.tasks import load_recipe
    from tformer.tasks.lm import LMTask
    from tformer.tasks.lm import load_split as lm_split

    recipe = load_recipe(RunDir(path.parent).recipe, [])
    loaded = load(path, command="score")
    model, config, tokenizer = loaded.model, loaded.config, loaded.tokenizer
    acts = lm_split(recipe.data, "test")
    models = {"fp32": model, **int8_models(model, args.min_weights)}
    task = LMTask(recipe, tokenizer, train_docs=acts, valid_docs=acts)
    ppl = {k: task.evaluate(m)["valid_ppl"] for k, m in models.items()}
    print("perplexity on Acts: " + ", ".join(f"{k} {v:.3f}" for k, v in ppl.items()), flush=True)
    to_ct2(model, tmp / "ct2-lm-int8", tokenizer=tokenizer, quantization="int8")
    ct2 = load_ct2(tmp / "ct2-lm-int8", threads=args.threads)
    stream = [i for doc in tokenizer.encode_batch(acts[:8]) for i in doc]
    result: dict = {"checkpoint": str(path), "perplexity": ppl, "new_tokens": args.new_tokens, "prompt_len": 32,
                    "int8_layers": {k: count_int8(m) for k, m in models.items()}, "seconds": {}}
    for batch in (1, 8):
        prompts = [[config.bos_id, *stream[i * 32: (i + 1) * 32 - 1]] for i in range(batch)]
        calls: dict[str, Callable[[], object]] = {
            k: (lambda m=m, p=prompts: generate_greedy(m, p, max_new_tokens=args.new_tokens))
            for k, m in models.items()}
        calls["ct2 int8"] = lambda p=prompts: generate_ids(ct2, p, max_new_tokens=args.new_tokens)
        print(f"batch {batch}, {args.new_tokens} new tokens:", flush=True)
        result["seconds"][f"batch {batch}"] = timings(calls, args.reps)
    return result


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--translator", type=Path, default=None, help="a translator checkpoint in a run directory")
    p.add_argument("--lm", type=Path, default=None, help="a GPT checkpoint in a run directory")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--min-weights", type=int, nargs="+", default=[MIN_WEIGHTS],
                   help="int8 models to compare: linear layers under this many weights stay fp32")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    result: dict = {"threads": args.threads, "torch": torch.__version__, "min_weights_default": MIN_WEIGHTS}
    with tempfile.TemporaryDirectory() as tmp:
        if args.translator:
            result["translator"] = translator(args.translator, args, Path(tmp))
        if args.lm:
            result["lm"] = language_model(args.lm, args, Path(tmp))
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
