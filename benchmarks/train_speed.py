"""Training speed: our GPT, BERT and encoder-decoder against Hugging Face `transformers` and torch.nn.Transformer
on the same weights, in tokens/s and model-FLOPs utilisation (MFU).

    python -m benchmarks.train_speed [--families gpt bert seq2seq] [--layers 6 --d-model 512 --heads 8
                                     --d-ff 2048 --vocab 8192] [--reps 5 --steps-per-rep 2 --warmup 2]
                                     [--threads N] [--device cuda] [--precision bf16] [--compile]
                                     [--ours-only] [--hf-attention eager sdpa] [--nanogpt DIR]
                                     [--quick] [--out FILE]

Contenders (each of our models is written with `tformer.to_hf` and read back, so all train the same
weights; dropout 0 everywhere, so the work is equal):
    gpt      tformer GPT | GPT2LMHeadModel, attn_implementation "eager" and "sdpa"       batch 8 x 256
             | nanoGPT's model.py with `--nanogpt DIR` (a clone of github.com/karpathy/nanoGPT: its GPT,
             flash attention through SDPA, exact GELU where GPT-2 has the tanh one)
    bert     tformer BertForPretraining | BertForPreTraining (its default attention)    batch 8 x 256
    seq2seq  tformer EncoderDecoder | torch.nn.Transformer (torch_transformer.py's wrapper, our weights
             copied in; it keeps its two final LayerNorms) | MarianMTModel             batch 16 x 64 (+ 64)
A step = forward, cross-entropy (computed here alike for all; BERT: masked-LM on 15% of the positions +
next-sentence), backward, `torch.optim.AdamW`, fused (as both libraries' trainers run it). tokens/s counts
target tokens (BERT: input tokens, its head scores every position); MFU = tokens/s *
`train_flops_per_token(config, seq_len)` / the fp32 matmul peak measured at the start
(benchmarks/machine.py). After `--warmup` steps each, the contenders alternate `--reps` times in this
process (order flipped each time), each timed over `--steps-per-rep` steps; medians are reported. Same
weights and batch give the same step-0 loss (to ~1e-5; printed; two random inits differ by ~1e-2): the check
that the configs are equal.

`--precision` and `--compile` run every contender's step as `tformer train` does with train.precision and
train.compile (training/precision.py): bf16 or fp16 autocast around forward and loss (fp16 with a
torch.amp.GradScaler), and each contender's forward and loss compiled together with torch.compile (inductor):
nanoGPT's model returns its own loss, so compiling the loss with every model is like for like.
On a GPU float32 matmuls use TF32, as in `tformer train`, the fp32 peak included. `first_step_s` is the first
warm-up step: with --compile it holds the compilation (its cost at the start = first_step_s - the step
time). `--ours-only` times tformer's model alone, beside a copy run in fp32 and eager ("tformer fp32 eager",
when either option is set): what the options gain, timed alternately in one process.
MFU is against the fp32 (TF32) peak; with `--precision bf16` or `fp16` the same product is also timed in that
dtype and `mfu_half` is against it (the figure the GPU targets speak of).

Every timed repetition is checked for other processes on the cores (`benchmarks.quiet`): the "quiet" column
lists the rounds that were not quiet (others' share of a core), and a "x tformer" ratio resting on such a
round is printed as not a result.

Prints Markdown; `--out` writes the same as JSON. Not a test; not run in CI.

B batch, T target (or BERT input) length, S source length, V vocabulary.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from torch import Tensor, nn

import tformer
from benchmarks import machine, quiet
from benchmarks.common import alternate_checked, apply_quick, at_least, device_arg, run_main, timed, write_json
from benchmarks.torch_transformer import TorchBaseline
from tformer.config import to_dict
from tformer.models.calc import train_flops_per_token
from tformer.training.precision import AUTOCAST_DTYPES, tf32_matmuls

SHAPES = {"gpt": (8, 256), "bert": (8, 256), "seq2seq": (16, 64)}  # (B, T); seq2seq: S = T
QUICK = dict(layers=2, d_model=64, heads=4, d_ff=256, vocab=512, batch=2, seq=32, reps=2, steps_per_rep=1,
             warmup=1)
REFERENCE = "tformer fp32 eager"  # with --ours-only: the same model without --precision and --compile
NO_DROPOUT = {"embed": 0.0, "attention": 0.0, "residual": 0.0, "activation": 0.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    for flag, default in (("--layers", 6), ("--d-model", 512), ("--heads", 8), ("--d-ff", 2048), ("--vocab", 8192)):
        p.add_argument(flag, type=at_least(1), default=default, help="every family (--layers: per stack)")
    p.add_argument("--batch", type=at_least(1), default=None, help="override every family's batch size")
    p.add_argument("--seq", type=at_least(1), default=None, help="override every family's length (T, and S = T)")
    p.add_argument("--reps", type=at_least(1), default=5, help="timed repetitions per contender (median)")
    p.add_argument("--steps-per-rep", type=at_least(1), default=2)
    p.add_argument("--warmup", type=at_least(0), default=2, help="untimed steps per contender first")
    p.add_argument("--threads", type=at_least(1), default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--device", type=device_arg, default="auto")
    p.add_argument("--precision", choices=["fp32", *AUTOCAST_DTYPES], default="fp32",
                   help="autocast dtype of forward and loss (fp16: with a loss scaler)")
    p.add_argument("--compile", action="store_true", help="torch.compile each contender's forward and loss as one")
    p.add_argument("--ours-only", action="store_true", help="time tformer's model alone")
    p.add_argument("--hf-attention", nargs="+", choices=["eager", "sdpa"], default=["eager", "sdpa"],
                   help="the GPT2LMHeadModel contenders (each compiles apart under --compile)")
    p.add_argument("--nanogpt", type=Path, default=None, metavar="DIR",
                   help="a clone of karpathy/nanoGPT: its model.py joins the gpt contenders")
    p.add_argument("--quick", action="store_true", help="tiny sizes, for smoke tests")
    p.add_argument("--seed", type=int, default=0)
    quiet.add_threshold_arg(p)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    if args.nanogpt is not None and not (args.nanogpt / "model.py").is_file():
        p.error(f"--nanogpt {args.nanogpt}: no model.py there (git clone https://github.com/karpathy/nanoGPT)")
    if args.quick:
        apply_quick(p, args, QUICK)
    return args


def build_config(args: argparse.Namespace, family: str, seq: int) -> tformer.config.TransformerConfig:
    sizes = dict(vocab_size=args.vocab, d_model=args.d_model, n_heads=args.heads, d_ff=args.d_ff,
                 n_layers=args.layers, max_len=seq, dropout=NO_DROPOUT)
    if family == "gpt":
        return tformer.GPTConfig(**sizes)
    if family == "bert":
        return tformer.BertConfig(**sizes, classifier_dropout=0.0)
    return tformer.Seq2SeqConfig(**sizes, positions={"kind": "sinusoidal", "sinusoid_layout": "split"})  # Marian's


def make_batch(family: str, config: tformer.config.TransformerConfig, batch: int, seq: int,
               g: torch.Generator) -> dict[str, Tensor]:
    """Random ids above the special ones (no padding anywhere): inputs, targets and, per family, the rest."""
    ids = torch.randint(3, config.vocab_size, (batch, seq + 1), generator=g)  # (B, T + 1)
    if family == "gpt":
        return dict(x=ids[:, :-1], y=ids[:, 1:])
    if family == "bert":
        x = ids[:, :-1]  # (B, T)
        masked = torch.rand(batch, seq, generator=g) < 0.15
        return dict(x=x, segments=(torch.arange(seq) >= seq // 2).long().expand(batch, seq).contiguous(),
                    y=torch.where(masked, x, -100), nsp=torch.randint(0, 2, (batch,), generator=g))
    ids[:, 0] = config.decoder_start_id
    src = torch.randint(3, config.vocab_size, (batch, seq), generator=g)  # (B, S)
    return dict(src=src, x=ids[:, :-1], y=ids[:, 1:])


def lm_loss(logits: Tensor, b: dict[str, Tensor]) -> Tensor:
    return F.cross_entropy(logits.flatten(0, 1), b["y"].flatten())  # (B T, V) vs (B T)


def bert_loss(mlm: Tensor, nsp: Tensor, b: dict[str, Tensor]) -> Tensor:
    return F.cross_entropy(mlm.flatten(0, 1), b["y"].flatten(), ignore_index=-100) + F.cross_entropy(nsp, b["nsp"])


def copy_into_torch(ours: nn.Module, baseline: nn.Module) -> None:
    """Our EncoderDecoder's weights into torch_transformer's `TorchBaseline`; its final norms stay at
    their init (identity on a LayerNorm's output, up to eps)."""
    sd = ours.state_dict()
    out = {"tokens.weight": sd["tgt_embed.tokens.weight"], "lm_head.weight": sd["lm_head.weight"]}
    for side, cross in (("encoder", False), ("decoder", True)):
        attns = {"mixer": "self_attn", **({"cross_attn": "multihead_attn"} if cross else {})}
        norms = ["mixer_norm", "cross_norm", "mlp_norm"] if cross else ["mixer_norm", "mlp_norm"]
        parts = {"mlp.fc_in": "linear1", "mlp.fc_out": "linear2", **{n: f"norm{j}" for j, n in enumerate(norms, 1)},
                 **{f"{a}.out_proj": f"{m}.out_proj" for a, m in attns.items()}}
        for i in range(len(getattr(ours, side).layers)):
            mine, theirs = f"{side}.layers.{i}", f"transformer.{side}.layers.{i}"
            for p in ("weight", "bias"):
                out |= {f"{theirs}.{t}.{p}": sd[f"{mine}.{o}.{p}"] for o, t in parts.items()}
                out |= {f"{theirs}.{m}.in_proj_{p}": torch.cat([sd[f"{mine}.{a}.{x}_proj.{p}"] for x in "qkv"])
                        for a, m in attns.items()}
    missing, unexpected = baseline.load_state_dict(out, strict=False)
    left = [k for k in missing if not k.startswith(("transformer.encoder.norm.", "transformer.decoder.norm."))]
    if left or unexpected:
        raise RuntimeError(f"copying into nn.Transformer: missing {left}, unexpected {unexpected}")


def our_loss(family: str, model: nn.Module, b: dict[str, Tensor]) -> Callable[[], Tensor]:
    """A call returning our `model`'s loss on batch `b`."""
    if family == "gpt":
        return lambda: lm_loss(model(b["x"]), b)
    if family == "bert":
        return lambda: bert_loss(*model(b["x"], segments=b["segments"]), b)
    return lambda: lm_loss(model(b["src"], b["x"]), b)


def nanogpt_model(directory: Path, config: tformer.config.TransformerConfig, gpt2: nn.Module) -> nn.Module:
    """nanoGPT's GPT from `directory`/model.py, sized as `config`, holding `gpt2`'s weights (a GPT2LMHeadModel
    that holds ours): the same names, each Conv1D weight transposed into nanoGPT's Linear."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nanogpt_model", directory / "model.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.compile imports the module of the code it traces by name
    spec.loader.exec_module(module)
    nano = module.GPT(module.GPTConfig(block_size=config.max_len, vocab_size=config.vocab_size,
                                       n_layer=config.n_layers, n_head=config.n_heads, n_embd=config.d_model,
                                       dropout=0.0, bias=True))
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    theirs = gpt2.state_dict()
    state = {k: (v.t() if k.endswith(conv1d) else v) for k, v in theirs.items() if k in nano.state_dict()}
    missing, _ = nano.load_state_dict(state, strict=False)
    if [k for k in missing if not k.endswith(".attn.bias")]:  # the causal-mask buffer of its non-flash path
        raise RuntimeError(f"copying into nanoGPT: missing {missing}")
    return nano


Contenders = dict[str, tuple[nn.Module, Callable[[], Tensor]]]  # name -> (model, a call returning its loss)


def contenders(family: str, config: tformer.config.TransformerConfig, b: dict[str, Tensor], *,
               ours_only: bool = False, nanogpt: Path | None = None,
               hf_attention: tuple[str, ...] = ("eager", "sdpa")) -> Contenders:
    """Name -> (model, a call returning its loss on batch `b`). Our model first; the rest load its weights.
    `ours_only`: our model, and a copy of it (REFERENCE) to run without --precision and --compile."""
    ours = tformer.build_model(config)
    ours_loss = our_loss(family, ours, b)
    if ours_only:
        reference = copy.deepcopy(ours)
        return {"tformer": (ours, ours_loss), REFERENCE: (reference, our_loss(family, reference, b))}
    with tempfile.TemporaryDirectory() as tmp:
        tformer.to_hf(ours, tmp)
        if family == "gpt":
            hf = {kind: transformers.GPT2LMHeadModel.from_pretrained(tmp, attn_implementation=kind)
                  for kind in hf_attention}

            def gpt2(m: nn.Module) -> Callable[[], Tensor]:
                return lambda: lm_loss(m(input_ids=b["x"], use_cache=False).logits, b)

            found = {"tformer": (ours, ours_loss),
                     **{f"GPT2LMHeadModel {kind}": (m, gpt2(m)) for kind, m in hf.items()}}
            if nanogpt is not None:
                nano = nanogpt_model(nanogpt, config, next(iter(hf.values())))
                y = b["y"].contiguous()  # nanoGPT views its targets
                found["nanoGPT model.py"] = (nano, lambda: nano(b["x"], y)[1])  # its own mean cross-entropy
            return found
        if family == "bert":
            hf = transformers.BertForPreTraining.from_pretrained(tmp)
            mask = torch.ones_like(b["x"])

            def hf_bert() -> Tensor:
                out = hf(input_ids=b["x"], token_type_ids=b["segments"], attention_mask=mask)
                return bert_loss(out.prediction_logits, out.seq_relationship_logits, b)

            return {"tformer": (ours, ours_loss),
                    "BertForPreTraining": (hf, hf_bert)}
        hf = transformers.MarianMTModel.from_pretrained(tmp)
    baseline = TorchBaseline(config)
    copy_into_torch(ours, baseline)
    mask = torch.ones_like(b["src"])
    return {"tformer": (ours, ours_loss),
            "torch.nn.Transformer": (baseline, lambda: lm_loss(baseline(b["src"], b["x"]), b)),
            "MarianMTModel": (hf, lambda: lm_loss(hf(input_ids=b["src"], attention_mask=mask,
                                                     decoder_input_ids=b["x"], use_cache=False).logits, b))}


def attention_of(model: nn.Module) -> str:
    """Which attention code a contender runs."""
    if isinstance(model.config, transformers.PretrainedConfig):
        return f"HF {model.config._attn_implementation}"
    if type(model).__module__ == "nanogpt_model":
        return "nanoGPT (SDPA, causal)"
    return "nn.MultiheadAttention" if hasattr(model, "transformer") else f"tformer {model.config.attention.kind}"


def train_step(model: nn.Module, loss_fn: Callable[[], Tensor], *, precision: str = "fp32",
               compile: bool = False) -> tuple[Callable[[], Tensor], str]:
    """One training step of `model` (-> its loss before the update) with a fresh AdamW, fused where torch has
    a fused kernel for these parameters, as both `tformer train` (`training.optim.build_optimizer`) and
    Hugging Face's Trainer (optim="adamw_torch_fused", its default from torch 2.8) use it; and which
    implementation that is: fused, foreach or for-loop. Forward and loss under `precision`'s autocast; with
    `compile`, `loss_fn` (the model's forward and its loss) compiled as one, as `tformer train` compiles them."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    from tformer.training.optim import fused_supported

    model.train()
    if compile:
        loss_fn = torch.compile(loss_fn)
    device = next(model.parameters()).device
    fused = fused_supported(list(model.parameters()))
    optimizer = torch.optim.AdamW(model.parameters(), fused=fused or None)
    foreach = _default_to_fused_or_foreach(list(model.parameters()), differentiable=False)[1]
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    dtype = AUTOCAST_DTYPES.get(precision)

    def step() -> Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    return step, "fused" if fused else "foreach" if foreach else "for-loop"


def measure(args: argparse.Namespace, family: str, peak_flops: float, half_peak_flops: float | None = None) -> dict:
    """Build the family's contenders, check their step-0 losses agree, time them; one row per contender."""
    device = torch.device(args.device)
    batch, seq = args.batch or SHAPES[family][0], args.seq or SHAPES[family][1]
    torch.manual_seed(args.seed)
    config = build_config(args, family, seq)
    b = {k: v.to(device) for k, v in make_batch(family, config, batch, seq, torch.Generator().manual_seed(1)).items()}
    built = contenders(family, config, b, ours_only=args.ours_only, nanogpt=args.nanogpt,
                       hf_attention=tuple(args.hf_attention))
    if args.precision == "fp32" and not args.compile:
        built.pop(REFERENCE, None)  # it would be "tformer" again
    steps, impls, losses, first = {}, {}, {}, {}
    for name, (model, loss_fn) in built.items():
        model.to(device)
        options = dict(precision=args.precision, compile=args.compile) if name != REFERENCE else {}
        steps[name], impls[name] = train_step(model, loss_fn, **options)
        first[name], loss0 = timed(steps[name], device)  # the first warm-up step (with --compile, compiling)
        losses[name] = loss0.item()  # the loss before any update
        for _ in range(args.warmup - 1):
            steps[name]()
    reps = {name: lambda s=step: [s() for _ in range(args.steps_per_rep)] for name, step in steps.items()}
    times, checks = alternate_checked(reps, device, args.reps, threshold=args.quiet_threshold)
    times = {name: [t / args.steps_per_rep for t in ts] for name, ts in times.items()}
    flops = train_flops_per_token(config, seq)
    tokens = batch * seq
    rows = []
    for name, (model, _) in built.items():
        median = statistics.median(times[name])
        rows.append(dict(contender=name, attention=attention_of(model), optimizer=f"AdamW ({impls[name]})",
                         parameters=sum(p.numel() for p in model.parameters() if p.grad is not None),
                         tokens_per_s=tokens / median, ms_per_step=1000 * median,
                         mfu=tokens / median * flops / peak_flops, loss0=losses[name], step_s=times[name],
                         first_step_s=first[name],
                         mfu_half=None if half_peak_flops is None else tokens / median * flops / half_peak_flops,
                         quiet=quiet.verdict(checks[name]), rounds=[c.as_dict() for c in checks[name]]))
    for r in rows:
        r["vs_tformer"] = r["tokens_per_s"] / rows[0]["tokens_per_s"]
        r["refused"] = quiet.refusal({x["contender"]: checks[x["contender"]] for x in (rows[0], r)})
    return dict(family=family, batch=batch, seq=seq, precision=args.precision, compile=args.compile,
                tokens_per_step=tokens, train_flops_per_token=flops,
                max_loss0_diff=max(abs(r["loss0"] - rows[0]["loss0"]) for r in rows), config=to_dict(config),
                rows=rows)


def markdown(result: dict) -> str:
    r0 = result["rows"][0]
    shape_text = f"{result['batch']} x {result['seq']}" + (" (+ source)" if result["family"] == "seq2seq" else "")
    lines = [f"### {result['family']}: batch {shape_text}, "
             f"{result['train_flops_per_token'] / 1e6:.3g} MFLOP per training token, {result['precision']}"
             + (", compiled" if result["compile"] else ""),
             f"step-0 loss {r0['loss0']:.5f}; max |difference| between contenders {result['max_loss0_diff']:.1e}",
             "", "| contender | trained params | attention | optimizer | tokens/s | ms per step | first step s | MFU "
             "| x tformer | quiet |", "|---|---:|---|---|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['contender']} | {r['parameters']:,} | {r['attention']} | {r['optimizer']} | "
              f"{r['tokens_per_s']:.0f} | {r['ms_per_step']:.0f} | {r['first_step_s']:.2f} | {100 * r['mfu']:.1f}%"
              + ("" if r["mfu_half"] is None else f" ({100 * r['mfu_half']:.1f}% of {result['precision']})")
              + (f" | ({r['vs_tformer']:.2f}) not a result" if r.get("refused") else f" | {r['vs_tformer']:.2f}")
              + f" | {quiet.marks(quiet.rounds_of(r))} |"
              for r in result["rows"]]
    lines += [f"\n{r['contender']}: {r['refused']}" for r in result["rows"] if r.get("refused")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    size = dict(n=256, mib=8, reps=3) if args.quick else {}
    with tf32_matmuls(torch.device(args.device)):  # on a GPU, as `tformer train` runs (the peak measured alike)
        limits = machine.limits(args.device, **size)
        info = machine.describe(args.device)
        print(f"{machine.summary(info, limits)}; transformers {transformers.__version__}"
              + (" (quick: small sizes, not the limits)" if args.quick else ""))
        half = AUTOCAST_DTYPES.get(args.precision)
        if half is not None:  # the peak the half-precision steps are held to, timed here alike
            limits[f"matmul_{args.precision}_gflops"] = machine.matmul_gflops(
                args.device, dtype=half, **({"n": 256, "reps": 3} if args.quick else {"n": 8192}))
            print(f"{args.precision} matmul {limits[f'matmul_{args.precision}_gflops']:.1f} GFLOP/s")
        results = []
        for family in args.families:
            results.append(measure(args, family, limits["matmul_gflops"] * 1e9,
                                   None if half is None else limits[f"matmul_{args.precision}_gflops"] * 1e9))
            print("\n" + markdown(results[-1]), flush=True)
    report = dict(args=vars(args), machine=info,
                  transformers=transformers.__version__, limits=limits, results=results)
    if args.out is not None:
        print(f"\nwrote {write_json(args.out, report)}", file=sys.stderr)
    return report


if __name__ == "__main__":
    run_main(main, "train_speed")
