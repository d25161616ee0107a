"""The honest baseline: `torch.nn.Transformer` trained on exactly the job a tformer translation run did,
and both scored side by side.

    python benchmarks/translate_baseline.py --run runs/demo [--steps N] [--limit N] [--out-dir DIR]

What is the same: the recipe (RUN/recipe.yaml), the tokenizer (RUN/last/tokenizer), the data and its
batches (the same `TranslationTask`, the same seed), the model sizes (`model_config`), the optimizer, the
schedule, label smoothing and clipping (the same `TrainConfig`, through the same `fit`), the number of
optimizer steps (those our run did, from RUN/metrics.jsonl), the evaluations and the choice of the `best`
checkpoint (the recipe's eval_every and best_metric), and the test decoding (greedy, the recipe's length
limits). What differs is the model: `nn.Transformer`'s layers instead of ours, with the embeddings,
sinusoidal positions and tied output projection around them built as ours are. `nn.Transformer` adds a
final LayerNorm to its encoder and its decoder (2 * 2d parameters more than a post-LN tformer model); it
stays, as users would run it. It has no KV cache: decoding re-runs the whole prefix at every step.

Training tokens/s come from each run's metrics.jsonl (the median of the logged windows); they compare
only when both runs had the same machine to themselves.

Writes OUT_DIR (default: RUN/../<run name>-torch-baseline) with the baseline's metrics.jsonl, last/ and
best/ checkpoints (config.yaml names the model TorchBaseline, so `tformer translate` cannot load it; this
script can), and OUT_DIR/comparison.json; prints a Markdown table.

B batch, S source length, T target length, d width, V vocabulary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tformer.config import Seq2SeqConfig
from tformer.evaluation import score_corpus
from tformer.nn.positions import sinusoid_table
from tformer.tasks import load_recipe
from tformer.tasks.translation import (
    DecodeConfig,
    TranslationRecipe,
    TranslationTask,
    load_split,
    load_translator,
    model_config,
    translate,
)
from tformer.tokenization.bpe import BPETokenizer
from tformer.training.checkpoint import load_training_state, load_weights, tokenizer_dir
from tformer.training.loop import fit

TORCH_ACTIVATIONS = ("relu", "gelu")


def check_supported(config: Seq2SeqConfig) -> None:
    """A ValueError naming each part of `config` that `nn.Transformer` cannot express."""
    problems = []
    if config.norm.kind != "layernorm":
        problems.append(f"norm.kind={config.norm.kind!r} (nn.Transformer has LayerNorm only)")
    if config.activation not in TORCH_ACTIVATIONS:
        problems.append(f"activation={config.activation!r} (allowed: {', '.join(TORCH_ACTIVATIONS)})")
    if config.positions.kind != "sinusoidal":
        problems.append(f"positions.kind={config.positions.kind!r} (the baseline adds sinusoids only)")
    if config.n_kv_heads != config.n_heads or config.head_dim * config.n_heads != config.d_model:
        problems.append("n_kv_heads / head_dim other than n_heads / d_model // n_heads")
    if not config.shared_vocab:
        problems.append("src_vocab_size (the baseline shares one vocabulary)")
    if problems:
        raise ValueError("nn.Transformer cannot express " + "; ".join(problems))


class TorchBaseline(nn.Module):
    """`nn.Transformer` behind tformer's encoder-decoder interface (`config`, `encode`, `decode`,
    `new_caches`, forward(src, tgt) -> logits), so that tformer's task, loop and greedy decoding run it.

    Around it, as in `EncoderDecoder`: one token embedding shared by source and target, times sqrt(d),
    plus the same sinusoids, then dropout; an output projection tied to the embedding. Dropout follows the
    config part by part (nn.Transformer's single `dropout` is the residual one; its attention and
    feed-forward dropouts are then set to ours)."""

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        check_supported(config)
        self.config = config
        d = config.d_model
        self.tokens = nn.Embedding(config.vocab_size, d)
        self.scale = math.sqrt(d) if config.scale_embeddings else 1.0
        table = sinusoid_table(config.max_len, d, layout=config.positions.sinusoid_layout)  # (n, d)
        self.register_buffer("positions", table, persistent=False)
        self.embed_dropout = nn.Dropout(config.dropout.embed)
        with warnings.catch_warnings():  # pre-LN or bias=False: no nested-tensor fast path; say it once, here
            warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
            self.transformer = nn.Transformer(
                d_model=d, nhead=config.n_heads, num_encoder_layers=config.n_layers,
                num_decoder_layers=config.n_decoder_layers, dim_feedforward=config.d_ff,
                dropout=config.dropout.residual, activation=config.activation, layer_norm_eps=config.norm.eps,
                batch_first=True, norm_first=config.norm.placement == "pre", bias=config.bias,
            )
        for layer in [*self.transformer.encoder.layers, *self.transformer.decoder.layers]:
            layer.dropout.p = config.dropout.activation  # inside the feed-forward
            for attn in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attn is not None:
                    attn.dropout = config.dropout.attention  # on the attention weights
        self.lm_head = nn.Linear(d, config.vocab_size, bias=config.output_bias)
        for linear in (self.tokens, self.lm_head):  # as tformer's init; nn.Transformer inits its own layers
            if config.init.kind == "xavier":
                nn.init.xavier_uniform_(linear.weight)
            else:
                nn.init.normal_(linear.weight, std=config.init.std)
        if self.lm_head.bias is not None:
            nn.init.zeros_(self.lm_head.bias)
        if config.tie_embeddings:
            self.lm_head.weight = self.tokens.weight

    def embed(self, ids: Tensor) -> Tensor:
        """(B, T) ids -> (B, T, d): tokens * scale + sinusoids, dropout."""
        if ids.shape[1] > self.config.max_len:
            raise ValueError(f"sequence length {ids.shape[1]} is longer than the context "
                             f"max_len={self.config.max_len}")
        x = self.tokens(ids) * self.scale + self.positions[: ids.shape[1]]  # (B, T, d)
        return self.embed_dropout(x)

    def encode(self, src: Tensor, src_valid: Tensor | None = None) -> Tensor:
        """src (B, S) ids; src_valid (B, S) True at real tokens (default: ids != pad) -> (B, S, d)."""
        if src_valid is None:
            src_valid = src != self.config.pad_id
        return self.transformer.encoder(self.embed(src), src_key_padding_mask=~src_valid)  # torch: True = pad

    def decode(self, tgt: Tensor, memory: Tensor, src_valid: Tensor, *, tgt_valid: Tensor | None = None,
               caches: list | None = None, offset: int = 0) -> Tensor:
        """tgt (B, T) decoder inputs from position 0; memory (B, S, d); src_valid (B, S); tgt_valid (B, T)
        True at real target tokens (None: no target padding) -> logits (B, T, V). No KV cache: `caches`
        must be None and `offset` 0 (what `new_caches` makes greedy and beam search do)."""
        if caches is not None or offset:
            raise ValueError("nn.Transformer has no KV cache; decode the whole prefix (caches=None, offset=0)")
        n = tgt.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool, device=tgt.device).triu(1)  # (T, T) True = not allowed
        h = self.transformer.decoder(
            self.embed(tgt), memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=~src_valid,
            tgt_key_padding_mask=None if tgt_valid is None else ~tgt_valid,
        )  # (B, T, d)
        return self.lm_head(h)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Teacher forcing: src (B, S), tgt (B, T) decoder inputs, both padded with pad_id -> (B, T, V)."""
        src_valid = src != self.config.pad_id
        return self.decode(tgt, self.encode(src, src_valid), src_valid)

    def new_caches(self, batch: int, max_len: int) -> None:
        """No cache: tformer's greedy and beam search then feed the whole prefix at every step."""
        return None


def n_parameters(model: nn.Module) -> int:
    """Trainable numbers; a tied matrix counts once."""
    return sum(p.numel() for p in model.parameters())


# --- the runs -------------------------------------------------------------------------------------------


def read_metrics(run: Path) -> list[dict[str, Any]]:
    file = run / "metrics.jsonl"
    if not file.is_file():
        raise ValueError(f"{file} does not exist; --run must be a tformer run directory")
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


def steps_done(records: list[dict[str, Any]]) -> int:
    """The step of the last record that has one: how many optimizer steps the run did."""
    steps = [r["step"] for r in records if "step" in r]
    if not steps:
        raise ValueError("metrics.jsonl has no record with a step; pass --steps")
    return int(steps[-1])


def train_speed(records: list[dict[str, Any]]) -> float | None:
    """Median training tokens/s over the logged windows (the median shrugs off a slow first window)."""
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    return statistics.median(rates) if rates else None


def chosen_checkpoint(run: Path) -> Path:
    """RUN/best when the run kept one, else RUN/last."""
    best = run / "best"
    return best if best.is_dir() else run / "last"


def train_baseline(recipe: TranslationRecipe, tokenizer: BPETokenizer, *, steps: int, out_dir: Path,
                   eval_every: int, progress: bool = True) -> TorchBaseline:
    """Train `TorchBaseline` as `train_translation` trains ours: same seed, task, loop and TrainConfig,
    for `steps` steps and no time budget. Returns the model with its `best` weights loaded."""
    if (out_dir / "metrics.jsonl").exists():
        raise ValueError(f"{out_dir} already holds a run; remove it or pass another --out-dir")
    train = dataclasses.replace(recipe.train, max_steps=steps, time_budget_min=None, eval_every=eval_every)
    torch.manual_seed(train.seed)
    task = TranslationTask(recipe, tokenizer)
    config = model_config(recipe, tokenizer)
    model = TorchBaseline(config)
    fit(model, config, task, train, out_dir=out_dir, tokenizer=tokenizer, progress=progress)
    load_weights(model, chosen_checkpoint(out_dir))
    return model.eval()


def score_pairs(model: nn.Module, tokenizer: BPETokenizer, pairs: list[tuple[str, str]],
                decode: DecodeConfig) -> dict[str, float]:
    hyps = translate(model, tokenizer, [s for s, _ in pairs], decode)
    scores = score_corpus(hyps, [t for _, t in pairs])
    return {"bleu": scores.bleu, "chrf": scores.chrf}


def summary(name: str, model: nn.Module, run: Path, scores: dict[str, float]) -> dict[str, Any]:
    records = read_metrics(run)
    checkpoint = chosen_checkpoint(run)
    return {"model": name, "checkpoint": str(checkpoint), "parameters": n_parameters(model),
            "steps": steps_done(records), "best_step": int(load_training_state(checkpoint, restore_rng=False)["step"]),
            "train_tokens_per_s": train_speed(records), **scores}


def compare(run: Path, *, steps: int | None = None, limit: int | None = None, out_dir: Path | None = None,
            eval_every: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Train the baseline on RUN's job, score both on the test split (greedy), write OUT_DIR/comparison.json."""
    run = Path(run)
    recipe = load_recipe(run / "recipe.yaml")
    directory = tokenizer_dir(run / "last")
    if directory is None:
        raise ValueError(f"{run / 'last'} has no tokenizer/; --run must be a trained tformer run directory")
    tokenizer = BPETokenizer.load(directory)
    steps = steps_done(read_metrics(run)) if steps is None else steps
    out_dir = Path(out_dir) if out_dir else run.resolve().parent / f"{run.resolve().name}-torch-baseline"
    ours, ours_tokenizer = load_translator(chosen_checkpoint(run))  # what can fail, before training
    pairs = load_split(recipe.data, "test")[:limit]
    decode = DecodeConfig(**{**vars(recipe.decode), "beam": 1})
    eval_every = recipe.train.eval_every if eval_every is None else eval_every
    baseline = train_baseline(recipe, tokenizer, steps=steps, out_dir=out_dir, eval_every=eval_every,
                              progress=progress)
    result = {
        "run": str(run), "baseline_dir": str(out_dir), "split": "test", "sentences": len(pairs),
        "decode": vars(decode),
        "models": [
            summary("tformer", ours, run, score_pairs(ours, ours_tokenizer, pairs, decode)),
            summary("torch.nn.Transformer", baseline, out_dir, score_pairs(baseline, tokenizer, pairs, decode)),
        ],
    }
    (out_dir / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def markdown_table(result: dict[str, Any]) -> str:
    lines = [f"test split, first {result['sentences']} sentences, greedy decoding; same data, tokenizer, "
             "batches, seed, optimizer, schedule and steps", "",
             "| model | parameters | steps | best at step | train tok/s | test BLEU | chrF |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for m in result["models"]:
        speed = "-" if m["train_tokens_per_s"] is None else f"{m['train_tokens_per_s']:.0f}"
        lines.append(f"| {m['model']} | {m['parameters']:,} | {m['steps']} | {m['best_step']} | {speed} | "
                     f"{m['bleu']:.2f} | {m['chrf']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, type=Path, help="a tformer translation run directory")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: as many as the run)")
    parser.add_argument("--limit", type=int, default=None, help="score only the first N test sentences")
    parser.add_argument("--out-dir", type=Path, default=None, help="default: RUN/../<run name>-torch-baseline")
    parser.add_argument("--eval-every", type=int, default=None,
                        help="steps between evaluations (default: the recipe's, so both choose `best` alike)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        result = compare(args.run, steps=args.steps, limit=args.limit, out_dir=args.out_dir,
                         eval_every=args.eval_every, progress=not args.no_progress)
    except ValueError as e:
        print(f"translate_baseline: error: {str(e).strip().splitlines()[0]}", file=sys.stderr)
        return 2
    print(markdown_table(result))
    print(f"\nwritten to {Path(result['baseline_dir']) / 'comparison.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
