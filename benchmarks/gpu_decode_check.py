"""Captured decoding on a GPU, checked and timed: GPT generation, greedy and beam-4 translation with and
without the captured step (`tformer.decoding.captured`), against transformers' GPT-2 `generate` (its default
dynamic cache, and its static cache, which transformers compiles) on the same random weights.

    python -m benchmarks.gpu_decode_check --out docs/bench/gpu-decode.json     # on a CUDA machine, bf16
    python -m benchmarks.gpu_decode_check --device cpu --tiny --out /tmp/x.json  # the smoke test's run

The GPT is the bench's GPT-2 shape (6 layers, d 512, 8 heads, vocabulary 8,192: 23M parameters); each
generation is greedy, `--new-tokens` after a random `--prompt-len`-token prompt, no stop token; tokens/s =
batch * new tokens / the median wall time of `--reps` calls after one warm-up call (which, for the captured
path, records the graphs). Contenders of a batch alternate within every repetition.

Checks (the script exits non-zero when one fails):
  - captured == the same fixed-shape steps run eagerly, token for token, in the run's dtype (the graph
    replays those very kernels), for greedy generation, seeded sampling, greedy and beam translation (the
    compiled variant runs other, fused kernels: its agreement is reported);
  - captured == the dynamic eager path in float32 (`--check-tokens` new tokens). In bf16 the two paths run
    different attention kernels (the dynamic one attends to fewer keys without a mask), whose roundings
    differ, and random weights give near-ties, so bf16 agreement is reported (tokens before the first
    difference), not asserted.

Writes the results as JSON to `--out` and the table as Markdown beside it (same name, .md).

B batch, P prompt length, N new tokens.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from torch import nn

import tformer
from benchmarks.common import alternate, at_least, device_arg, run_main, sync, timed, write_json
from benchmarks.generate import add_model_args, build_pair
from tformer.data.device import DTYPES
from tformer.decoding import Decoder, beam_search, generate, generate_greedy, greedy

TINY = dict(layers=1, d_model=32, heads=2, vocab=128, prompt_len=8, new_tokens=16, check_tokens=8, reps=1,
            source_len=8, no_compile=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_args(p)
    p.add_argument("--check-tokens", type=at_least(1), default=64, help="new tokens of the float32 token check")
    p.add_argument("--source-len", type=at_least(1), default=32, help="source tokens of the translation rows")
    p.add_argument("--batches", type=at_least(1), nargs="+", default=[1, 8])
    p.add_argument("--reps", type=at_least(1), default=3)
    p.add_argument("--device", type=device_arg, default="cuda")
    p.add_argument("--dtype", choices=list(DTYPES), default="bfloat16")
    p.add_argument("--no-compile", action="store_true", help="leave out `tformer captured+compiled` (torch.compile, "
                   "then the graph; its first call compiles, about 10 s)")
    p.add_argument("--no-hf", action="store_true", help="leave out transformers' generate")
    p.add_argument("--tiny", action="store_true", help="tiny sizes, one repetition (a smoke test; CPU is fine)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="the JSON results; the Markdown table goes beside it")
    args = p.parse_args(argv)
    if args.tiny:
        for key, value in TINY.items():
            setattr(args, key, value)
    return args


def agreement(a: list[list[int]], b: list[list[int]]) -> int:
    """Tokens before the first difference, summed over rows."""
    total = 0
    for x, y in zip(a, b, strict=True):
        n = next((i for i, (s, t) in enumerate(zip(x, y, strict=False)) if s != t), min(len(x), len(y)))
        total += n
    return total


def ours_calls(decode: Callable[..., list[list[int]]], model: nn.Module, *, compile: bool) -> dict[str, Callable]:
    """Name -> a call of `decode(decoder)`: dynamic eager, captured (graphs kept across the calls by one
    `Decoder`, as a model's holder keeps them) and, with `compile`, compiled then captured."""
    def run(decoder: Decoder) -> Callable[[], list[list[int]]]:
        return lambda: decode(decoder)

    calls = {"tformer eager": run(Decoder(model, capture=False)), "tformer captured": run(Decoder(model, capture=True))}
    if compile:
        calls["tformer captured+compiled"] = run(Decoder(model, capture=True, compile=True))
    return calls


def check_fixed(decode: Callable[..., list[list[int]]], model: nn.Module, captured: list[list[int]], what: str,
                failures: list[str]) -> None:
    """The captured tokens must be those of the same fixed-shape steps run eagerly (the graph replays them)."""
    if decode(Decoder(model, capture=True, record=False)) != captured:
        failures.append(f"{what}: captured tokens differ from the fixed-shape eager steps")


def hf_calls(hf: nn.Module, prompt: torch.Tensor, new: int) -> dict[str, Callable]:
    """transformers' greedy generate, dynamic and static cache, on the prompt batch (B, P)."""
    def run(**extra: object) -> Callable[[], list[list[int]]]:
        @torch.inference_mode()
        def call() -> list[list[int]]:
            out = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new,
                              min_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0, **extra)
            return out[:, prompt.shape[1]:].tolist()
        return call
    return {"transformers": run(), "transformers static cache": run(cache_implementation="static")}


def generation_rows(args: argparse.Namespace, ours: nn.Module, hf: nn.Module, device: torch.device,
                    failures: list[str]) -> list[dict]:
    g = torch.Generator().manual_seed(args.seed)
    rows = []
    for batch in args.batches:
        prompt = torch.randint(0, args.vocab, (batch, args.prompt_len), generator=g).to(device)  # (B, P)
        new = args.new_tokens
        decode = partial(greedy_prompts, prompt.tolist(), max_new_tokens=new)
        calls = ours_calls(decode, ours, compile=not args.no_compile)
        if not args.no_hf:
            calls.update(hf_calls(hf, prompt, new))
        warm, tokens = {}, {}
        for name, fn in calls.items():
            try:
                warm[name], tokens[name] = timed(fn, device)
                print(f"generate, batch {batch}, {name}: first call {warm[name]:.2f} s", file=sys.stderr, flush=True)
            except Exception as e:  # a contender that cannot run here (an old transformers) is reported
                warm[name], tokens[name] = float("nan"), None
                print(f"{name}, batch {batch}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        calls = {name: fn for name, fn in calls.items() if tokens[name] is not None}
        times = alternate(calls, device, args.reps)
        ref = tokens["tformer eager"]
        for name, seconds in times.items():
            median = statistics.median(seconds)
            rows.append(dict(task="generate", contender=name, batch=batch, tokens_per_s=batch * new / median,
                             ms_per_token=1000 * median / new, median_s=median, first_call_s=warm[name],
                             same_as_eager=tokens[name] == ref, agreement=agreement(tokens[name], ref) / (batch * new)))
        check_fixed(decode, ours, tokens["tformer captured"], f"generate batch {batch}", failures)
    return rows


def sampled_check(ours: nn.Module, prompts: list[list[int]], new: int, failures: list[str]) -> dict:
    """Seeded top-k sampling: captured == the fixed-shape steps run eagerly (the graph advances the generator
    as the eager steps do)."""
    kw = dict(max_new_tokens=new, temperature=1.0, top_k=50, seed=1234)
    eager = generate(Decoder(ours, capture=True, record=False), prompts, **kw)
    decoder = Decoder(ours, capture=True)
    first = generate(decoder, prompts, **kw)  # records the graph on the way
    again = generate(decoder, prompts, **kw)  # replays it from the first step
    same = first == eager and again == eager
    if not same:
        failures.append("seeded sampling: captured tokens differ from the fixed-shape eager steps")
    return dict(same_sampled=same, agreement=agreement(again, eager) / (len(prompts) * new))


def float32_check(args: argparse.Namespace, ours: nn.Module, device: torch.device, failures: list[str]) -> dict:
    """Captured == the dynamic eager path, greedy, in float32, for every batch size."""
    model = copy.deepcopy(ours).float()
    g = torch.Generator().manual_seed(args.seed + 1)
    out = {}
    for batch in args.batches:
        prompts = torch.randint(0, args.vocab, (batch, args.prompt_len), generator=g).tolist()
        eager = generate_greedy(Decoder(model, capture=False), prompts, max_new_tokens=args.check_tokens)
        captured = generate_greedy(Decoder(model, capture=True), prompts, max_new_tokens=args.check_tokens)
        out[batch] = eager == captured
        if not out[batch]:
            failures.append(f"float32 batch {batch}: captured tokens differ from the dynamic eager path "
                            f"({agreement(eager, captured)} of {batch * args.check_tokens} agree)")
    return out


def greedy_prompts(prompts: list[list[int]], decoder: Decoder, **kw: object) -> list[list[int]]:
    return generate_greedy(decoder, prompts, **kw)


def greedy_source(src: torch.Tensor, decoder: Decoder, **kw: object) -> list[list[int]]:
    return greedy(decoder, src, **kw)


def best_tokens(src: torch.Tensor, decoder: Decoder, **kw: object) -> list[list[int]]:
    """The tokens of each sentence's best beam-search hypothesis."""
    return [hyps[0].tokens for hyps in beam_search(decoder, src, **kw)]


def translation_rows(args: argparse.Namespace, device: torch.device, failures: list[str]) -> list[dict]:
    """Greedy and beam-4 translation by a random encoder-decoder of the same widths, eager and captured."""
    torch.manual_seed(args.seed)
    config = tformer.preset("transformer-base", {"vocab_size": args.vocab, "d_model": args.d_model,
                                                 "d_ff": 4 * args.d_model, "n_heads": args.heads,
                                                 "n_layers": args.layers, "max_len": 2 * args.source_len + 8})
    model = tformer.build_model(config).eval().to(device=device, dtype=DTYPES[args.dtype])
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)  # spread the logits: fewer near-ties between eager and captured
    g = torch.Generator().manual_seed(args.seed)
    rows = []
    for batch in args.batches:
        src = torch.randint(3, args.vocab, (batch, args.source_len), generator=g).to(device)  # (B, S)
        length = dict(max_len_a=0.0, max_len_b=2 * args.source_len)
        searches = {"greedy translation": partial(greedy_source, src, **length),
                    "beam-4 translation": partial(best_tokens, src, beam=4, **length)}
        for task, decode in searches.items():
            calls = ours_calls(decode, model, compile=False)
            warm = {name: timed(fn, device) for name, fn in calls.items()}
            times = alternate(calls, device, args.reps)
            tokens = {name: out for name, (_, out) in warm.items()}
            ref = tokens["tformer eager"]
            made = sum(len(t) for t in ref)
            for name, seconds in times.items():
                median = statistics.median(seconds)
                rows.append(dict(task=task, contender=name, batch=batch, tokens_per_s=made / median,
                                 ms_per_token=1000 * median * batch / max(made, 1), median_s=median,
                                 first_call_s=warm[name][0], same_as_eager=tokens[name] == ref,
                                 agreement=agreement(tokens[name], ref) / max(made, 1)))
            check_fixed(decode, model, tokens["tformer captured"], f"{task} batch {batch}", failures)
            print(f"{task}, batch {batch}: done", file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[dict], info: dict) -> str:
    lines = [f"Device: {info['device']}, {info['dtype']}, torch {info['torch']}, transformers {info['transformers']}",
             "", "| task | contender | batch | tokens/s | ms per token | first call s | same as eager | agreement |",
             "|---|---|---:|---:|---:|---:|:---:|---:|"]
    lines += [f"| {r['task']} | {r['contender']} | {r['batch']} | {r['tokens_per_s']:.0f} | {r['ms_per_token']:.3f} | "
              f"{r['first_call_s']:.2f} | {'yes' if r['same_as_eager'] else 'no'} | {r['agreement']:.0%} |"
              for r in rows]
    lines += ["", f"Seeded sampling, captured == fixed-shape eager: {info['sampled']['same_sampled']}",
              f"float32 greedy, captured == dynamic eager, by batch: {info['float32']}",
              f"Checks failed: {info['failures'] or 'none'}", f"Wall time: {info['wall_s']:.0f} s"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    start = time.perf_counter()
    device = torch.device(args.device)
    import transformers

    transformers.logging.set_verbosity_error()
    ours, hf = build_pair(args, device)
    failures: list[str] = []
    rows = generation_rows(args, ours, hf, device, failures)
    prompts = torch.randint(0, args.vocab, (2, args.prompt_len), generator=torch.Generator().manual_seed(7)).tolist()
    sampled = sampled_check(ours, prompts, args.check_tokens, failures)
    fp32 = float32_check(args, ours, device, failures)
    rows += translation_rows(args, device, failures)
    sync(device)
    info = dict(args=vars(args), device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                dtype=args.dtype, torch=torch.__version__, transformers=transformers.__version__,
                results=rows, sampled=sampled, float32=fp32, failures=failures,
                wall_s=time.perf_counter() - start)
    table = markdown(rows, info)
    print(table)
    write_json(args.out, info)
    args.out.with_suffix(".md").write_text(table + "\n", encoding="utf-8")
    if failures:
        raise SystemExit("captured decoding checks failed: " + "; ".join(failures))
    return info


if __name__ == "__main__":
    run_main(main, "gpu_decode_check")
