"""The complexity benchmark's results (`benchmarks/complexity.py`, written to docs/bench/complexity/results.json) as
log-log plots, each kind's fitted slope in the legend.

results.json: {"args": ..., "claims": {kind: {"n_slope", "d_slope", ...}}, "results": {kind: {"n": sweep,
"d": sweep}}}, a sweep being {"points": [{"n", "d", "time_s", "memory_bytes", ...}], "fit": {"fit_over": [x, ...],
...}}. The slope is the least-squares line of log y on log x (y = c x^p, p the slope) over the points the
benchmark fitted (`fit_over`: n >= --fit-from, or the upper half of the points), or over all of them when the
file does not say; the fitted line is drawn dashed over those points.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tformer.errors import UserError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# (axis, key, file stem, what, y label)
PLOTS = (("n", "time_s", "complexity-time_vs_n", "time of one layer", "seconds (forward + backward)"),
         ("n", "memory_bytes", "complexity-memory_vs_n", "activation memory", "bytes kept for backward"),
         ("d", "time_s", "complexity-time_vs_d", "time of one layer", "seconds (forward + backward)"))


@dataclass(frozen=True)
class Series:
    """One kind's points along one axis, and the fit over its fit window."""

    kind: str
    xs: list[float]
    ys: list[float]
    fit_xs: list[float]
    slope: float  # NaN with fewer than two points to fit
    intercept: float  # log c


def fit_slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(slope p, intercept log c) of the least-squares line log y = p log x + log c; NaNs for < 2 points."""
    if len(xs) < 2:
        return math.nan, math.nan
    p, c = np.polyfit(np.log(np.asarray(xs, dtype=float)), np.log(np.asarray(ys, dtype=float)), 1)
    return float(p), float(c)


def read_results(path: str | Path) -> dict:
    """The benchmark's results.json; a ValueError for a missing or malformed file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"results file {path} does not exist; run benchmarks/complexity.py to make it")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"results file {path} is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict) or not data["results"]:
        raise UserError(f"results file {path} has no \"results\" mapping of kinds (is it the complexity benchmark's?)")
    return data


def complexity_series(data: dict, axis: str, key: str) -> list[Series]:
    """One `Series` per kind with positive values of `key` along `axis` ("n" or "d")."""
    out = []
    for kind, result in data["results"].items():
        sweep = result.get(axis) or {}
        points = [p for p in sweep.get("points", [])
                  if isinstance(p.get(key), int | float) and p[key] > 0 and isinstance(p.get(axis), int | float)]
        if not points:
            continue
        window = (sweep.get("fit") or {}).get("fit_over") or [p[axis] for p in points]
        fitted = [p for p in points if p[axis] in window]
        slope, intercept = fit_slope([p[axis] for p in fitted], [p[key] for p in fitted])
        out.append(Series(kind=kind, xs=[p[axis] for p in points], ys=[p[key] for p in points],
                          fit_xs=[p[axis] for p in fitted], slope=slope, intercept=intercept))
    return out


def plot_complexity(data: dict, *, axis: str, key: str, what: str, ylabel: str) -> Figure:
    """Log-log lines of every kind, with the fitted power law dashed and its slope in the legend."""
    from tformer.viz.figures import new_figure

    fig = new_figure(8, 6)
    ax = fig.subplots()
    for i, s in enumerate(complexity_series(data, axis, key)):
        color = f"C{i % 10}"
        slope = "—" if math.isnan(s.slope) else f"{s.slope:.2f}"
        ax.plot(s.xs, s.ys, marker="o", markersize=4, color=color, label=f"{s.kind}: slope {slope}")
        if not math.isnan(s.slope):
            x = np.asarray(s.fit_xs, dtype=float)
            ax.plot(x, np.exp(s.intercept) * x**s.slope, "--", color=color, linewidth=1, alpha=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    fixed = "n" if axis == "d" else "d"
    at = (data.get("args") or {}).get("d_n" if axis == "d" else "d")
    ax.set_title(f"{what} against {axis}" + (f" ({fixed} = {at})" if at else "")
                 + "; dashed: least-squares fit in log space", fontsize=10)
    ax.set(xlabel=axis, ylabel=ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", ncols=2)
    return fig
