"""The notes' road to the Transformer, measured: trained translators side by side, with BLEU by source length.

    python -m benchmarks.road RUN_DIR [RUN_DIR ...] --out DIR [--limit N] [--split test] [--edges 20 30 40 50]

Each RUN_DIR is a translation run of `tformer train` (e.g. runs/road-rnn, runs/road-attention, runs/demo):
its checkpoint RUN_DIR/best (else RUN_DIR/last), the recipe.yaml beside it and its metrics.jsonl. The
split (the recipe's test split: Acts for the Bible recipes) is translated once with the recipe's decoding
(beam 4 in the road recipes) by `tasks.translation.evaluate_checkpoint`, the function `tformer evaluate`
calls, so the overall BLEU and chrF are the numbers `tformer evaluate --checkpoint RUN_DIR/best --split test`
prints. The same translations are then scored by sacrebleu bucket by bucket.

Buckets: by the number of source tokens, in the model's own tokenizer (what the encoder reads, no </s>), cut at
fixed edges, by default 1-20, 21-30, 31-40, 41-50 and 51+. Fixed round edges rather than quantiles, because
they mean the same for every model (quantile edges would move with each run's tokenizer and with --limit)
and they read as lengths; on Acts with the demo's 4,000-token BPE they hold 117, 293, 277, 190 and 127 of
the 1,004 verses, every bucket over a hundred sentences, enough for a corpus BLEU. The count of each bucket
is reported with it. Each bucket's BLEU is a corpus BLEU over its sentences (`evaluation.score_corpus`).

From metrics.jsonl: the steps reached (the last step logged), the median training tokens/s of the logged
windows (`tasks.translation.training_rates`, as `tformer demo` reports it) and the wall minutes at the
last logged training window (evaluations included: the run's clock). Parameters: of the loaded model, a
tied matrix counted once.

Writes DIR/road.md (the table, also printed), DIR/road.json (the raw numbers, sacrebleu signatures and
decoding settings) and DIR/road-bleu-by-length.png (a line per model over the buckets). Each model is named
by its family and attention: "RNN (LSTM)", "RNN + attention (general)", "Transformer". Not run in CI.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import markdown_table, write_json
from tformer.config import RNNSeq2SeqConfig
from tformer.data.lines import normalise_text
from tformer.errors import UserError
from tformer.evaluation import score_corpus
from tformer.files import write_atomic
from tformer.inference import load
from tformer.runs import RunDir
from tformer.tasks.translation import TranslationRecipe, evaluate_checkpoint, run_recipe, training_rates
from tformer.viz.curves import read_metrics
from tformer.viz.figures import new_figure, save_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EDGES = (20, 30, 40, 50)  # a bucket's largest length; the last bucket holds everything longer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.road", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories of `tformer train`")
    p.add_argument("--out", type=Path, required=True, help="road.md, road.json and road-bleu-by-length.png go here")
    p.add_argument("--limit", type=int, default=None, help="score only the first N sentences of the split")
    p.add_argument("--split", default="test", choices=("train", "valid", "test"), help="the recipe's split")
    p.add_argument("--edges", type=int, nargs="+", default=list(EDGES),
                   help="the largest source length of each bucket but the last (default: 20 30 40 50)")
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        p.error(f"--limit={args.limit} must be a positive integer")
    if args.edges[0] < 1 or any(a >= b for a, b in itertools.pairwise(args.edges)):
        p.error(f"--edges={' '.join(map(str, args.edges))} must be positive and increasing")
    return args


# --- one run --------------------------------------------------------------------------------------------


def checkpoint_of(run: Path) -> Path:
    """RUN/best, else RUN/last; a one-line UserError naming the directory otherwise."""
    for checkpoint in RunDir(run).preferred:
        if (checkpoint / "config.yaml").is_file():
            return checkpoint
    raise UserError(f"{run} has no checkpoint: expected a run directory of `tformer train` holding best/ or last/ "
                    "(with config.yaml), recipe.yaml and metrics.jsonl")


def model_label(config: object) -> str:
    """The family and attention of a translator: "RNN (LSTM)", "RNN + attention (general)", "RNN + attention
    (dot, no input feeding)", "Transformer"."""
    if not isinstance(config, RNNSeq2SeqConfig):
        return "Transformer"
    if config.match == "none":
        return f"RNN ({config.cell.upper()})"
    return f"RNN + attention ({config.match}{'' if config.input_feeding else ', no input feeding'})"


def attention_of(config: object) -> str:
    """The RNN's MATCH function (none, dot, general, additive, cosine) or the Transformer's attention kind."""
    return config.match if isinstance(config, RNNSeq2SeqConfig) else config.attention.kind


def bucket_labels(edges: list[int]) -> list[str]:
    """[20, 30] -> ["1-20", "21-30", "31+"]."""
    lows = [1, *(e + 1 for e in edges)]
    return [f"{lo}-{hi}" for lo, hi in zip(lows[:-1], edges, strict=True)] + [f"{lows[-1]}+"]


def bucket_of(length: int, edges: list[int]) -> int:
    """The index of the first bucket whose largest length is >= `length` (the last bucket: longer than all)."""
    return next((k for k, e in enumerate(edges) if length <= e), len(edges))


def by_length(lengths: list[int], hyps: list[str], refs: list[str], edges: list[int]) -> list[dict[str, Any]]:
    """Per bucket: its label, its number of sentences and their corpus BLEU and chrF (None when it is empty)."""
    buckets: list[list[int]] = [[] for _ in range(len(edges) + 1)]
    for i, n in enumerate(lengths):
        buckets[bucket_of(n, edges)].append(i)
    out = []
    for label, members in zip(bucket_labels(edges), buckets, strict=True):
        scores = score_corpus([hyps[i] for i in members], [refs[i] for i in members]) if members else None
        out.append({"bucket": label, "sentences": len(members), "bleu": scores.bleu if scores else None,
                    "chrf": scores.chrf if scores else None})
    return out


def read_run(run: Path) -> tuple[Path, list[dict[str, Any]], TranslationRecipe]:
    """(checkpoint, metrics records, recipe) of a run directory; a one-line UserError for what is missing."""
    if not run.is_dir():
        raise UserError(f"run directory {run} does not exist")
    checkpoint = checkpoint_of(run)
    return checkpoint, read_metrics(run), run_recipe(checkpoint, command="evaluate", required=True)


def measure(run: Path, *, split: str, limit: int | None, edges: list[int]) -> dict[str, Any]:
    """Everything the table says about one run (see the module docstring)."""
    checkpoint, records, recipe = read_run(run)
    print(f"{run}: translating the {split} split with {checkpoint.name}/, beam {recipe.decode.beam}",
          file=sys.stderr, flush=True)
    scores, pairs, hyps = evaluate_checkpoint(checkpoint, recipe.data, split, recipe.decode, limit=limit,
                                              progress=sys.stderr.isatty())
    loaded = load(checkpoint, command="evaluate")  # the tokenizer that cut the sources, and the parameters
    config = loaded.config
    lengths = [len(ids) for ids in loaded.tokenizer.encode_batch([normalise_text(s) for s, _ in pairs])]
    median, overall = training_rates(records)
    training = [r for r in records if r.get("elapsed_s") is not None]
    return {
        "run": str(run), "checkpoint": str(checkpoint), "model": model_label(config),
        "family": "rnn" if isinstance(config, RNNSeq2SeqConfig) else "transformer",
        "cell": getattr(config, "cell", None), "attention": attention_of(config),
        "params": sum(p.numel() for p in loaded.model.parameters()),
        "steps": max(r["step"] for r in records), "tokens_per_s": median, "tokens_per_s_overall": overall,
        "wall_min": training[-1]["elapsed_s"] / 60 if training else None,
        "split": split, "sentences": len(pairs), "bleu": scores.bleu, "chrf": scores.chrf,
        "degenerate": scores.degenerate, "bleu_signature": scores.bleu_signature,
        "chrf_signature": scores.chrf_signature, "decode": vars(recipe.decode),
        "buckets": by_length(lengths, hyps, [t for _, t in pairs], edges),
    }


# --- the table and the picture ----------------------------------------------------------------------------


def number(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def counts(results: list[dict[str, Any]], k: int) -> str:
    """The sentences in bucket k: one number when every run agrees (the same tokenizer), else each run's."""
    found = [r["buckets"][k]["sentences"] for r in results]
    return str(found[0]) if len(set(found)) == 1 else "/".join(map(str, found))


def markdown(results: list[dict[str, Any]]) -> str:
    """One row per run; a bucket's column says its source lengths and its number of sentences."""
    labels = [b["bucket"] for b in results[0]["buckets"]]
    head = ["model", "run", "params", "steps", "tokens/s", "minutes", "BLEU", "chrF",
            *(f"BLEU {label} (n={counts(results, k)})" for k, label in enumerate(labels))]
    rows = [[r["model"], f"`{r['run']}`", f"{r['params'] / 1e6:.2f}M", str(r["steps"]),
             number(r["tokens_per_s"], ".0f"), number(r["wall_min"]), number(r["bleu"]), number(r["chrf"]),
             *(number(b["bleu"]) for b in r["buckets"])] for r in results]
    lines = [markdown_table(head, "l" * len(head), rows)]
    first = results[0]
    note = (f"\n{first['split']} split, {first['sentences']} sentences, beam {first['decode']['beam']}; sacrebleu "
            f"{first['bleu_signature']}; buckets by source tokens (the model's tokenizer).\n")
    return "\n".join(lines) + "\n" + note


def plot_by_length(results: list[dict[str, Any]]) -> Figure:
    """A line per model: corpus BLEU in each source-length bucket; the buckets' sizes in the tick labels."""
    fig = new_figure(6.5, 3.8)
    ax = fig.add_subplot()
    names = [r["model"] for r in results]
    for r, name in zip(results, names, strict=True):
        label = name if names.count(name) == 1 else f"{name}, {r['run']}"
        ax.plot(range(len(r["buckets"])), [math.nan if b["bleu"] is None else b["bleu"] for b in r["buckets"]],
                marker="o", label=label)
    buckets = results[0]["buckets"]
    ax.set_xticks(range(len(buckets)))
    ax.set_xticklabels([f"{b['bucket']}\nn={counts(results, k)}" for k, b in enumerate(buckets)])
    ax.set_xlabel("source length (tokens); n = sentences in the bucket")
    ax.set_ylabel("corpus BLEU")
    ax.set_ylim(bottom=0)
    ax.set_title(f"BLEU by source length ({results[0]['split']} split, {results[0]['sentences']} sentences)")
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        for run in args.runs:  # every run readable before the first one is translated (minutes each)
            read_run(run)
        results = [measure(run, split=args.split, limit=args.limit, edges=args.edges) for run in args.runs]
        table = markdown(results)
        print(table)
        args.out.mkdir(parents=True, exist_ok=True)
        write_atomic(args.out / "road.md", table)
        write_json(args.out / "road.json", {"split": args.split, "limit": args.limit, "edges": args.edges,
                                             "results": results})
        save_figure(plot_by_length(results), args.out / "road-bleu-by-length.png")
    except UserError as e:
        print(f"road: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}/road.md, road.json, road-bleu-by-length.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
