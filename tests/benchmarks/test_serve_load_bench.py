"""benchmarks/serve_load.py --quick: it trains a small translator, loads a real `tformer serve` subprocess with
and without micro-batching, and every request gets its own answer (the same as its sentence decoded alone); with
--mode generate, a tiny random GPT served with continuous batching and with micro-batching, the same."""

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from benchmarks import serve_load


def test_serve_load_quick(tmp_path: Path) -> None:
    out = tmp_path / "serve.json"
    with redirect_stdout(io.StringIO()) as printed:
        result = serve_load.main(["--quick", "--texts", "2", "--out", str(out)])
    rows = [(r["server"], r["clients"]) for r in result["results"]]
    assert rows == [("micro-batching", 1), ("micro-batching", 4), ("one at a time", 4)]
    for r in result["results"]:
        assert r["requests"] == r["answered"] == r["right"] == 12 and r["wrong"] == []
        assert r["sentences_per_s"] == 2 * r["requests_per_s"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0
        assert r["batches"] >= 1
    single = result["results"][-1]
    assert single["mean_batch"] == 1.0 and single["batches"] == 12  # --max-batch 1: one request a batch
    assert result["all_right"] and result["ratio"] > 0
    assert json.loads(out.read_text())["results"][0]["right"] == 12
    assert "| micro-batching | 4 |" in printed.getvalue()


def test_serve_load_generate_quick(tmp_path: Path) -> None:
    """--mode generate --quick: a tiny random GPT served with continuous batching and with micro-batching, each
    in its own process, 4 clients streaming 8 greedy requests of 2 to 6 new tokens; every answer equal to the
    library's alone, and every reported figure there."""
    out = tmp_path / "generate.json"
    with redirect_stdout(io.StringIO()) as printed:
        result = serve_load.main(["--mode", "generate", "--quick", "--out", str(out)])
    assert [(r["server"], r["clients"]) for r in result["results"]] == [("continuous", 4), ("micro", 4)]
    for r in result["results"]:
        assert r["requests"] == r["answered"] == r["right"] == 8 and r["wrong"] == []
        assert 8 * 2 <= r["tokens"] <= 8 * 6 and r["tokens_per_s"] > 0
        assert r["ttft_p99_ms"] >= r["ttft_p50_ms"] > 0 and r["itl_p99_ms"] >= r["itl_p50_ms"] >= 0
    assert result["all_right"] and result["ratio"] > 0 and result["checkpoint"] == "random GPT"
    assert json.loads(out.read_text())["results"][1]["right"] == 8
    assert "| continuous | 4 |" in printed.getvalue() and "tokens/s" in printed.getvalue()


def test_serve_load_generate_against_another_checkout_in_rounds(tmp_path: Path) -> None:
    """--against DIR: that checkout's micro-batched /generate loaded too (here this very checkout), each
    server started once a round; every answer right, and continuous's ratio over each other server per round."""
    root = Path(__file__).resolve().parents[2]
    with redirect_stdout(io.StringIO()) as printed:
        result = serve_load.main(["--mode", "generate", "--quick", "--batching", "continuous", "--against",
                                  str(root), "--rounds", "2"])
    other = f"micro@{root}"
    assert [(r["server"], r["round"]) for r in result["results"]] == [
        ("continuous", 0), (other, 0), ("continuous", 1), (other, 1)]
    assert result["all_right"] and all(r["right"] == r["requests"] == 8 for r in result["results"])
    assert list(result["ratios"]) == [other] and len(result["ratios"][other]) == 2
    assert all(x > 0 for x in result["ratios"][other]) and result["ratio"] is None  # no plain micro server
    assert f"| {other} (round 2) | 4 |" in printed.getvalue()
    assert f"continuous / {other}, at 4 clients: " in printed.getvalue()


def test_serve_load_against_a_folder_that_is_no_checkout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info, redirect_stderr(io.StringIO()) as err:
        serve_load.main(["--mode", "generate", "--quick", "--against", str(tmp_path)])
    assert exit_info.value.code == 2 and f"--against {tmp_path}: not a checkout of tformer" in err.getvalue()


def test_serve_load_against_a_checkout_whose_server_does_not_start_is_refused(tmp_path: Path) -> None:
    """A checkout whose `tformer serve --help` fails: one line naming it, exit code 2, before any reference."""
    (tmp_path / "src" / "tformer").mkdir(parents=True)
    (tmp_path / "src" / "tformer" / "__init__.py").write_text("")
    (tmp_path / "src" / "tformer" / "__main__.py").write_text("raise SystemExit('this tformer is broken')\n")
    with pytest.raises(SystemExit) as exit_info, redirect_stderr(io.StringIO()) as err:
        serve_load.main(["--mode", "generate", "--quick", "--against", str(tmp_path)])
    assert exit_info.value.code == 2
    assert err.getvalue() == (f"serve_load: --against {tmp_path}: its `tformer serve --help` failed: "
                              "this tformer is broken\n")
