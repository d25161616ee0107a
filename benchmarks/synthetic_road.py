"""The notes' argument in one picture: the plain RNN encoder-decoder, the attention RNN and the Transformer
reversing random sequences, exact-sequence and token accuracy by source length.

    python -m benchmarks.synthetic_road --out DIR [--runs RUNS] [--width 10] [--limit N] [--quick]
                                        [--set KEY=VALUE ...]

Trains the shipped recipes synthetic-rnn, synthetic-attention and synthetic-transformer one after another
(each alone on the machine: the same time budget buys the same compute), into RUNS/<recipe> (default
runs/synthetic); a run directory that already holds a checkpoint is taken as it is, not trained again. `--set`
overrides every recipe alike (e.g. `--set train.time_budget_min=5 --set data.synthetic.max_len=40`). Then each
checkpoint (best/, else last/) translates the test split with its recipe's decoding (greedy in the shipped
recipes) and `tasks.sequences.accuracy_of_checkpoint` scores it, `--width` source lengths to a bucket.

Writes DIR/synthetic_road.json (every number, with the recipes' keys that made it), DIR/synthetic_road.md (the
table, also printed) and DIR/synthetic-accuracy-by-length.png (exact and token accuracy against source length,
a line per model). `--quick`: a few training steps of tiny models on a tiny corpus, to check the pipeline end
to end (the numbers mean nothing). Not run in CI.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import markdown_table, write_json
from benchmarks.road import checkpoint_of, model_label, number, read_run
from tformer.config import RNNSeq2SeqConfig
from tformer.errors import UserError
from tformer.files import write_atomic
from tformer.inference import load
from tformer.tasks import load_recipe, train
from tformer.tasks.sequences import BUCKET_WIDTH, accuracy_of_checkpoint
from tformer.tasks.translation import training_rates
from tformer.viz.figures import new_figure, save_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

RECIPES = ("synthetic-rnn", "synthetic-attention", "synthetic-transformer")
QUICK = [  # every recipe: a tiny corpus, a few steps on one thread
    "data.synthetic.train=96", "data.synthetic.valid=8", "data.synthetic.test=24", "data.synthetic.min_len=3",
    "data.synthetic.max_len=10", "data.bleu_sentences=4", "train.max_steps=3", "train.time_budget_min=null",
    "train.eval_every=3", "train.log_every=1", "train.threads=1",
]
QUICK_MODEL = {  # per recipe: a model a few thousand parameters large
    "synthetic-rnn": ["model.overrides.d_model=16", "model.overrides.n_layers=1"],
    "synthetic-attention": ["model.overrides.d_model=16", "model.overrides.n_layers=1"],
    "synthetic-transformer": ["model.overrides.d_model=16", "model.overrides.d_ff=32", "model.overrides.n_layers=1"],
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.synthetic_road", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="synthetic_road.json, .md and the picture go here")
    p.add_argument("--runs", type=Path, default=Path("runs/synthetic"), help="the run directories, one per recipe")
    p.add_argument("--width", type=int, default=BUCKET_WIDTH, help="source lengths per bucket (default 10)")
    p.add_argument("--limit", type=int, default=None, help="score only the first N test sequences")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="a recipe override for all three models (repeatable)")
    p.add_argument("--quick", action="store_true", help="tiny models, a few steps: the pipeline end to end")
    args = p.parse_args(argv)
    if args.width < 1:
        p.error(f"--width={args.width} must be a positive integer")
    if args.limit is not None and args.limit < 1:
        p.error(f"--limit={args.limit} must be a positive integer")
    return args


def recipe_for(name: str, args: argparse.Namespace) -> Any:
    """The shipped recipe `name` with out_dir RUNS/name, the quick settings if asked, then --set."""
    quick = [*QUICK, *QUICK_MODEL[name]] if args.quick else []
    return load_recipe(name, [f"out_dir={args.runs / name}", *quick, *args.overrides])


def trained(name: str, args: argparse.Namespace) -> Path:
    """RUNS/name, trained unless it already holds a checkpoint."""
    recipe = recipe_for(name, args)
    run = Path(recipe.out_dir)
    try:
        checkpoint_of(run)
        print(f"{name}: taking the run in {run}", file=sys.stderr, flush=True)
    except UserError:
        print(f"{name}: training into {run}", file=sys.stderr, flush=True)
        train(recipe, progress=False)
    return run


def measure(name: str, run: Path, *, width: int, limit: int | None) -> dict[str, Any]:
    """The model, its training and its accuracy by length on the test split."""
    checkpoint, records, recipe = read_run(run)
    print(f"{name}: translating the test split with {checkpoint.name}/", file=sys.stderr, flush=True)
    loaded = load(checkpoint, command="evaluate")
    config, params = loaded.config, sum(p.numel() for p in loaded.model.parameters())
    measured = accuracy_of_checkpoint(checkpoint, recipe.data, "test", recipe.decode, width=width, limit=limit)
    median, _ = training_rates(records)
    training = [r for r in records if r.get("elapsed_s") is not None]
    return {"recipe": name, "run": str(run), "checkpoint": str(checkpoint), "model": model_label(config),
            "family": "rnn" if isinstance(config, RNNSeq2SeqConfig) else "transformer", "params": params,
            "steps": max((r["step"] for r in records), default=0), "tokens_per_s": median,
            "wall_min": training[-1]["elapsed_s"] / 60 if training else None,
            "synthetic": vars(recipe.data.synthetic), "decode": vars(recipe.decode), **measured}


def percent(x: float | None) -> str:
    return number(None if x is None else 100 * x)


def markdown(results: list[dict[str, Any]]) -> str:
    """One row per model: overall exact and token accuracy, then exact accuracy in each length bucket."""
    buckets = results[0]["buckets"]
    head = ["model", "params", "steps", "minutes", "exact %", "token %",
            *(f"exact % {b['bucket']} (n={b['sequences']})" for b in buckets)]
    rows = [[r["model"], f"{r['params']:,}", str(r["steps"]), number(r["wall_min"]), percent(r["exact"]),
             percent(r["token_accuracy"]), *(percent(b["exact"]) for b in r["buckets"])] for r in results]
    lines = [markdown_table(head, "l" * len(head), rows)]
    s = results[0]["synthetic"]
    note = (f"\n{s['task']} of {s['min_len']} to {s['max_len']} symbols over {s['symbols']}; test split, "
            f"{results[0]['sequences']} sequences, beam {results[0]['decode']['beam']}; buckets by source length.\n")
    return "\n".join(lines) + "\n" + note


def plot_by_length(results: list[dict[str, Any]]) -> Figure:
    """Two panels, exact-sequence and token accuracy (%) against source length (each bucket at its middle)."""
    fig = new_figure(10, 3.8)
    for k, (key, title) in enumerate((("exact", "exact-sequence accuracy"), ("token_accuracy", "token accuracy"))):
        ax = fig.add_subplot(1, 2, k + 1)
        for r in results:
            points = [((b["low"] + b["high"]) / 2, 100 * b[key]) for b in r["buckets"] if b[key] is not None]
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=r["model"])
        ax.set_xlabel("source length (symbols)")
        ax.set_ylabel(f"{title} (%)")
        ax.set_ylim(-2, 102)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    s = results[0]["synthetic"]
    fig.suptitle(f"{s['task']} of random sequences, test split ({results[0]['sequences']} sequences)")
    return fig


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        for name in RECIPES:  # every recipe and override checked before the first training (minutes each)
            recipe_for(name, args)
        runs = {name: trained(name, args) for name in RECIPES}
        results = [measure(name, run, width=args.width, limit=args.limit) for name, run in runs.items()]
        table = markdown(results)
        print(table)
        args.out.mkdir(parents=True, exist_ok=True)
        write_atomic(args.out / "synthetic_road.md", table)
        write_json(args.out / "synthetic_road.json", {"width": args.width, "limit": args.limit,
                                                       "overrides": args.overrides, "quick": args.quick,
                                                       "results": results})
        save_figure(plot_by_length(results), args.out / "synthetic-accuracy-by-length.png")
    except UserError as e:
        print(f"synthetic_road: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}/synthetic_road.md, synthetic_road.json, synthetic-accuracy-by-length.png",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
