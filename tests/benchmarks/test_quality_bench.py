"""benchmarks/quality.py and benchmarks/extrapolation.py as smoke runs (--quick: 3 steps, a tiny evaluation),
and the decoding-cache sizes the quality table reports against their closed forms."""

import json
import math
from pathlib import Path

import pytest

import tformer
from benchmarks import extrapolation, quality


def tiny_gpt(**overrides: object) -> tuple[object, tformer.GPTConfig]:
    config = tformer.GPTConfig(**{**dict(vocab_size=11, d_model=16, n_heads=4, d_ff=32, n_layers=3, max_len=8),
                                  **overrides})
    return tformer.build_model(config), config


def test_kv_cache_bytes_are_two_layers_heads_width_floats_per_position() -> None:
    model, config = tiny_gpt(n_kv_heads=2)
    layers, kv_heads, width, positions = 3, 2, 4, 32
    expected = 2 * layers * kv_heads * width * 4 * positions
    assert quality.cache_bytes(model, positions) == expected
    assert quality.expected_cache_bytes(config, positions) == (expected, True)


@pytest.mark.parametrize(("attention", "expected"), [
    ({"kind": "linear"}, 3 * 4 * (4 * 4 + 4) * 4),  # L * Hk * (D * D + D) floats
    ({"kind": "ssm", "state": 5, "expand": 2, "conv": 3}, 3 * (32 * 5 + 32 * 2) * 4),  # L * (E N + E (K - 1))
])
def test_recurrent_state_bytes_are_constant_in_length(attention: dict, expected: int) -> None:
    model, config = tiny_gpt(attention=attention)
    assert quality.cache_bytes(model, 16) == quality.cache_bytes(model, 1024) == expected
    assert quality.expected_cache_bytes(config) == (expected, False)


def test_quality_quick_writes_a_table_of_finite_losses(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = quality.main(["--quick", "--variants", "exact", "mqa", "--runs", str(tmp_path / "runs"),
                         "--out", str(out), "--no-progress"])
    assert code == 0
    results = json.loads((out / "results.json").read_text())["results"]
    assert [r["variant"] for r in results] == ["exact", "mqa"]
    for r in results:
        assert math.isfinite(r["valid_loss"]) and math.isfinite(r["bits_per_char"]) and r["tokens_per_s"] > 0
        assert r["cache_bytes"] == r["cache_bytes_expected"]
        assert Path(r["run"]).parent == tmp_path / "runs"
    assert results[1]["cache_bytes"] * 4 == results[0]["cache_bytes"]  # 1 key/value head instead of 4
    table = (out / "table.md").read_text()
    assert "| exact |" in table and "| mqa |" in table and "failed" not in table


def test_extrapolation_quick_writes_a_table_of_finite_perplexities(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = extrapolation.main(["--quick", "--positions", "learned", "alibi", "--lengths", "128", "256",
                               "--runs", str(tmp_path / "runs"), "--out", str(out), "--no-progress"])
    assert code == 0
    results = json.loads((out / "results.json").read_text())["results"]
    assert [r["positions"] for r in results] == ["learned", "alibi"]
    for r in results:
        assert set(r["ppl"]) == {"128", "256"} and all(math.isfinite(v) and v > 1 for v in r["ppl"].values())
        assert r["predicted"] == 2048  # the same characters at every length
        assert Path(r["checkpoint"]).parent == tmp_path / "runs" / r["positions"]
    table = (out / "table.md").read_text()
    assert "ppl@256" in table and "never trained" in table


def test_quality_reports_a_failing_variant_in_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = quality.Variant("windowed, r 0", {"attention": {"kind": "windowed", "window": 0}})
    monkeypatch.setitem(quality.VARIANTS, "windowed", bad)
    out = tmp_path / "out"
    code = quality.main(["--quick", "--variants", "windowed", "--runs", str(tmp_path / "runs"), "--out", str(out),
                         "--no-progress"])
    assert code == 1
    (result,) = json.loads((out / "results.json").read_text())["results"]
    assert "attention.window=0" in result["error"]
    assert "| windowed | windowed, r 0 | failed: UserError: attention.window=0" in (out / "table.md").read_text()
