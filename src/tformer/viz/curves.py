"""Training curves from runs' `metrics.jsonl`: one JSON object a line, written by the training loop.

    training records    {"step", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"}
    evaluation records  {"step", "eval/<name>": value, ...}   (valid_loss, valid_ppl, bleu, chrf, ...)

One panel per quantity any run has (training loss, learning rate, tokens/s, then each eval/ metric), the
runs overlaid in the same colour in every panel, and one legend naming each run directory.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from tformer.data.lines import read_jsonl_records
from tformer.errors import UserError
from tformer.runs import METRICS_FILE, RunDir

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PANEL_W, PANEL_H = 4.5, 3.2  # inches per panel
COLS = 3  # panels per row
LEGEND_ROW = 0.3  # inches per row of legend entries (3 runs a row)
TRAIN_KEYS = {"loss": "training loss", "lr": "learning rate", "tokens_per_s": "tokens / s"}
EVAL_TITLES = {"eval/valid_loss": "validation loss", "eval/valid_ppl": "validation perplexity",
               "eval/bleu": "validation BLEU", "eval/chrf": "validation chrF"}
LOG_SCALE = ("eval/valid_ppl",)


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The records of RUN_DIR/metrics.jsonl, in order; a ValueError for a missing or malformed file."""
    run = Path(run_dir)
    if not run.is_dir():
        raise UserError(f"run directory {run} does not exist")
    path = RunDir(run).metrics
    if not path.is_file():
        raise UserError(f"{path} does not exist; is {run} a run directory (training writes {METRICS_FILE})?")
    records = []
    for n, record in read_jsonl_records(path, values=("step",)):
        if isinstance(record["step"], bool) or not isinstance(record["step"], int):
            raise UserError(f"{path}:{n}: field 'step' must be an integer, got {type(record['step']).__name__}")
        records.append(record)
    if not records:
        raise UserError(f"{path} holds no records yet")
    return records


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the records that have a number under `key`."""
    points = [(r["step"], float(r[key])) for r in records
              if isinstance(r.get(key), int | float) and not isinstance(r.get(key), bool)]
    return [s for s, _ in points], [v for _, v in points]


def panels(runs: dict[str, list[dict]]) -> list[tuple[str, str]]:
    """(key, title) of every quantity some run records: the training keys, then the eval/ keys (the usual
    ones first)."""
    present = {k for records in runs.values() for r in records for k in r}
    keys = [(k, t) for k, t in TRAIN_KEYS.items() if k in present]
    evals = sorted((k for k in present if k.startswith("eval/")),
                   key=lambda k: (list(EVAL_TITLES).index(k) if k in EVAL_TITLES else len(EVAL_TITLES), k))
    return keys + [(k, EVAL_TITLES.get(k, "validation " + k.removeprefix("eval/").replace("_", " "))) for k in evals]


def layout(n_panels: int, n_runs: int) -> tuple[int, int, float, float]:
    """(rows, cols, width, height in inches) of the curves figure."""
    cols = min(COLS, n_panels)
    rows = math.ceil(n_panels / cols)
    return rows, cols, PANEL_W * cols, PANEL_H * rows + LEGEND_ROW * (1 + math.ceil(n_runs / 3))


def plot_curves(runs: dict[str, list[dict]]) -> Figure:
    """Curves of several runs (name -> records), overlaid."""
    from tformer.viz.figures import new_figure

    shown = panels(runs)
    if not shown:
        raise UserError(f"the metrics of {', '.join(runs)} hold no loss, lr, tokens_per_s or eval/ values")
    rows, cols, width, height = layout(len(shown), len(runs))
    fig = new_figure(width, height)
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    handles = {}
    for ax, (key, title) in zip(axes, shown, strict=False):  # more axes than panels: rows * cols
        for i, (name, records) in enumerate(runs.items()):
            steps, values = series(records, key)
            if steps:
                style = dict(marker="o", markersize=3) if key.startswith("eval/") else dict(linewidth=1.2)
                (handles[name],) = ax.plot(steps, values, color=f"C{i}", label=name, **style)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if key in LOG_SCALE:
            ax.set_yscale("log")
    for ax in axes[len(shown):]:  # left over in the last row
        ax.set_axis_off()
    fig.legend(list(handles.values()), list(handles), loc="outside upper center", ncols=min(3, len(handles)),
               fontsize=9)
    return fig
