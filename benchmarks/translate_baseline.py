"""The honest baseline: Hugging Face `MarianMTModel` of our run's sizes, trained from scratch as a user
would, on the same job for the same time; both scored side by side.

    python -m benchmarks.translate_baseline --run runs/demo [--batches recipe|user] [--minutes M] [--limit N]
        [--out-dir DIR]

The same: the data and, with --batches recipe (the default), the batches (`TranslationTask` from
RUN/recipe.yaml: seed, order, token budget, length curriculum, accum_steps); with --batches user, the batches
a transformers user writes instead (`user_batches`: the training pairs shuffled every epoch, 32 sentences a
batch padded to its longest, as `DataCollatorForSeq2Seq` pads them; no token budget, no curriculum). The
tokenizer (RUN/best/tokenizer, else RUN/last's), the sizes and shape (`marian_config`: width, layers, heads,
feed-forward, vocabulary, special ids, sqrt(d)-scaled sinusoidal embeddings shared by encoder,
decoder and output, the recipe's dropouts), label smoothing (torch's convention, as ours), clipping at 1.0,
the machine (train.device), the time budget (train.time_budget_min, or --minutes), and the scoring: the
recipe's beam, lenpen, max_len_a/b and decode.batch_size over length-sorted test sentences, detokenized by
our tokenizer, sacrebleu via `score_corpus`. Ours is RUN/best (else RUN/last) via `evaluate_checkpoint`.
Marian is post-LN, the paper's placement, whatever ours is.

What differs, as a transformers user would have it: AdamW (lr 5e-4, weight decay 0.01, betas 0.9/0.999)
in `get_linear_schedule_with_warmup`'s shape: the recipe's warm-up steps, then linear decay to 0 when the
time budget (or --max-steps) runs out, as a budget's step count is not known in advance. HF's init (normal,
std 0.02; ours Xavier); the split sinusoid layout; one `dropout` for embeddings and residuals (the recipe's
residual one). Marian's loop does no evaluations (ours spends part of its budget on them) and is scored at
its last step (ours at its best evaluation). The same trainable parameters; Marian also holds its two
sinusoid tables as frozen parameters (2 * max_len * d) and a zero `final_logits_bias` buffer (V). Beam
search: `early_stopping="never"` is our stopping rule (tested: the same weights decode alike); `generate`
takes one length limit a batch, the longest sentence's a * n + b, where ours limits each sentence.

Writes OUT_DIR (default RUN/../<run name>-marian): the model (`save_pretrained`) and comparison.json;
prints a Markdown table. Target tokens/s: the median over windows of log_every steps, as our loop logs.

B batch, S source length, T target length, V vocabulary.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from tformer.checkpoints import tokenizer_dir
from tformer.config import Seq2SeqConfig
from tformer.data.batching import Batch, collate
from tformer.data.device import resolve_device, to_device
from tformer.evaluation import score_corpus
from tformer.inference import DecodeConfig
from tformer.interop.common import ACTIVATIONS_TO_HF
from tformer.models.presets import build_model
from tformer.runs import RunDir
from tformer.tasks import load_recipe
from tformer.tasks.translation import (
    TranslationRecipe,
    TranslationTask,
    evaluate_checkpoint,
    model_config,
)
from tformer.tokenization.bpe import BPETokenizer

LR, WEIGHT_DECAY, CLIP_NORM = 5e-4, 0.01, 1.0


def marian_config(config: Seq2SeqConfig) -> Any:
    """transformers.MarianConfig of `config`'s sizes; a ValueError naming each size Marian cannot express.
    Marian is the paper's post-LN Transformer whatever our norm placement: a user takes it as it comes."""
    from transformers import MarianConfig

    problems = [what for bad, what in [
        (config.activation not in ACTIVATIONS_TO_HF, f"activation={config.activation!r}"),
        (config.positions.kind != "sinusoidal", f"positions.kind={config.positions.kind!r}"),
        (config.n_kv_heads != config.n_heads or config.head_dim * config.n_heads != config.d_model,
         "n_kv_heads / head_dim other than n_heads / d_model // n_heads"),
        (not (config.shared_vocab and config.tie_embeddings and config.bias and not config.output_bias),
         "src_vocab_size, tie_embeddings, bias or output_bias (Marian shares and ties one embedding, has "
         "biases, and its output bias is a zero buffer)"),
    ] if bad]
    if problems:
        raise ValueError("MarianMTModel cannot express " + "; ".join(problems))
    return MarianConfig(
        vocab_size=config.vocab_size, d_model=config.d_model, max_position_embeddings=config.max_len,
        encoder_layers=config.n_layers, decoder_layers=config.n_decoder_layers,
        encoder_attention_heads=config.n_heads, decoder_attention_heads=config.n_heads,
        encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff,
        activation_function=ACTIVATIONS_TO_HF[config.activation],
        dropout=config.dropout.residual, attention_dropout=config.dropout.attention,
        activation_dropout=config.dropout.activation, scale_embedding=config.scale_embeddings,
        pad_token_id=config.pad_id, eos_token_id=config.eos_id, decoder_start_token_id=config.decoder_start_id,
        forced_eos_token_id=None, share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
    )


def n_trainable(model: nn.Module) -> int:
    """Trained numbers; a tied matrix counts once, frozen tables not at all."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def linear_warmup_decay(warmup: int, progress: Callable[[int], float]) -> Callable[[int], float]:
    """`get_linear_schedule_with_warmup`'s factor where the end of the run is known only as `progress(step)`
    in [0, 1] (the larger of the time and step fractions): step / warmup, then linear from 1 to 0."""
    at_warmup_end: list[float] = []

    def factor(step: int) -> float:
        if step < warmup:
            return step / warmup
        if not at_warmup_end:
            at_warmup_end.append(min(progress(step), 0.99))
        return max(0.0, (1.0 - progress(step)) / (1.0 - at_warmup_end[0]))

    return factor


def endless(task: TranslationTask) -> Iterator[Batch]:
    """The batches in the order tformer's loop reads them: epoch 0, 1, ..."""
    for epoch in itertools.count():
        yield from task.batches(epoch)


USER_BATCH = 32  # sentences a batch: the common choice for a model of this size on one device


def user_batches(task: TranslationTask, *, seed: int, size: int = USER_BATCH) -> Iterator[Batch]:
    """The batches of a plain user's loop: each epoch a new shuffle of the training pairs, cut into batches
    of `size` sentences, each padded to its longest sentence."""
    generator = torch.Generator().manual_seed(seed)
    examples, tok = task.train_examples, task.tokenizer
    for _ in itertools.count():
        order = torch.randperm(len(examples), generator=generator).tolist()
        for start in range(0, len(order), size):
            yield collate([examples[i] for i in order[start : start + size]], pad_id=tok.pad_id,
                          bos_id=tok.bos_id, eos_id=tok.eos_id)


def token_loss_sum(model: nn.Module, batch: Batch, *, pad_id: int, smoothing: float) -> Tensor:
    logits = model(input_ids=batch.src, attention_mask=batch.src != pad_id, decoder_input_ids=batch.tgt_in).logits
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=pad_id,
                           label_smoothing=smoothing, reduction="sum")  # logits (B, T, V)


def train_marian(model: nn.Module, task: TranslationTask, recipe: TranslationRecipe, *, minutes: float,
                 max_steps: int | None, device: torch.device, batching: str = "recipe",
                 progress: bool = True) -> dict[str, Any]:
    """A plain loop: AdamW, the linear schedule, clipping, until `minutes` of training or `max_steps`.
    Returns steps, seconds, the median target tokens/s and [step, loss] at every log_every steps."""
    train, pad = recipe.train, task.tokenizer.pad_id
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR,
                                  weight_decay=WEIGHT_DECAY)
    start = time.perf_counter()

    def progress_at(step: int) -> float:
        return max((time.perf_counter() - start) / (60 * minutes), step / max_steps if max_steps else 0.0)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_warmup_decay(train.schedule.warmup,
                                                                                 progress_at))
    batches = endless(task) if batching == "recipe" else user_batches(task, seed=train.seed)
    tokens, window_start, curve, rates = 0, start, [], []
    bar = tqdm(disable=not progress, unit="step", dynamic_ncols=True)
    model.train()
    for step in itertools.count(1):
        micro = [to_device(next(batches), device) for _ in range(train.accum_steps)]
        total, loss = sum(b.n_target_tokens for b in micro), 0.0
        for batch in micro:  # the loss of the step: summed over its target tokens, divided by their count
            part = token_loss_sum(model, batch, pad_id=pad, smoothing=train.label_smoothing) / total
            part.backward()
            loss += part.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += total
        bar.update(1)
        finished = progress_at(step) >= 1.0
        if step % train.log_every == 0 or finished:
            now = time.perf_counter()
            rates.append(tokens / max(now - window_start, 1e-9))
            curve.append([step, loss])
            tokens, window_start = 0, now
            bar.set_postfix(loss=f"{loss:.3f}", lr=f"{scheduler.get_last_lr()[0]:.2e}", tok_s=f"{rates[-1]:.0f}")
        if finished:
            bar.close()
            return {"steps": step, "seconds": time.perf_counter() - start,
                    "tokens_per_s": statistics.median(rates), "loss_curve": curve}
    raise AssertionError("unreachable")


@torch.inference_mode()
def marian_translate(model: nn.Module, tokenizer: BPETokenizer, sentences: list[str], decode: DecodeConfig, *,
                     max_len: int) -> list[str]:
    """As tformer's `translate`: sources cut at max_len, batches of length-sorted sentences, an empty line
    for an empty line; `generate` with one length limit a batch (its longest source's a * n + b)."""
    ids = [x[:max_len] for x in tokenizer.encode_batch(sentences)]
    todo = [i for i in sorted(range(len(ids)), key=lambda i: len(ids[i])) if ids[i]]
    pad, eos, device = tokenizer.pad_id, tokenizer.eos_id, next(model.parameters()).device
    stop = {"finished": True, "best": "never"}[decode.stopping]  # HF's names for our two stopping rules
    beam = dict(num_beams=decode.beam, length_penalty=decode.lenpen, early_stopping=stop) if decode.beam > 1 \
        else dict(num_beams=1)
    out = [""] * len(ids)
    for start in range(0, len(todo), decode.batch_size):
        chunk = todo[start : start + decode.batch_size]
        width = max(len(ids[i]) for i in chunk)
        src = torch.tensor([ids[i] + [pad] * (width - len(ids[i])) for i in chunk], device=device)  # (B, S)
        limit = min(int(decode.max_len_a * width + decode.max_len_b), max_len)
        tokens = model.generate(input_ids=src, attention_mask=src != pad, max_new_tokens=limit, do_sample=False,
                                suppress_tokens=[pad], **beam)  # (B, 1 + t): decoder start, then tokens
        for i, row in zip(chunk, tokens[:, 1:].tolist(), strict=True):
            out[i] = tokenizer.decode(row[: row.index(eos)] if eos in row else row)
    return out


# --- the runs -------------------------------------------------------------------------------------------


def read_metrics(run: Path) -> list[dict[str, Any]]:
    file = RunDir(run).metrics
    if not file.is_file():
        raise ValueError(f"{file} does not exist; --run must be a tformer run directory")
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


def compare(run: Path, *, minutes: float | None = None, max_steps: int | None = None, limit: int | None = None,
            out_dir: Path | None = None, batching: str = "recipe", progress: bool = True) -> dict[str, Any]:
    """Score RUN's checkpoint, train and score Marian on RUN's job, write OUT_DIR/comparison.json."""
    from transformers import MarianMTModel

    run = Path(run)
    recipe = load_recipe(RunDir(run).recipe)
    records = read_metrics(run)
    checkpoint = RunDir(run).trained() or RunDir(run).last
    directory = tokenizer_dir(checkpoint)
    if directory is None:
        raise ValueError(f"{checkpoint} has no tokenizer/; --run must be a trained tformer run directory")
    minutes = recipe.train.time_budget_min if minutes is None else minutes
    if minutes is None or not minutes > 0:
        raise ValueError("the recipe has no train.time_budget_min; pass --minutes (a positive number)")
    suffix = "marian" if batching == "recipe" else f"marian-{batching}"
    out_dir = Path(out_dir) if out_dir else run.resolve().parent / f"{run.resolve().name}-{suffix}"
    tokenizer, device = BPETokenizer.load(directory), resolve_device(recipe.train.device)
    config = model_config(recipe, tokenizer)
    ours, pairs, _ = evaluate_checkpoint(checkpoint, recipe.data, "test", recipe.decode, limit=limit)

    torch.manual_seed(recipe.train.seed)
    task = TranslationTask(recipe, tokenizer)
    model = MarianMTModel(marian_config(config)).to(device)
    trained = train_marian(model, task, recipe, minutes=minutes, max_steps=max_steps, device=device,
                           batching=batching, progress=progress)
    hyps = marian_translate(model.eval(), tokenizer, [s for s, _ in pairs], recipe.decode, max_len=config.max_len)
    theirs = score_corpus(hyps, [t for _, t in pairs])
    model.save_pretrained(out_dir / "model")
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    result = {
        "run": str(run), "checkpoint": str(checkpoint), "out_dir": str(out_dir), "split": "test",
        "sentences": len(pairs), "decode": vars(recipe.decode), "minutes": minutes, "max_steps": max_steps,
        "batches": batching,
        "models": [
            {"model": "tformer", "parameters": n_trainable(build_model(config)),
             "steps": max(r["step"] for r in records if "step" in r),
             "tokens_per_s": statistics.median(rates) if rates else None, "bleu": ours.bleu, "chrf": ours.chrf},
            {"model": "MarianMTModel", "parameters": n_trainable(model),
             "frozen": sum(p.numel() for p in model.parameters()) - n_trainable(model),
             "bleu": theirs.bleu, "chrf": theirs.chrf, **trained},
        ],
        "bleu_ratio": ours.bleu / theirs.bleu if theirs.bleu > 0 else None,
    }
    (out_dir / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def markdown_table(result: dict[str, Any]) -> str:
    ratio = result["bleu_ratio"]
    batches = "batches" if result["batches"] == "recipe" else "(Marian: a user's batches of 32 shuffled sentences)"
    lines = [f"test split, {result['sentences']} sentences, beam {result['decode']['beam']}; same data, "
             f"{batches}, tokenizer, sizes and machine; {result['minutes']:g} min budget", "",
             "| model | trainable parameters | steps | target tok/s | test BLEU | chrF |",
             "|---|---:|---:|---:|---:|---:|"]
    for m in result["models"]:
        speed = "-" if m["tokens_per_s"] is None else f"{m['tokens_per_s']:,.0f}"
        lines.append(f"| {m['model']} | {m['parameters']:,} | {m['steps']:,} | {speed} | {m['bleu']:.2f} | "
                     f"{m['chrf']:.2f} |")
    lines += ["", f"tformer BLEU / Marian BLEU: {'-' if ratio is None else f'{ratio:.2f}'}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, type=Path, help="a tformer translation run directory")
    parser.add_argument("--minutes", type=float, default=None,
                        help="Marian's training time (default: the recipe's train.time_budget_min)")
    parser.add_argument("--max-steps", type=int, default=None, help="also stop after N steps (tests)")
    parser.add_argument("--batches", choices=["recipe", "user"], default="recipe",
                        help="Marian's batches: the recipe's (default) or a plain user's (32 shuffled sentences)")
    parser.add_argument("--limit", type=int, default=None, help="score only the first N test sentences")
    parser.add_argument("--out-dir", type=Path, default=None, help="default: RUN/../<run name>-marian")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        result = compare(args.run, minutes=args.minutes, max_steps=args.max_steps, limit=args.limit,
                         out_dir=args.out_dir, batching=args.batches, progress=not args.no_progress)
    except ValueError as e:
        print(f"translate_baseline: error: {str(e).strip().splitlines()[0]}", file=sys.stderr)
        return 2
    print(markdown_table(result))
    print(f"\nwritten to {Path(result['out_dir']) / 'comparison.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
