"""The translation pipeline through the `tformer` command on a tiny TSV corpus: train, resume exactly,
translate, evaluate, and user errors as one line with exit code 2."""

import json
import random
import sys
from pathlib import Path

import pytest
import safetensors.torch
import yaml

from tformer.cli import main

WORDS = "the a house cat dog sees big small red blue runs sleeps".split()
GERMAN = dict(zip(WORDS, "der ein Haus Katze Hund sieht gross klein rot blau rennt schlaeft".split(), strict=True))


def corpus(path, n: int, seed: int) -> None:  # noqa: ANN001
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
        lines.append(" ".join(words) + "\t" + " ".join(GERMAN[w] for w in words))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def recipe(tmp_path):  # noqa: ANN001, ANN201
    corpus(tmp_path / "train.tsv", 300, 0)
    corpus(tmp_path / "valid.tsv", 20, 1)
    corpus(tmp_path / "test.tsv", 20, 2)
    data = {
        "task": "translation", "out_dir": str(tmp_path / "run"),
        "data": {"corpus": "files", "train": str(tmp_path / "train.tsv"), "valid": str(tmp_path / "valid.tsv"),
                 "test": str(tmp_path / "test.tsv"), "vocab_size": 300, "max_tokens": 400, "bleu_sentences": 5},
        "model": {"preset": "transformer-tiny", "overrides": {"d_model": 32, "d_ff": 64, "n_layers": 1,
                                                              "max_len": 64}},
        "train": {"max_steps": 6, "eval_every": 3, "log_every": 1, "schedule": {"name": "constant", "warmup": 2},
                  "optim": {"lr": 1e-3}},
        "decode": {"beam": 2, "max_len_b": 5},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def weights(run) -> dict:  # noqa: ANN001
    return safetensors.torch.load_file(str(run / "last" / "model.safetensors"))


def test_resume_equals_uninterrupted_run(recipe, tmp_path) -> None:  # noqa: ANN001
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert main(["train", str(recipe), f"out_dir={straight}", "train.max_steps=8", "--no-progress"]) == 0
    assert main(["train", str(recipe), f"out_dir={split}", "train.max_steps=4", "--no-progress"]) == 0
    # the flags before the overrides (`tformer train demo --resume out_dir=runs/x`): options and overrides mix
    assert main(["train", str(recipe), "--resume", "--no-progress", f"out_dir={split}", "train.max_steps=8"]) == 0
    a, b = weights(straight), weights(split)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    logged = [yaml.safe_load(line) for line in (split / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "loss" in r] == list(range(1, 9))


@pytest.mark.parametrize("attention", ["model.overrides.attention=ssm",
                                       "model.overrides.attention={kind: windowed, window: 2}"])
def test_attention_kind_from_the_command_line(recipe, tmp_path, capsys, attention) -> None:  # noqa: ANN001
    """A kind chosen by an override trains, is saved with the checkpoint and decodes from it."""
    assert main(["train", str(recipe), attention, "train.max_steps=2", "--no-progress"]) == 0
    saved = yaml.safe_load((tmp_path / "run" / "last" / "config.yaml").read_text())
    kind = "ssm" if "ssm" in attention else "windowed"
    assert yaml.dump(saved).count(f"kind: {kind}") == 1
    source = tmp_path / "in.txt"
    source.write_text("the cat sees a dog\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(tmp_path / "run" / "last"), "--input", str(source)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert main(["train", str(recipe), "model.overrides.attention=flash", "--overwrite", "--no-progress"]) == 2
    assert "attention.kind='flash' is not allowed" in capsys.readouterr().err


def test_train_translate_evaluate(recipe, tmp_path, capsys, monkeypatch) -> None:  # noqa: ANN001
    assert main(["train", str(recipe), "--no-progress"]) == 0
    assert "stopped at step 6 after " in capsys.readouterr().out
    run = tmp_path / "run"
    assert {p.name for p in (run / "best").iterdir()} >= {"model.safetensors", "config.yaml", "tokenizer"}
    source = tmp_path / "in.txt"
    source.write_text("the cat sees a dog\n\nthe red house\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert main(["translate", "--checkpoint", str(run / "best"), "--input", str(source), "--output", str(out),
                 "--beam", "1"]) == 0
    lines = out.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 4 and lines[1] == ""  # one line out per line in; an empty line stays empty
    capsys.readouterr()
    evaluate = ["evaluate", "--checkpoint", str(run / "best"), "--split", "test", "--beam", "2"]
    assert main(evaluate) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "test: 20 sentences" in printed and "BLEU = " in printed and "nrefs:1" in printed
    assert "chrF = " in printed and "degenerate = " in printed and " of 20 outputs repeat" in printed
    assert "\r" not in captured.err and "translating" not in captured.err  # stderr is no terminal: no bar
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(evaluate) == 0
    err = capsys.readouterr().err
    assert "translating" in err and "20/20" in err  # on a terminal, the progress bar over the sentences
    assert main([*evaluate, "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_demo_stopped_by_a_signal_says_how_to_go_on_and_decodes_nothing(recipe, monkeypatch, capsys) -> None:  # noqa: ANN001
    import tformer.tasks.translation as translation

    def stopped(*args, **kwargs) -> dict:  # noqa: ANN002, ANN003
        return {"step": 7, "elapsed": 60.0, "stopped": "SIGTERM", "interrupted": "SIGTERM"}

    def never(*args, **kwargs) -> None:  # noqa: ANN002, ANN003
        raise AssertionError("a stopped demo must not decode the test set")

    monkeypatch.setattr(translation, "train_translation", stopped)
    monkeypatch.setattr(translation, "evaluate_checkpoint", never)
    assert main(["demo", str(recipe), "train.seed=3"]) == 143
    err = capsys.readouterr().err
    out_dir = yaml.safe_load(recipe.read_text())["out_dir"]
    assert err.strip() == (f"tformer: SIGTERM at step 7: saved {out_dir}/last; continue with "
                           f"`tformer train {recipe} train.seed=3 --resume`")


def test_demo_on_a_time_budget_says_why_it_stopped_and_what_it_got(recipe, tmp_path, capsys,  # noqa: ANN001
                                                                    monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # the bars, as on a terminal
    assert main(["demo", str(recipe), "train.max_steps=100000", "train.time_budget_min=0.0001"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "stopped at step 1 after 0.0 min: time budget reached" in out
    assert "degenerate = " in out and out.count("\nsource:    ") == 5 and "tformer:   " in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("test BLEU ") and " of 20); training stopped at step 1 " in last and "total " in last
    assert "/00:00" in captured.err and "100000" not in captured.err  # the bar counts the budget, not steps
    run = Path(yaml.safe_load(recipe.read_text())["out_dir"])
    result = json.loads((run / "test.json").read_text())
    assert last.endswith(f"results in {run / 'test.json'}")
    assert result["steps"] == 1 and result["stopped"] == "time budget" and result["sentences"] == 20
    assert f"BLEU {result['bleu']:.1f}, chrF {result['chrf']:.1f}" in last
    assert len((run / "test.hyp").read_text().splitlines()) == 20


@pytest.mark.parametrize(("args", "message"), [
    (["train.max_stepz=3"], "unknown config key 'train.max_stepz'"),
    (["train.max_steps=three"], "config key 'train.max_steps'='three' has the wrong type"),
    (["model.preset=transformer-huge"], "unknown preset 'transformer-huge'"),
    (["data.corpus=web"], "data.corpus='web' is not allowed"),
    (["decode.beam=0"], "decode.beam=0 must be at least 1"),
])
def test_bad_recipe_values_are_one_line_errors(recipe, capsys, args, message) -> None:  # noqa: ANN001
    assert main(["train", str(recipe), *args, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tformer: error: ") and message in err and err.count("\n") == 1


def test_missing_files_are_one_line_errors(recipe, tmp_path, capsys) -> None:  # noqa: ANN001
    assert main(["train", str(tmp_path / "nope.yaml")]) == 2
    assert "config file" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(tmp_path / "nothing")]) == 2
    assert "nothing" in capsys.readouterr().err
    bad = tmp_path / "bad.tsv"
    bad.write_text("one\ttwo\nthree only\n", encoding="utf-8")
    assert main(["train", str(recipe), f"data.train={bad}", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "bad.tsv:2" in err
    assert not (tmp_path / "run" / "last").exists()  # nothing half-written
