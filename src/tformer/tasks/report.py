"""`tformer report RUN_DIR`: the run's page, gathered here and drawn by `tformer.viz.report`.

    training curves, metrics   RUN_DIR/metrics.jsonl: the validation scores, labelled with what they scored
    test scores                RUN_DIR/test.json, where `tformer demo` wrote it (the test split, the recipe's beam)
    samples                    translation: a few test (else validation) sentences of the recipe's data, or
                               fixed sentences when the data cannot be read; GPT: a short greedy generation
    attention                  the attention grid of one of those examples (exact attention only)

The checkpoint is RUN_DIR/best, else RUN_DIR/last, with RUN_DIR/recipe.yaml beside it. This module sits
with the tasks because the samples are made as the run's task makes them (its recipe, its data, its
decoding); `viz` knows nothing of tasks or training.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import nn

from tformer.checkpoints import CONFIG_FILE
from tformer.config import ENCODER_DECODERS, GPTConfig
from tformer.data.bible import HELD_OUT_BOOKS
from tformer.decoding import generate_greedy
from tformer.errors import UserError
from tformer.inference import DecodeConfig, load, translate
from tformer.runs import RunDir
from tformer.tasks import load_recipe
from tformer.tasks.translation import TranslationRecipe, load_split
from tformer.tokenization import Tokenizer
from tformer.viz.curves import read_metrics
from tformer.viz.figures import write_file
from tformer.viz.report import HeldOut, Samples, model_section, no_model_section, page

FIXED_SENTENCES = ["In the beginning God created the heaven and the earth.",
                   "And God said, Let there be light: and there was light."]
FIXED_PROMPT = "In the beginning"
N_SAMPLES = 4
NEW_TOKENS = 60  # of a GPT sample
EXAMPLE_TOKENS = 32  # at most, in the attention example of a GPT (more would not be legible)


def find_checkpoint(run: Path) -> Path | None:
    """RUN_DIR/best, else RUN_DIR/last, else None."""
    return next((path for path in RunDir(run).preferred if (path / CONFIG_FILE).is_file()), None)


def load_run_recipe(run: Path) -> Any:
    """The run's recipe (any task), or None without a readable recipe.yaml."""
    path = RunDir(run).recipe
    try:
        return load_recipe(path) if path.is_file() else None
    except ValueError:
        return None


def split_named(recipe: Any, split: str) -> str:
    """How the page names a split of a translation run's data: "the valid split (Romans)" of the built-in
    Bible, "the test split (data/test.tsv)" of files; "the valid split" of any other run."""
    if not isinstance(recipe, TranslationRecipe):
        return f"the {split} split"
    data = recipe.data
    source = HELD_OUT_BOOKS.get("validation" if split == "valid" else split) if data.corpus == "bible" else \
        getattr(data, split, None)
    return f"the {split} split ({source})" if source else f"the {split} split"


def validation_label(recipe: Any) -> str:
    """What a run's evaluations scored: the validation split; for a translator, BLEU and chrF over its first
    `data.bleu_sentences` sentences only, decoded greedily (`TranslationTask.evaluate`)."""
    if not isinstance(recipe, TranslationRecipe):
        return "the validation split"
    return (f"{split_named(recipe, 'valid')}: loss and perplexity over all of it; BLEU and chrF over its first "
            f"{recipe.data.bleu_sentences} sentences, greedy")


def scores_on_test(run: Path, recipe: Any) -> HeldOut | None:
    """RUN_DIR/test.json (what `tformer demo` writes once the training ends: the test split's BLEU and chrF,
    decoded as the recipe says), labelled with the split, its size, the beam and the step; None without one."""
    path = RunDir(run).results("test")
    if not path.is_file():
        return None
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(result, dict):
            raise ValueError(f"it holds a JSON {type(result).__name__}, not an object")
    except (OSError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        return HeldOut(label=f"test: {path.name} cannot be read ({reason})", metrics={})
    about = [split_named(recipe, "test")]
    if isinstance(result.get("sentences"), int):
        about.append(f"{result['sentences']} sentences")
    if isinstance(recipe, TranslationRecipe):
        about.append(f"beam {recipe.decode.beam}")
    if result.get("steps") is not None:
        about.append(f"after step {result['steps']}")
    metrics = {key: result[key] for key in ("bleu", "chrf", "degenerate") if key in result}
    return HeldOut(label=f"test, on {', '.join(about)} ({path.name})", metrics=metrics)


def translation_samples(model: nn.Module, tokenizer: Tokenizer, recipe: Any) -> Samples:
    """A few sentences of the recipe's test (else validation) split translated as the recipe decodes, or
    fixed sentences when the data is not reachable."""
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
    hyps = translate(model, tokenizer, [s for s, _ in pairs], decode, truncate=True)
    rows = [[s, r, h] for (s, r), h in zip(pairs, hyps, strict=True)]
    shortest = min(range(len(rows)), key=lambda i: len(tokenizer.encode(rows[i][0])))
    return Samples(title="Sample translations", header=["source", "reference", "tformer"], rows=rows,
                   note=f"{note}; beam {decode.beam}, length penalty {decode.lenpen}",
                   example=rows[shortest][0], target=rows[shortest][2] or None)


def generation_samples(model: nn.Module, tokenizer: Tokenizer) -> Samples:
    """A greedy continuation of a fixed prompt."""
    config = model.config
    prompt = ([] if config.bos_id is None else [config.bos_id]) + tokenizer.encode(FIXED_PROMPT)
    budget = max(0, min(NEW_TOKENS, config.max_len - len(prompt)))
    stop = () if config.eos_id is None else (config.eos_id,)
    new = generate_greedy(model, [prompt], max_new_tokens=budget, stop_tokens=stop)[0]
    text = tokenizer.decode(new)
    example = tokenizer.decode(tokenizer.encode(FIXED_PROMPT + text)[:EXAMPLE_TOKENS])
    return Samples(title="Sample generation", header=["prompt", "greedy continuation"],
                   rows=[[FIXED_PROMPT, text]], note=f"greedy, at most {budget} new tokens", example=example)


def samples_of(run: Path) -> list[str]:
    """The page's part about the run's checkpoint: samples and the attention grid of one of them; a note
    when there is no checkpoint or it cannot be loaded."""
    checkpoint = find_checkpoint(run)
    if checkpoint is None:
        return no_model_section(f"no checkpoint in {run} (best/ or last/)")
    try:
        loaded = load(checkpoint)
        model, tokenizer = loaded.model, loaded.tokenizer
    except (ValueError, FileNotFoundError) as e:
        return no_model_section(f"cannot load the checkpoint: {e}")
    if isinstance(model.config, ENCODER_DECODERS):
        samples = translation_samples(model, tokenizer, load_run_recipe(run))
    elif isinstance(model.config, GPTConfig):
        samples = generation_samples(model, tokenizer)
    else:  # BERT
        samples = Samples(title="Samples", header=[], rows=[], note="an encoder generates no text",
                          example=FIXED_SENTENCES[0])
    return model_section(checkpoint, model, tokenizer, samples)


def build_report(run_dir: str | Path) -> str:
    """The HTML page of a run (see the module docstring)."""
    run = Path(run_dir)
    records = read_metrics(run)
    recipe = load_run_recipe(run)
    return page(run, records, samples_of(run), validation=validation_label(recipe), test=scores_on_test(run, recipe))


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Build the page and write it to `out` (default RUN_DIR/report.html; `figures.write_file`: - to stdout, a
    regular file atomically, a symbolic link's target or a FIFO in place); returns the path."""
    from tformer.files import is_stream

    run = Path(run_dir)
    if not run.is_dir():
        raise UserError(f"run directory {run} does not exist")
    path = Path(out) if out is not None else RunDir(run).report
    if path.suffix.lower() not in (".html", ".htm") and not is_stream(path):  # stdout, a FIFO: no suffix to read
        raise UserError(f"output file {path} has suffix {path.suffix or '(none)'!r}; use .html")
    return write_file(path, build_report(run).encode("utf-8"))


__all__ = ["build_report", "write_report"]
