"""The bad-input catalogue (docs/errors.md), round two: configs and options. Every YAML the package reads goes
through one strict loader (a key given twice, an alias bomb), every float of a config is finite, every recipe
is checked before training starts (out_dir, train.best_metric, data.bleu_sentences, the labels of a classifier)
and a resumed run refuses a recipe that would change what it trains. Each case through `tformer.cli.main`
returns 2 and prints one line, with no traceback, and leaves the disk as it was (catalogue.run_case); the cases
whose right result is not an error are ordinary tests below."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from catalogue import TINY, Case, Ctx, World, case_tests, edited_config, generate, recipe_file

from tformer.cli import main
from tformer.configio import MAX_ALIAS_NODES, check_finite, dump_yaml, parse_yaml, read_yaml, to_dict
from tformer.tasks import load_recipe
from tformer.training.logger import Logger
from tformer.training.optim import OptimConfig


def bomb(levels: int = 9) -> str:
    """A "billion laughs" in flow style: level i is a list of nine aliases of level i - 1 (9**9 leaves)."""
    parts = ["&a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    parts += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


def bomb_recipe(c: Ctx) -> list[str]:
    return recipe_file(c, "bomb.yaml", f"task: translation\nmodel:\n  preset: transformer-tiny\n  overrides:\n"
                                       f"    d_model: {bomb()}\n")


def with_recipe(c: Ctx, *overrides: str, task_recipe: Path | None = None) -> Path:
    """A run directory {tmp}/run holding the translator as `last` and the recipe.yaml a run of the catalogue's
    recipe (with `overrides`) would have written."""
    run = c.tmp / "run"
    c.copy(c.w.s2s, "run/last")
    recipe = load_recipe(task_recipe or c.w.recipe, [f"out_dir={run}", *overrides])
    (run / "recipe.yaml").write_text(dump_yaml(to_dict(recipe)))
    return run


def resumed(c: Ctx, *overrides: str) -> list[str]:
    with_recipe(c)
    return c.train(*overrides, "--resume")


def evaluate_beside(c: Ctx, text: str) -> list[str]:
    """`evaluate` of a run directory whose recipe.yaml reads `text`."""
    (with_recipe(c) / "recipe.yaml").write_text(text)
    return ["evaluate", "--checkpoint", f"{c.tmp}/run/last"]


def resumed_beside(c: Ctx, text: str) -> list[str]:
    """--resume of a run directory whose recipe.yaml reads `text`."""
    (with_recipe(c) / "recipe.yaml").write_text(text)
    return c.train("--resume")


def one_label(c: Ctx) -> list[str]:
    rows = c.file("one.tsv", "pos\tthe cat sees\npos\tthe dog runs\npos\ta red house\n")
    recipe = {"task": "classify", "data": {"corpus": "files", "train": rows, "valid": rows, "vocab_size": 50},
              "model": {"preset": "bert-tiny", "overrides": dict(TINY)}, "train": {"max_steps": 2}}
    return recipe_file(c, "clf.yaml", yaml.safe_dump(recipe))


CASES = [
    # one strict YAML loader: aliases bounded (case 4), a key given twice refused (case 5)
    Case("yaml-alias-bomb", bomb_recipe,
         ("config file {tmp}/bomb.yaml: its aliases expand it by", f"more than the {MAX_ALIAS_NODES} allowed")),
    Case("yaml-alias-bomb-in-override", lambda c: c.train(f"model.overrides.d_model={bomb()}"),
         ("the value: its aliases expand it by", "the largest: *a7, line 1")),
    Case("yaml-alias-bomb-in-checkpoint",
         lambda c: generate(c, checkpoint=edited_config(c, c.w.gpt, f"family: gpt\nconfig: {bomb()}\n")),
         ("checkpoint {tmp}/ckpt: config.yaml: its aliases expand it by",)),
    Case("yaml-recursive-alias", lambda c: recipe_file(c, "loop.yaml", "task: translation\ndata: &d [*d]\n"),
         ("config file {tmp}/loop.yaml: alias *d (line 2) is used inside the node it names",)),
    Case("yaml-nested-too-deeply", lambda c: recipe_file(c, "deep.yaml", "task: " + "[" * 5000 + "]" * 5000 + "\n"),
         ("config file {tmp}/deep.yaml is not valid YAML (nested too deeply)",)),
    Case("yaml-tag-constructor-fails", lambda c: recipe_file(c, "tag.yaml", "task: !!bool maybe\n"),
         ("config file {tmp}/tag.yaml is not valid YAML (a value its tag cannot make: KeyError 'maybe')",)),
    Case("yaml-tag-constructor-fails-in-override", lambda c: c.train("task=!!bool maybe"),
         ("the value is not valid YAML (a value its tag cannot make: KeyError 'maybe')",)),
    Case("yaml-integer-too-long", lambda c: c.train("train.max_steps=" + "9" * 5000),
         ("the value is not valid YAML (an integer of more than 4300 digits)",)),
    Case("yaml-impossible-date", lambda c: recipe_file(c, "date.yaml", "task: translation\nout_dir: 2024-13-45\n"),
         ("config file {tmp}/date.yaml is not valid YAML (month must be in 1..12)",)),
    Case("yaml-duplicate-key", lambda c: recipe_file(c, "dup.yaml", "train:\n  optim: {lr: 0.001}\ntrain:\n  "
                                                                    "max_steps: 3\n"),
         ("config file {tmp}/dup.yaml: key 'train' is given twice in one mapping (lines 1 and 3)",)),
    Case("yaml-duplicate-nested-key",
         lambda c: recipe_file(c, "dup.yaml", "train:\n  optim:\n    lr: 0.001\n    eps: 1.0e-9\n    lr: 1.0\n"),
         ("key 'lr' is given twice in one mapping (lines 3 and 5)",)),
    Case("yaml-duplicate-key-in-override",
         lambda c: c.train("model.overrides.attention={kind: windowed, kind: sparse}"),
         ("override 'model.overrides.attention={kind: windowed, kind: sparse}': the value: key 'kind' is given "
          "twice in one mapping (lines 1 and 1)",)),
    Case("yaml-duplicate-key-in-checkpoint",
         lambda c: generate(c, checkpoint=edited_config(c, c.w.gpt, "family: gpt\nconfig: {}\nfamily: bert\n")),
         ("checkpoint {tmp}/ckpt: config.yaml: key 'family' is given twice in one mapping (lines 1 and 3)",)),
    Case("yaml-duplicate-key-beside-checkpoint", lambda c: evaluate_beside(c, "task: translation\ntask: lm\n"),
         ("{tmp}/run/recipe.yaml (the run's recipe beside the checkpoint) is not a valid recipe: the file: key "
          "'task' is given twice",)),
    # every float finite, every integer within 64 bits (case 6)
    Case("lr-infinite", lambda c: c.train("train.optim.lr=.inf"),
         ("config key 'train.optim.lr'=inf is not a finite number",)),
    Case("lr-infinite-as-text", lambda c: c.train("train.optim.lr=1e999"),
         ("config key 'train.optim.lr'='1e999' is not a finite number",)),
    Case("lr-beyond-float-range", lambda c: c.train("train.optim.lr=1" + "0" * 400),
         ("config key 'train.optim.lr'=", "is not a finite number")),
    Case("clip-norm-nan", lambda c: c.train("train.optim.clip_norm=.nan"),
         ("config key 'train.optim.clip_norm'=nan is not a finite number",)),
    Case("betas-infinite", lambda c: c.train("train.optim.betas=[0.9, -.inf]"),
         ("config key 'train.optim.betas[1]'=-inf is not a finite number",)),
    Case("time-budget-infinite", lambda c: c.train("train.time_budget_min=.inf"),
         ("config key 'train.time_budget_min'=inf is not a finite number",)),
    Case("dropout-nan", lambda c: c.train("model.overrides.dropout.residual=.nan"),
         ("config key 'dropout.residual'=nan is not a finite number",)),
    Case("recipe-lenpen-infinite", lambda c: c.train("decode.lenpen=.inf"),
         ("config key 'decode.lenpen'=inf is not a finite number",)),
    Case("sample-temperature-nan", lambda c: c.lm("sample.temperature=.nan"),
         ("config key 'sample.temperature'=nan is not a finite number",)),
    Case("integer-beyond-64-bits", lambda c: c.train("data.vocab_size=" + "9" * 30),
         ("config key 'data.vocab_size'=999999999999999999999999999999 is out of range", "[-2**63, 2**63)")),
    Case("checkpoint-config-infinite",
         lambda c: generate(c, checkpoint=edited_config(c, c.w.gpt, norm={"eps": math.inf})),
         ("config key 'norm.eps'=inf is not a finite number",)),
    # out_dir, best_metric, bleu_sentences, seed: checked before training starts (cases 7, 8, 9)
    Case("out-dir-null", lambda c: c.train("out_dir="), ("config key 'out_dir' is empty (null); expected str",)),
    Case("out-dir-empty", lambda c: c.train("out_dir=''"), ("out_dir='' must name a directory for the run",)),
    Case("out-dir-blank", lambda c: c.train("out_dir='  '"), ("out_dir='  ' must name a directory for the run",)),
    Case("best-metric-typo", lambda c: c.train("train.best_metric=blue"),
         ("train.best_metric='blue' is not allowed; choose one of valid_loss, valid_ppl, bleu, chrf",)),
    Case("best-metric-of-another-task", lambda c: c.lm("train.best_metric=bleu"),
         ("train.best_metric='bleu' is not allowed; choose one of valid_loss, valid_ppl, bits_per_char",)),
    Case("bleu-sentences-zero", lambda c: c.train("data.bleu_sentences=0"),
         ("data.bleu_sentences=0 must be a positive integer",)),
    Case("bleu-sentences-negative", lambda c: c.train("data.bleu_sentences=-3"),
         ("data.bleu_sentences=-3 must be a positive integer",)),
    Case("curriculum-negative", lambda c: c.train("data.curriculum_epochs=-1"),
         ("data.curriculum_epochs=-1 must be >= 0",)),
    Case("decode-max-len-negative", lambda c: c.train("decode.max_len_b=-1"),
         ("decode.max_len_b=-1 must be >= 0",)),
    Case("train-seed-negative", lambda c: c.train("train.seed=-1"),
         ("train.seed=-1 must be an integer in [0, 2**63)",)),
    Case("max-steps-null", lambda c: c.train("train.max_steps="),
         ("config key 'train.max_steps' is empty (null); expected an integer",)),
    # the synthetic corpus (cases 309 to 311)
    Case("synthetic-bad-range", lambda c: c.train("data.corpus=synthetic", "data.synthetic.min_len=10",
                                                  "data.synthetic.max_len=5"),
         ("data.synthetic.min_len=10, max_len=5 is not a length range; need 1 <= min_len <= max_len",)),
    Case("synthetic-symbols", lambda c: c.train("data.corpus=synthetic", "data.synthetic.symbols=63"),
         ("data.synthetic.symbols=63 is not allowed; choose 2 to 62",)),
    Case("synthetic-too-few-sequences", lambda c: c.train("data.corpus=synthetic", "data.synthetic.min_len=1",
                                                          "data.synthetic.max_len=1"),
         ("data.synthetic asks for up to 21500 distinct sequences of length 1, but 32 symbols make only 32",)),
    Case("synthetic-without-its-corpus", lambda c: c.train("data.synthetic.task=copy"),
         ("data.synthetic is set but data.corpus='files'; it needs data.corpus='synthetic'",)),
    # a classifier of one label (case 11)
    Case("classifier-one-label", one_label,
         ("data.train={tmp}/one.tsv has 1 label ('pos'); a classifier needs training examples of at least 2 labels",)),
    # --resume with a changed recipe (case 12)
    Case("resume-with-a-changed-lr", lambda c: resumed(c, "train.optim.lr=1.0"),
         ("cannot resume {tmp}/run/last with a changed recipe (train.optim.lr 0.001 -> 1.0)",
          "start a new out_dir")),
    Case("resume-with-changed-seed-and-data", lambda c: resumed(c, "train.seed=7", "data.vocab_size=200"),
         ("changed recipe (data.vocab_size 300 -> 200; train.seed 0 -> 7)",)),
    Case("resume-with-another-best-metric", lambda c: resumed(c, "train.best_metric=bleu"),
         ("changed recipe (train.best_metric 'valid_loss' -> 'bleu')",)),
    Case("resume-beside-a-corrupt-recipe", lambda c: resumed_beside(c, "train: [x\n"),
         ("cannot resume: {tmp}/run/recipe.yaml is not valid YAML (line 2, column 1",)),
]


test_bad_input, test_every_case_is_in_the_catalogue = case_tests(CASES)




# --- the loader and the checks, where the result is not an error ------------------------------------------


def test_small_aliases_and_merge_keys_are_read() -> None:
    """A recipe may share a small block; a merge key's values may be overridden beside it (not a repeat)."""
    text = "base: &b {lr: 0.001, eps: 1.0e-9}\na: *b\nb: {<<: *b, lr: 0.01}\n"
    assert parse_yaml(text, what="x") == {"base": {"lr": 0.001, "eps": 1e-9}, "a": {"lr": 0.001, "eps": 1e-9},
                                          "b": {"lr": 0.01, "eps": 1e-9}}
    just_over = "a: &a [" + ", ".join(["0"] * MAX_ALIAS_NODES) + "]\nb: *a\n"  # adds MAX_ALIAS_NODES + 1
    with pytest.raises(ValueError, match=f"expand it by {MAX_ALIAS_NODES + 1} nodes"):
        parse_yaml(just_over, what="x")
    parse_yaml(just_over.replace(", 0]", "]"), what="x")  # exactly the limit


def test_the_bomb_is_refused_quickly() -> None:
    """Counting the expansion never builds it: 9**9 leaves are refused from the node graph alone."""
    import time

    start = time.perf_counter()
    with pytest.raises(ValueError, match="its aliases expand it by"):
        parse_yaml(f"x: {bomb()}", what="x")
    assert time.perf_counter() - start < 2.0


def test_dump_yaml_writes_no_alias(tmp_path: Path) -> None:
    shared = [1, 2]
    text = dump_yaml({"a": shared, "b": shared})
    assert "&" not in text and "*" not in text
    (tmp_path / "r.yaml").write_text(text)
    assert read_yaml(tmp_path / "r.yaml", what="x") == {"a": [1, 2], "b": [1, 2]}


def test_a_huge_value_is_shown_cut_short(world: World) -> None:
    """A wrong-typed value of any size is named in a message of bounded length."""
    for value in ("x" * 100_000, "[" + ", ".join(["[1, 2, 3]"] * 20_000) + "]"):
        with pytest.raises(ValueError, match="has the wrong type") as e:
            load_recipe(world.recipe, [f"train.max_steps={value}"])
        assert len(str(e.value)) < 300 and "..." in str(e.value)


def test_floats_built_in_python_are_checked_too() -> None:
    from tformer.config import BertConfig, GPTConfig

    with pytest.raises(ValueError, match=r"optim.lr=inf is not a finite number"):
        OptimConfig(lr=math.inf)
    with pytest.raises(ValueError, match=r"classifier_dropout=nan is not a finite number"):
        BertConfig(classifier_dropout=math.nan)
    with pytest.raises(ValueError, match=r"'positions.rope_theta'=inf is not a finite number"):
        GPTConfig(positions={"kind": "rope", "rope_theta": math.inf})
    check_finite(OptimConfig(clip_norm=None), where="optim.")  # None is not a number: allowed where typed so


def test_metrics_jsonl_is_strict_json(tmp_path: Path) -> None:
    """A non-finite number is logged as null, never as the bare NaN / Infinity other readers refuse."""
    log = Logger(tmp_path, resume_at=None)
    log.write({"step": 1, "loss": math.nan, "lr": math.inf, "grad_norm": -math.inf, "tokens_per_s": 3.0})
    log.close()

    def refuse(name: str) -> None:
        raise AssertionError(f"bare {name} in metrics.jsonl")

    record = json.loads((tmp_path / "metrics.jsonl").read_text(), parse_constant=refuse)
    assert record == {"step": 1, "loss": None, "lr": None, "grad_norm": None, "tokens_per_s": 3.0}


# --- training runs (tiny: two steps) ------------------------------------------------------------------------


def test_a_failed_evaluation_keeps_the_trained_steps(world: World, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever fails at the first evaluation (a bug, a metric library), `last` is saved before it propagates."""
    from tformer.tasks.translation import TranslationTask

    def broken(self: TranslationTask, model: object) -> dict:
        raise IndexError("list index out of range")

    monkeypatch.setattr(TranslationTask, "evaluate", broken)
    with pytest.raises(IndexError) as e:
        main(["train", str(world.recipe), f"out_dir={tmp_path}/run", "--no-progress"])
    assert (tmp_path / "run" / "last" / "model.safetensors").is_file()
    assert "the steps trained so far are saved in" in " ".join(e.value.__notes__)


def test_a_diverged_run_names_no_checkpoint_it_did_not_save(world: World, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    """lr 1e30 (finite, so allowed) diverges at step 2, before any checkpoint was due: the message says none was
    saved rather than naming a `last` that does not exist; metrics.jsonl stays strict JSON."""
    argv = ["train", str(world.recipe), f"out_dir={tmp_path}/run", "train.optim.lr=1e30", "train.max_steps=4",
            "train.eval_every=4", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "non-finite loss or gradient" in err and "no checkpoint was saved (none was due yet)" in err, err
    assert not (tmp_path / "run" / "last").exists()
    for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"bare {name}"))


def test_no_best_is_named_when_none_was_written(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture) -> None:
    """A metric that is never finite chooses no `best`: the end message names only `last`, and the log holds
    null for it."""
    from tformer.tasks.translation import TranslationTask

    monkeypatch.setattr(TranslationTask, "evaluate", lambda self, model: {"valid_loss": math.nan, "bleu": 1.0})
    assert main(["train", str(world.recipe), f"out_dir={tmp_path}/run", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"checkpoints in {tmp_path}/run/last\n" in out and not (tmp_path / "run" / "best").exists()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert {"step": 2, "eval/valid_loss": None, "eval/bleu": 1.0} in [json.loads(x) for x in lines]


def test_resume_may_change_when_the_run_stops_and_records_it(world: World, tmp_path: Path) -> None:
    """max_steps (and the other keys of RESUME_MAY_CHANGE) may change on --resume; recipe.yaml then records the
    values the run went on with. The metrics the loop logs are the recipe's METRICS (what best_metric may name)."""
    from tformer.tasks.translation import TranslationRecipe

    run = ["train", str(world.recipe), f"out_dir={tmp_path}/run"]
    assert main([*run, "--no-progress"]) == 0
    assert main([*run, "train.max_steps=3", "train.eval_every=1", "decode.beam=1", "--resume", "--no-progress"]) == 0
    recipe = read_yaml(tmp_path / "run" / "recipe.yaml", what="x")
    assert (recipe["train"]["max_steps"], recipe["train"]["eval_every"], recipe["decode"]["beam"]) == (3, 1, 1)
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) == 3
    evals = {k.removeprefix("eval/") for r in records for k in r if k.startswith("eval/")}
    assert evals == set(TranslationRecipe.METRICS)


def test_lm_metrics_are_its_recipes(world: World, tmp_path: Path) -> None:
    from tformer.tasks.lm import DISTILL_METRICS, LMRecipe

    assert main(["train", str(world.lm_recipe), f"out_dir={tmp_path}/run", "--no-progress"]) == 0
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = {k.removeprefix("eval/") for r in records for k in r if k.startswith("eval/")}
    assert evals == set(LMRecipe.METRICS) - set(DISTILL_METRICS)  # and agreement with a teacher (test_lm_task.py)
