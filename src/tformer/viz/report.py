"""The HTML page of `tformer report RUN_DIR`: one static, self-contained page about a run, to open from disk
or attach. This module draws and lays out what it is given; `tformer.tasks.report` gathers it (the run's
metrics, its checkpoint, samples made with the recipe's task) and writes the page.

    training curves            from RUN_DIR/metrics.jsonl
    final metrics              the last evaluation record (on the validation split, labelled with what it
                               scored), the test scores where the run has them, and the last training record
    samples                    what the model produced (`Samples`)
    attention                  the attention grid of one of those examples (exact attention only)

Pictures are PNGs embedded as base64 data: URIs; the page has no scripts, fonts, style sheets or links to
fetch, and every piece of text in it goes through `html.escape`.
"""

from __future__ import annotations

import base64
import html
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from tformer.viz.figures import png_bytes

if TYPE_CHECKING:
    from tformer.tokenization import Tokenizer

STYLE = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;
vertical-align:top}th{background:#f3f3f3}img{max-width:100%;height:auto}.note{color:#666;font-size:.9em}"""


@dataclass
class Samples:
    """What the model produced, for the page, and the example to draw attention for."""

    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""
    example: str | None = None  # the text (source / prompt) of the attention example
    target: str | None = None  # its translation (encoder-decoder)


@dataclass
class HeldOut:
    """Scores on a held-out split, for the page: a label saying which split, how much of it, how it was
    decoded and where the numbers come from, and the numbers (metric -> value)."""

    label: str
    metrics: dict[str, Any]


def attention_section(model: nn.Module, tokenizer: Tokenizer, text: str,
                      target: str | None) -> tuple[str, bytes | None]:
    """(caption, PNG of the attention grid) for one example; the reason instead of a picture when the
    model's attention cannot be drawn."""
    from tformer.viz.attention import attention_maps, plot_attention

    try:
        maps = attention_maps(model, tokenizer, text, target=target)
    except ValueError as e:
        return f"no attention picture: {e}", None
    png = png_bytes(plot_attention(maps), dpi=70)
    caption = f"example: {text}" + (f" → {target}" if target else "")
    return caption + "; rows: layers, columns: heads (0-based)", png


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _image(png: bytes, alt: str) -> str:
    return f'<img src="{data_uri(png)}" alt="{html.escape(alt)}">'


def metrics_section(records: list[dict], *, validation: str = "the validation split",
                    test: HeldOut | None = None) -> list[str]:
    """The last evaluation record (made on `validation`, which says what was scored), the `test` scores if
    there are any, and the last training record, as tables, each labelled."""
    evals = [r for r in records if any(k.startswith("eval/") for k in r)]
    train = [r for r in records if "loss" in r]
    parts = ["<h2>Final metrics</h2>"]
    if evals:
        last = evals[-1]
        parts += [f"<p>last evaluation, step {html.escape(str(last['step']))}: validation, on "
                  f"{html.escape(validation)}</p>",
                  _table(["metric", "value"], [[k.removeprefix("eval/"), v] for k, v in last.items() if k != "step"])]
    else:
        parts.append("<p>no evaluation records</p>")
    if test is not None:
        parts.append(f"<p>{html.escape(test.label)}</p>")
        if test.metrics:
            parts.append(_table(["metric", "value"], [[k, v] for k, v in test.metrics.items()]))
    if train:
        last = train[-1]
        parts += [f"<p>last training record, step {html.escape(str(last['step']))}</p>",
                  _table(["quantity", "value"], [[k, v] for k, v in last.items() if k != "step"])]
    return parts


def no_model_section(reason: str) -> list[str]:
    """The samples heading with why there are none (no checkpoint, or one that cannot be loaded)."""
    return [f"<h2>Samples</h2><p>{html.escape(reason)}</p>"]


def model_section(checkpoint: Path, model: nn.Module, tokenizer: Tokenizer, samples: Samples) -> list[str]:
    """The checkpoint's model, its samples and the attention grid of the samples' example."""
    esc = html.escape
    parts = [f'<p class="note">checkpoint {esc(str(checkpoint))}: {esc(type(model).__name__)}, '
             f"{sum(p.numel() for p in model.parameters()):,} parameters</p>"]
    parts.append(f"<h2>{esc(samples.title)}</h2><p class=\"note\">{esc(samples.note)}</p>")
    if samples.rows:
        parts.append(_table(samples.header, samples.rows))
    caption, png = attention_section(model, tokenizer, samples.example, samples.target)
    parts += ["<h2>Attention</h2>", f"<p>{esc(caption)}</p>"]
    if png is not None:
        parts.append(_image(png, "attention weights of every layer and head"))
    return parts


def page(run: Path, records: list[dict], model_parts: list[str], *, validation: str = "the validation split",
         test: HeldOut | None = None) -> str:
    """The whole HTML page of run directory `run`: its curves and final metrics from `records` (its
    metrics.jsonl; `validation`, `test`: as `metrics_section`'s), then `model_parts` (`model_section` or
    `no_model_section`)."""
    from tformer.viz.curves import plot_curves

    esc = html.escape
    curves = png_bytes(plot_curves({str(run): records}), dpi=80)
    parts = [f"<h1>Run {esc(str(run))}</h1>", "<h2>Training curves</h2>", _image(curves, "training curves"),
             *metrics_section(records, validation=validation, test=test), *model_parts,
             f'<p class="note">made by tformer report on {esc(time.strftime("%Y-%m-%d %H:%M"))}</p>']
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>tformer report: {esc(str(run))}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(parts) + "\n</body>\n</html>\n")


__all__ = ["HeldOut", "Samples", "attention_section", "metrics_section", "model_section", "no_model_section", "page"]
