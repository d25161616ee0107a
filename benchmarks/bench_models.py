"""The trained models the decoding benchmarks run, found or trained: a translator (the demo recipe's
checkpoint, `make demo`'s runs/demo/best) and a GPT of GPT-2's shape trained on the Bible for the bench.

    translator(path, minutes)   `path` if it holds a checkpoint; else the demo recipe trained for `minutes`
                                into runs/bench/translator (a shorter run than `make demo`: the same model)
    gpt(path, minutes)          `path` if it holds a checkpoint; else the gpt-bible recipe at GPT-2's shape
                                (6 layers, d 512, 8 heads, d_ff 2048, byte-level BPE of 8,192, context 512)
                                trained for `minutes` into runs/bench/gpt
    draft(path, minutes, teacher)  its draft for speculative decoding: the gpt-bible-draft recipe distilled
                                from `teacher` (the GPT above: its tokenizer, data and context), 2 layers of
                                width 256, into runs/bench/gpt-draft-distilled

Speed depends on a model's shape, not its training; a trained model makes the work real: sentences end
where a translator ends them, and the outputs of two engines can be compared. `quick=True` trains tiny
models for a few steps (a smoke test).
"""

from __future__ import annotations

from pathlib import Path

from tformer.runs import RunDir
from tformer.tasks import load_recipe, train

GPT2_SHAPE = ["model.overrides.d_model=512", "model.overrides.d_ff=2048", "model.overrides.n_heads=8",
              "model.overrides.n_layers=6", "model.overrides.max_len=512", "data.tokenizer=bpe",
              "data.vocab_size=8192", "data.block_size=256", "data.batch_size=8"]
GPT2_DATA = [o for o in GPT2_SHAPE if o.startswith("data.") or o.startswith("model.overrides.max_len")]
DRAFT_SHAPE = [*GPT2_DATA, "model.overrides.d_model=256", "model.overrides.d_ff=1024", "model.overrides.n_heads=4",
               "model.overrides.n_layers=2",
               # a distillation step also runs the GPT: some 640 fit in 8 minutes on 2 cores, so the learning rate
               # anneals by then (agreement 0.90, against 0.87 for the recipe's 1,400-step schedule cut off there)
               "train.max_steps=640", "train.schedule.total_steps=640", "train.schedule.warmup=50"]
QUICK_TRANSLATOR = ["train.max_steps=20", "train.eval_every=20", "data.vocab_size=300", "data.bleu_sentences=4",
                    "model.overrides={d_model: 32, d_ff: 64, n_heads: 2, n_layers: 1}", "train.tune_threads=false"]
QUICK_GPT = ["train.max_steps=10", "train.eval_every=10", "data.tokenizer=bpe", "data.vocab_size=300",
             "data.block_size=32", "data.eval_tokens=200", "sample.max_new_tokens=4",
             "model.overrides={d_model: 32, d_ff: 64, n_heads: 2, n_layers: 1, max_len: 320}"]
QUICK_DRAFT = [*QUICK_GPT[:-1], "model.overrides={d_model: 16, d_ff: 32, n_heads: 2, n_layers: 1, max_len: 320}"]


def _trained(path: Path | None, recipe: str, overrides: list[str], out_dir: Path) -> Path:
    """`path` if it is a checkpoint; else OUT_DIR/best once the recipe has trained there (again only if
    OUT_DIR/best is missing)."""
    if path is not None and (path / "config.yaml").is_file():
        return path
    if not (RunDir(out_dir).best / "config.yaml").is_file():
        print(f"training {recipe} for the bench into {out_dir} ({' '.join(overrides)}) ...", flush=True)
        train(load_recipe(recipe, [*overrides, f"out_dir={out_dir}"]), overwrite=True, progress=False)
    return RunDir(out_dir).best


def translator(path: Path | None, *, minutes: float, root: Path, quick: bool = False) -> Path:
    overrides = QUICK_TRANSLATOR if quick else [f"train.time_budget_min={minutes}"]
    return _trained(path, "demo", overrides, root / ("translator-quick" if quick else "translator"))


def gpt(path: Path | None, *, minutes: float, root: Path, quick: bool = False) -> Path:
    overrides = QUICK_GPT if quick else [*GPT2_SHAPE, f"train.time_budget_min={minutes}"]
    return _trained(path, "gpt-bible", overrides, root / ("gpt-quick" if quick else "gpt"))


def draft(path: Path | None, *, minutes: float, root: Path, teacher: Path, quick: bool = False) -> Path:
    overrides = QUICK_DRAFT if quick else [*DRAFT_SHAPE, f"train.time_budget_min={minutes}"]
    overrides = [*overrides, f"distill.teacher={teacher}"]
    return _trained(path, "gpt-bible-draft", overrides,
                    root / ("gpt-draft-quick" if quick else "gpt-draft-distilled"))


__all__ = ["DRAFT_SHAPE", "GPT2_SHAPE", "draft", "gpt", "translator"]
