"""Generation speed: our cached `generate` against Hugging Face `transformers`' `generate` on the same GPT.

    python -m benchmarks.generate [--layers 6 --d-model 512 --heads 8 --vocab 8192] [--batches 1 8]
                                  [--prompt-len 32 --new-tokens 256] [--reps 5] [--device cuda] [--out FILE]

One random GPT-2-shaped model is built here, written with `tformer.to_hf` and read back by
`transformers.GPT2LMHeadModel.from_pretrained`, so both contenders run the same weights. Each measurement
is greedy decoding of `--new-tokens` tokens after a random `--prompt-len`-token prompt, no stop token, both
with their key/value cache; tokens/s = batch * new tokens / wall time (prefill included). After one warm-up
run of each, the contenders alternate within every repetition (the order flips each time) in this one
process, and the median over repetitions is reported. Both must produce the same tokens (checked). On CUDA
ours decodes with its captured step (`tformer.decoding.captured`, the default there; `--no-capture` turns it
off), and `tformer eager` shows the dynamic path beside it.

The batch-1 bound: each decoded token reads every weight once, so tokens/s <= bandwidth / weight bytes, with
the bandwidth of the fastest streaming read of a buffer of the weights' size at this run's thread count
(`machine.decode_bound`: the best call of a sum and of a matrix-vector product). No contender may beat it:
if one does, the bound is printed as mismeasured and no share of it is given.

Every timed call is checked for other processes on the cores (`benchmarks.quiet`): the "quiet" column
lists the rounds that were not quiet, with others' share of a core.

Prints a Markdown table; `--out` writes the same as JSON. Not a test; not run in CI.

B batch, P prompt length, N new tokens.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import transformers
from torch import nn

import tformer
from benchmarks import machine, quiet
from benchmarks.common import alternate_checked, at_least, device_arg, markdown_table, run_main, timed, write_json
from tformer.data.device import DTYPES
from tformer.decoding import Decoder, generate_greedy


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The GPT's sizes and the lengths of its prompt and continuation (gpu_decode_check takes the same)."""
    for flag, default in (("--layers", 6), ("--d-model", 512), ("--heads", 8), ("--vocab", 8192),
                          ("--prompt-len", 32), ("--new-tokens", 256)):
        p.add_argument(flag, type=at_least(1), default=default)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_args(p)
    p.add_argument("--batches", type=at_least(1), nargs="+", default=[1, 8])
    p.add_argument("--reps", type=at_least(1), default=5, help="timed repetitions per contender and batch (median)")
    p.add_argument("--device", type=device_arg, default="auto")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true",
                   help="add `tformer compiled`: our model through torch.compile (its first call, which compiles, "
                        "is reported apart)")
    p.add_argument("--no-capture", action="store_true",
                   help="on CUDA, decode without the captured step (by default `tformer` is captured there, as "
                        "`generate` is, and `tformer eager` is added)")
    quiet.add_threshold_arg(p)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    return p.parse_args(argv)


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the parameters, a tied weight counted once (`parameters()` deduplicates)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def build_pair(args: argparse.Namespace, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """Our random GPT and the same weights in `transformers`, both in eval mode on `device`."""
    torch.manual_seed(args.seed)
    config = tformer.GPTConfig(vocab_size=args.vocab, d_model=args.d_model, n_heads=args.heads,
                               d_ff=4 * args.d_model, n_layers=args.layers, max_len=args.prompt_len + args.new_tokens,
                               dropout={"embed": 0.0, "attention": 0.0, "residual": 0.0})
    ours = tformer.build_model(config).eval()
    with tempfile.TemporaryDirectory() as tmp:
        tformer.to_hf(ours, tmp)
        hf = transformers.GPT2LMHeadModel.from_pretrained(tmp).eval()
    dtype = DTYPES[args.dtype]
    return ours.to(device=device, dtype=dtype), hf.to(device=device, dtype=dtype)


def contenders(ours: nn.Module, hf: nn.Module, prompt: torch.Tensor, new: int,
               compiled: nn.Module | None = None, *, capture: bool = True) -> dict[str, Callable]:
    """Name -> a call producing the new tokens of every row, for the prompt batch (B, P). On CUDA `tformer`
    is captured (`generate`'s default there) unless `capture` is False, and `tformer eager` is added."""
    rows = prompt.tolist()
    extra = {}
    if compiled is not None:
        extra["tformer compiled"] = lambda: generate_greedy(Decoder(compiled, capture=False), rows, max_new_tokens=new)
    if prompt.device.type == "cuda" and capture:
        extra["tformer eager"] = lambda: generate_greedy(Decoder(ours, capture=False), rows, max_new_tokens=new)

    # the layout and the captured steps (used on CUDA only) kept across calls, as `inference.load` keeps them
    decoder = Decoder(ours, capture=None if capture else False)

    def run_ours() -> list[list[int]]:
        return generate_greedy(decoder, rows, max_new_tokens=new)

    @torch.inference_mode()
    def run_hf() -> list[list[int]]:
        out = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, min_new_tokens=new,
                          do_sample=False, use_cache=True, eos_token_id=None, pad_token_id=0)  # (B, P + N)
        return out[:, prompt.shape[1]:].tolist()

    return {"tformer": run_ours, "transformers": run_hf, **extra}


def compile_for_inference(model: nn.Module) -> nn.Module:
    """torch.compile with inductor's settings for inference on a CPU: weights frozen into the graph (so the
    matrix products can use prepacked layouts) and a C++ wrapper around the kernels (no Python between them:
    the overhead that batch-1 decoding pays per small operation). Dynamic shapes, as the cache grows."""
    import torch._inductor.config as inductor

    if next(model.parameters()).device.type == "cpu":
        inductor.freezing = True
        inductor.cpp_wrapper = True
    return torch.compile(model, dynamic=True)


def measure(args: argparse.Namespace, ours: nn.Module, hf: nn.Module, device: torch.device) -> list[dict]:
    """One row per (batch, contender): median tokens/s over the repetitions, and whether tokens matched."""
    g = torch.Generator().manual_seed(args.seed)
    compiled = compile_for_inference(ours) if args.compile else None
    rows = []
    for batch in args.batches:
        prompt = torch.randint(0, args.vocab, (batch, args.prompt_len), generator=g).to(device)  # (B, P)
        calls = contenders(ours, hf, prompt, args.new_tokens, compiled, capture=not args.no_capture)
        warm = {name: timed(fn, device) for name, fn in calls.items()}  # warm-up; compiles the compiled one
        outputs = {name: tokens for name, (_, tokens) in warm.items()}
        times, checks = alternate_checked(calls, device, args.reps, threshold=args.quiet_threshold)
        for name, seconds in times.items():
            median = statistics.median(seconds)
            rows.append(dict(contender=name, batch=batch, tokens_per_s=batch * args.new_tokens / median,
                             ms_per_step=1000 * median / args.new_tokens, median_s=median, times_s=seconds,
                             first_call_s=warm[name][0], same_tokens=outputs[name] == outputs["transformers"],
                             quiet=quiet.verdict(checks[name]), rounds=[c.as_dict() for c in checks[name]]))
    return rows


def markdown(rows: list[dict], bound: dict) -> str:
    head = ["contender", "batch", "tokens/s", "ms per step", "first call s", "same tokens", "quiet"]
    lines = [markdown_table(head, "lrrrrcl", ([r["contender"], r["batch"], f"{r['tokens_per_s']:.0f}",
                                               f"{r['ms_per_step']:.2f}", f"{r['first_call_s']:.1f}",
                                               "yes" if r["same_tokens"] else "NO", quiet.marks(quiet.rounds_of(r))]
                                              for r in rows))]
    lines.append(f"\nBatch-1 bandwidth bound: {bound['weight_bytes'] / 2**20:.1f} MiB of weights at "
                 f"{bound['bandwidth_gb_s']:.1f} GB/s (best streaming read, {bound['threads']} threads) -> at most "
                 f"{bound['tokens_per_s']:.0f} tokens/s"
                 + (f"; {bound['mismeasured']}" if bound["mismeasured"] else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    transformers.logging.set_verbosity_error()
    device = torch.device(args.device)
    ours, hf = build_pair(args, device)
    bound = machine.decode_bound(device, weight_bytes(ours))
    rows = measure(args, ours, hf, device)
    bound = machine.against_bound(bound, {r["contender"]: r["tokens_per_s"] for r in rows if r["batch"] == 1})
    print(markdown(rows, bound))
    if args.out is not None:
        info = dict(args=vars(args),
                    device=torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine(),
                    torch=torch.__version__, transformers=transformers.__version__,
                    threads=torch.get_num_threads(), bound=bound, results=rows)
        print(f"\nwrote {write_json(args.out, info)}", file=sys.stderr)


if __name__ == "__main__":
    run_main(main, "generate")
