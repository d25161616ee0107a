"""`tformer report RUN_DIR`: one static, self-contained HTML page about a run, to open from disk or attach.

    training curves            from RUN_DIR/metrics.jsonl
    final metrics              the last evaluation record (and the last training record)
    samples                    translation: a few test (else validation) sentences of the recipe's data, or
                               fixed sentences when the data cannot be read; GPT: a short greedy generation
    attention                  the attention grid of one of those examples (exact attention only)

The checkpoint is RUN_DIR/best, else RUN_DIR/last, with RUN_DIR/recipe.yaml beside it. Pictures are PNGs
embedded as base64 data: URIs; the page has no scripts, fonts, style sheets or links to fetch, and every
piece of text in it goes through `html.escape`.
"""

from __future__ import annotations

import base64
import html
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from tformer.viz.curves import read_metrics
from tformer.viz.figures import png_bytes, write_atomic

FIXED_SENTENCES = ["In the beginning God created the heaven and the earth.",
                   "And God said, Let there be light: and there was light."]
FIXED_PROMPT = "In the beginning"
N_SAMPLES = 4
NEW_TOKENS = 60  # of a GPT sample
EXAMPLE_TOKENS = 32  # at most, in the attention example of a GPT (more would not be legible)
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


def find_checkpoint(run: Path) -> Path | None:
    """RUN_DIR/best, else RUN_DIR/last, else None."""
    return next((run / name for name in ("best", "last") if (run / name / "config.yaml").is_file()), None)


def load_run_recipe(run: Path) -> Any:
    """The run's recipe (any task), or None without a readable recipe.yaml."""
    from tformer.tasks import load_recipe

    path = run / "recipe.yaml"
    try:
        return load_recipe(path) if path.is_file() else None
    except ValueError:
        return None


def translation_samples(model: nn.Module, tokenizer: Any, recipe: Any) -> Samples:
    """A few sentences of the recipe's test (else validation) split translated as the recipe decodes, or
    fixed sentences when the data is not reachable."""
    from tformer.tasks.translation import DecodeConfig, TranslationRecipe, load_split, translate

    pairs, note = [], ""
    if isinstance(recipe, TranslationRecipe):
        for split in ("test", "valid"):
            try:
                pairs = load_split(recipe.data, split)[:N_SAMPLES]
                note = f"the first {len(pairs)} sentences of the {split} split"
                break
            except (ValueError, OSError, ImportError) as e:
                note = f"data not reachable ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    if not pairs:
        pairs = [(s, "") for s in FIXED_SENTENCES]
        note = (note + "; " if note else "") + "fixed sentences"
    decode = recipe.decode if isinstance(recipe, TranslationRecipe) else DecodeConfig()
    hyps = translate(model, tokenizer, [s for s, _ in pairs], decode)
    rows = [[s, r, h] for (s, r), h in zip(pairs, hyps, strict=True)]
    shortest = min(range(len(rows)), key=lambda i: len(tokenizer.encode(rows[i][0])))
    return Samples(title="Sample translations", header=["source", "reference", "tformer"], rows=rows,
                   note=f"{note}; beam {decode.beam}, length penalty {decode.lenpen}",
                   example=rows[shortest][0], target=rows[shortest][2] or None)


def generation_samples(model: nn.Module, tokenizer: Any) -> Samples:
    """A greedy continuation of a fixed prompt."""
    from tformer.decoding import generate_greedy

    config = model.config
    prompt = ([] if config.bos_id is None else [config.bos_id]) + tokenizer.encode(FIXED_PROMPT)
    budget = max(0, min(NEW_TOKENS, config.max_len - len(prompt)))
    stop = () if config.eos_id is None else (config.eos_id,)
    new = generate_greedy(model, [prompt], max_new_tokens=budget, stop_tokens=stop)[0]
    text = tokenizer.decode(new)
    example = tokenizer.decode(tokenizer.encode(FIXED_PROMPT + text)[:EXAMPLE_TOKENS])
    return Samples(title="Sample generation", header=["prompt", "greedy continuation"],
                   rows=[[FIXED_PROMPT, text]], note=f"greedy, at most {budget} new tokens", example=example)


def attention_section(model: nn.Module, tokenizer: Any, text: str, target: str | None) -> tuple[str, bytes | None]:
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


def metrics_section(records: list[dict]) -> list[str]:
    """The last evaluation record and the last training record, as tables."""
    evals = [r for r in records if any(k.startswith("eval/") for k in r)]
    train = [r for r in records if "loss" in r]
    parts = ["<h2>Final metrics</h2>"]
    if evals:
        last = evals[-1]
        parts += [f"<p>last evaluation, step {html.escape(str(last['step']))}</p>",
                  _table(["metric", "value"], [[k.removeprefix("eval/"), v] for k, v in last.items() if k != "step"])]
    else:
        parts.append("<p>no evaluation records</p>")
    if train:
        last = train[-1]
        parts += [f"<p>last training record, step {html.escape(str(last['step']))}</p>",
                  _table(["quantity", "value"], [[k, v] for k, v in last.items() if k != "step"])]
    return parts


def model_section(run: Path) -> list[str]:
    """Samples from the run's checkpoint and the attention grid of one of them; a note when there is no
    checkpoint or it cannot be loaded."""
    from tformer.config import GPTConfig, Seq2SeqConfig
    from tformer.tasks import load_checkpoint

    esc = html.escape
    checkpoint = find_checkpoint(run)
    if checkpoint is None:
        return [f"<h2>Samples</h2><p>no checkpoint in {esc(str(run))} (best/ or last/)</p>"]
    try:
        model, _, tokenizer = load_checkpoint(checkpoint)
    except (ValueError, FileNotFoundError) as e:
        return [f"<h2>Samples</h2><p>cannot load the checkpoint: {esc(str(e))}</p>"]
    parts = [f'<p class="note">checkpoint {esc(str(checkpoint))}: {esc(type(model).__name__)}, '
             f"{sum(p.numel() for p in model.parameters()):,} parameters</p>"]
    if isinstance(model.config, Seq2SeqConfig):
        samples = translation_samples(model, tokenizer, load_run_recipe(run))
    elif isinstance(model.config, GPTConfig):
        samples = generation_samples(model, tokenizer)
    else:  # BERT
        samples = Samples(title="Samples", header=[], rows=[], note="an encoder generates no text",
                          example=FIXED_SENTENCES[0])
    parts.append(f"<h2>{esc(samples.title)}</h2><p class=\"note\">{esc(samples.note)}</p>")
    if samples.rows:
        parts.append(_table(samples.header, samples.rows))
    caption, png = attention_section(model, tokenizer, samples.example, samples.target)
    parts += ["<h2>Attention</h2>", f"<p>{esc(caption)}</p>"]
    if png is not None:
        parts.append(_image(png, "attention weights of every layer and head"))
    return parts


def build_report(run_dir: str | Path) -> str:
    """The HTML page of a run (see the module docstring)."""
    from tformer.viz.curves import plot_curves

    run = Path(run_dir)
    records = read_metrics(run)
    esc = html.escape
    curves = png_bytes(plot_curves({str(run): records}), dpi=80)
    parts = [f"<h1>Run {esc(str(run))}</h1>", "<h2>Training curves</h2>", _image(curves, "training curves"),
             *metrics_section(records), *model_section(run),
             f'<p class="note">made by tformer report on {esc(time.strftime("%Y-%m-%d %H:%M"))}</p>']
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>tformer report: {esc(str(run))}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(parts) + "\n</body>\n</html>\n")


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Build the page and write it to `out` (default RUN_DIR/report.html) atomically; returns the path."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ValueError(f"run directory {run} does not exist")
    path = Path(out) if out is not None else run / "report.html"
    if path.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"output file {path} has suffix {path.suffix or '(none)'!r}; use .html")
    return write_atomic(path, build_report(run).encode("utf-8"))
