"""benchmarks.step_profile: it runs the loop's own step on a translation recipe and reports where the time
goes; on the CPU it leaves the device's figures out rather than inventing them."""

import json
from pathlib import Path

import pytest

from benchmarks.step_profile import main

WORDS = ["the", "house", "is", "small", "a", "dog", "runs", "far", "big", "cat"]
WORTE = ["das", "haus", "ist", "klein", "ein", "hund", "rennt", "weit", "gross", "katze"]


def corpus(path: Path, n: int) -> str:
    lines = []
    for i in range(n):
        picks = [(i * 7 + j * 3) % len(WORDS) for j in range(3 + i % 5)]
        lines.append(" ".join(WORDS[k] for k in picks) + "\t" + " ".join(WORTE[k] for k in picks))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_it_profiles_the_steps_of_a_tiny_recipe(tmp_path: Path) -> None:
    train, valid = corpus(tmp_path / "train.tsv", 80), corpus(tmp_path / "valid.tsv", 8)
    overrides = ["data.corpus=files", f"data.train={train}", f"data.valid={valid}", "data.vocab_size=300",
                 "data.max_tokens=120", "data.bleu_sentences=4", "model.overrides.d_model=16",
                 "model.overrides.d_ff=32", "model.overrides.n_heads=2", "model.overrides.n_layers=1",
                 "train.device=cpu", "train.precision=fp32"]
    out = tmp_path / "profile.json"
    result = main(["demo-gpu", *overrides, "--steps", "2", "--warmup", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["device"] == "cpu" and result["device_busy"] is None and "kernels_per_step" not in result
    assert len(result["steps_s"]) == 2 and result["step_s"] > 0 and 0 < result["tokens_per_step"] <= 120
    assert result["ops_per_step"] > 50  # a forward, a backward and an optimizer step of dispatched operators
    assert result["batches_per_epoch"] >= 80 * 3 // 120 and result["eval_s"] > 0
    assert set(result["eval_metrics"]) == {"valid_loss", "valid_ppl", "bleu", "chrf"}


def test_it_takes_translation_recipes_only(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["gpt-bible", "--steps", "1"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "step_profile: gpt-bible: task='lm'; step_profile takes translation recipes\n"


def test_a_recipe_it_cannot_use_is_one_line_and_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["demo-gpu", "data.max_tokens=0", "--steps", "1"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("step_profile: data.max_tokens=0") and "\n" not in err
