"""Translation decoding speed: our `greedy` and `beam_search` against `MarianMTModel.generate` on the same weights.

    python -m benchmarks.translate_speed [--layers 6 --d-model 512 --heads 8 --vocab 8192] [--beam 4]
        [--batch 32 --src-len 20 --new-tokens 32] [--reps 5] [--init-std 0.3] [--device cuda] [--dtype float32]
        [--out FILE] [--quick]

One random transformer-base-shaped encoder-decoder in Marian's layout (post-LN, no final norm, sinusoids in
the "split" layout, scaled embeddings, a shared tied embedding, an output bias) is built here, written with
`tformer.to_hf` and read back by `transformers.MarianMTModel.from_pretrained`, so both run the same weights.
Weights are normal(0, --init-std), 0.3 by default: with the usual 0.02 the sinusoids swamp the scaled
embeddings and a random model gives nearly the same output for every source, which would make the
token comparison below weak. The values do not change the work done.

Same work on both sides: random weights would end sentences at random steps, so the output bias of the end
symbol and of the pad symbol (our decoder never proposes pad; Marian's does not know it) is set to -1e4.
No hypothesis ever ends, and every sentence gets exactly --new-tokens tokens from both (ours: max_len_a=0,
max_len_b=N; Marian: max_new_tokens=N, forced_eos_token_id=None). All final hypotheses then have one
length, so the length penalty cannot reorder them; it is still set alike: our fairseq lenpen=1.0 (length
counts the end symbol) is Marian's length_penalty=1.0, and our exact stopping bound is its
early_stopping="never".

The batch: --batch sentences of real lengths spread over [src_len/2, src_len], right-padded. After one
warm-up of each, the contenders of one search alternate within every repetition (order flipped each time)
in this process; the median is reported. sentences/s = batch / median seconds (encoder included). The
"same best output" column is the share of sentences whose tokens (greedy) or best hypothesis (beam) are the
same on both sides: greedy should be 100%; float ties can split a beam. Every timed call is checked for
other processes on the cores (`benchmarks.quiet`): the "quiet" column lists the rounds that were not quiet
(others' share of a core), and a speed-up resting on such a round is printed as not a result. Prints a
Markdown table; `--out` writes JSON.

B batch, S source length, N new tokens, V vocabulary.
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
from torch import Tensor, nn

import tformer
from benchmarks import quiet
from benchmarks.common import alternate_checked, apply_quick, device_arg, timed, write_json
from tformer.config import InitConfig, NormConfig, PositionConfig
from tformer.data.device import DTYPES
from tformer.decoding import beam_search, greedy

QUICK = dict(layers=1, d_model=64, heads=4, vocab=256, batch=4, src_len=8, new_tokens=6, reps=1)
NEVER = -1e4  # the output bias of tokens that must not be chosen (end symbol, pad)
LENPEN = 1.0
SETTINGS = (f"no early end (end-symbol and pad logits biased by {NEVER:g}); ours: lenpen={LENPEN} (fairseq), "
            f"max_len_a=0, max_len_b=N; Marian: length_penalty={LENPEN}, early_stopping='never', "
            "max_new_tokens=N, forced_eos_token_id=None, do_sample=False, use_cache=True")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=6, help="encoder and decoder layers each")
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--src-len", type=int, default=20, help="longest source sentence (real lengths vary down to half)")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per contender (median)")
    p.add_argument("--device", type=device_arg, default="auto")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32")
    p.add_argument("--init-std", type=float, default=0.3,
                   help="normal(0, std) weights: large enough that the outputs depend on the source")
    p.add_argument("--seed", type=int, default=0)
    quiet.add_threshold_arg(p)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--quick", action="store_true", help="a smoke run: a tiny model, a tiny batch, one repetition")
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(p, args, QUICK)
    return args


def build_pair(args: argparse.Namespace, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """Our random Marian-shaped model and the same weights as a `MarianMTModel`, both in eval mode."""
    torch.manual_seed(args.seed)
    pad = args.vocab - 1  # OPUS-MT: pad is the last id and the decoder's start symbol; the end symbol is 0
    config = tformer.Seq2SeqConfig(
        vocab_size=args.vocab, d_model=args.d_model, n_heads=args.heads, d_ff=4 * args.d_model,
        n_layers=args.layers, max_len=max(512, args.src_len, args.new_tokens + 1), activation="silu",
        scale_embeddings=True, output_bias=True, pad_id=pad, bos_id=pad, eos_id=0, decoder_start_id=pad,
        positions=PositionConfig(kind="sinusoidal", sinusoid_layout="split"),
        norm=NormConfig(kind="layernorm", eps=1e-5, placement="post", final=False),
        dropout={"embed": 0.0, "attention": 0.0, "residual": 0.0, "activation": 0.0},
        init=InitConfig(kind="normal", std=args.init_std))
    ours = tformer.build_model(config).eval()
    with torch.no_grad():
        ours.lm_head.bias[[config.eos_id, pad]] = NEVER
    with tempfile.TemporaryDirectory() as tmp:
        tformer.to_hf(ours, tmp)
        hf = transformers.MarianMTModel.from_pretrained(tmp).eval()
    dtype = DTYPES[args.dtype]
    return ours.to(device=device, dtype=dtype), hf.to(device=device, dtype=dtype)


def source_batch(args: argparse.Namespace, pad: int, device: torch.device) -> Tensor:
    """(B, S) random ids in [1, pad), real lengths spread over [S/2, S], right-padded with `pad`."""
    g = torch.Generator().manual_seed(args.seed)
    src = torch.randint(1, pad, (args.batch, args.src_len), generator=g)  # (B, S)
    lengths = torch.randint(max(1, args.src_len // 2), args.src_len + 1, (args.batch,), generator=g)
    lengths[0] = args.src_len  # the longest sets S
    src[torch.arange(args.src_len)[None] >= lengths[:, None]] = pad
    return src.to(device)


def contenders(ours: nn.Module, hf: nn.Module, src: Tensor, *, new: int, beam: int) -> dict[str, Callable]:
    """'search/contender' -> a call producing each sentence's best tokens (start and end symbols removed)."""
    mask = (src != ours.config.pad_id).long()  # (B, S)

    @torch.inference_mode()
    def marian(num_beams: int) -> list[list[int]]:
        search = dict(length_penalty=LENPEN, early_stopping="never") if num_beams > 1 else {}
        out = hf.generate(src, attention_mask=mask, num_beams=num_beams, max_new_tokens=new, do_sample=False,
                          use_cache=True, forced_eos_token_id=None, num_return_sequences=1,
                          **search)  # (B, 1 + N): the start symbol first
        eos, pad = ours.config.eos_id, ours.config.pad_id
        return [[t for t in row if t not in (eos, pad)] for row in out[:, 1:].tolist()]

    def ours_beam() -> list[list[int]]:
        hyps = beam_search(ours, src, beam=beam, lenpen=LENPEN, max_len_a=0.0, max_len_b=new)
        return [h[0].tokens for h in hyps]

    return {"greedy/tformer": lambda: greedy(ours, src, max_len_a=0.0, max_len_b=new),
            "greedy/transformers": lambda: marian(1),
            f"beam{beam}/tformer": ours_beam,
            f"beam{beam}/transformers": lambda: marian(beam)}


def measure(args: argparse.Namespace, ours: nn.Module, hf: nn.Module, device: torch.device) -> list[dict]:
    """One row per (search, contender): median sentences/s, and the share of sentences with the same tokens."""
    src = source_batch(args, ours.config.pad_id, device)
    calls = contenders(ours, hf, src, new=args.new_tokens, beam=args.beam)
    rows = []
    for search in dict.fromkeys(name.split("/")[0] for name in calls):
        pair = [name for name in calls if name.startswith(search + "/")]
        outputs = {name: timed(calls[name], device)[1] for name in pair}  # warm-up
        a, b = outputs.values()
        same = sum(x == y for x, y in zip(a, b, strict=True)) / len(a)
        lengths = sorted({len(t) for out in outputs.values() for t in out})
        times, checks = alternate_checked({name: calls[name] for name in pair}, device, args.reps,
                                          threshold=args.quiet_threshold)
        for name, seconds in times.items():
            median = statistics.median(seconds)
            rows.append(dict(search=search, contender=name.split("/")[1], batch=args.batch,
                             sentences_per_s=args.batch / median, ms_per_step=1000 * median / args.new_tokens,
                             median_s=median, times_s=seconds, same_best=same, output_lengths=lengths,
                             quiet=quiet.verdict(checks[name]), rounds=[c.as_dict() for c in checks[name]],
                             tokens=outputs[name]))
    for search in dict.fromkeys(r["search"] for r in rows):
        mine, theirs = (next(r for r in rows if r["search"] == search and r["contender"] == c)
                        for c in ("tformer", "transformers"))
        mine["speedup"] = mine["sentences_per_s"] / theirs["sentences_per_s"]
        mine["refused"] = quiet.refusal({r["contender"]: quiet.rounds_of(r) for r in (mine, theirs)})
    return rows


def markdown(rows: list[dict], args: argparse.Namespace, attn: str) -> str:
    lines = ["| search | contender | sentences/s | ms per step | speed-up | same best output | quiet |",
             "|---|---|---:|---:|---:|---:|---|"]
    notes = []
    for r in rows:
        speedup = f"{r['speedup']:.2f}x" if "speedup" in r else ""
        if r.get("refused"):
            speedup = f"({speedup}) not a result"
            notes.append(f"{r['search']}: {r['refused']}")
        lines.append(f"| {r['search']} | {r['contender']} | {r['sentences_per_s']:.1f} | {r['ms_per_step']:.1f} | "
                     f"{speedup} | {100 * r['same_best']:.0f}% | {quiet.marks(quiet.rounds_of(r))} |")
    lines += [f"\n{n}" for n in notes]
    lines.append(f"\n{args.layers}+{args.layers} layers, d={args.d_model}, {args.heads} heads, vocab {args.vocab}, "
                 f"{args.dtype} on {args.device} ({torch.get_num_threads()} threads); batch {args.batch} of source "
                 f"lengths {max(1, args.src_len // 2)}..{args.src_len}, {args.new_tokens} new tokens each; median of "
                 f"{args.reps} after a warm-up; Marian attention: {attn}. Settings: {SETTINGS}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    device = torch.device(args.device)
    ours, hf = build_pair(args, device)
    rows = measure(args, ours, hf, device)
    attn = str(getattr(hf.config, "_attn_implementation", "default"))
    print(markdown(rows, args, attn))
    info = dict(args=vars(args),
                device=torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine(),
                torch=torch.__version__, transformers=transformers.__version__, threads=torch.get_num_threads(),
                marian_attention=attn, settings=SETTINGS,
                results=[{k: v for k, v in r.items() if k != "tokens"} for r in rows])
    if args.out is not None:
        print(f"\nwrote {write_json(args.out, info)}", file=sys.stderr)
    return dict(info, tokens={f"{r['search']}/{r['contender']}": r["tokens"] for r in rows})


if __name__ == "__main__":
    main()
