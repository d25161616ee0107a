"""benchmarks/translate_speed.py, attention_memory.py and bench.py: --quick runs (greedy tokens identical to
Marian's; the longest n and a memory measure that sees the (n, n) scores), and the targets table's logic on
made-up numbers."""

import io
import json
import types
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch

from benchmarks import attention_memory, bench, translate_speed
from benchmarks.common import forecast
from benchmarks.quiet import Check


def quiet(main: types.FunctionType, argv: list[str]) -> dict:
    with redirect_stdout(io.StringIO()):
        return main(argv)


# --- translate_speed ----------------------------------------------------------------------------------------


def test_translate_quick_greedy_tokens_match_marian(tmp_path: Path) -> None:
    out = tmp_path / "translate.json"
    info = quiet(translate_speed.main, ["--quick", "--device", "cpu", "--out", str(out)])
    tokens = info["tokens"]
    assert tokens["greedy/tformer"] == tokens["greedy/transformers"]
    assert len({tuple(t) for t in tokens["greedy/tformer"]}) > 1  # the outputs depend on the source
    saved = json.loads(out.read_text())
    assert [(r["search"], r["contender"]) for r in saved["results"]] == [
        ("greedy", "tformer"), ("greedy", "transformers"), ("beam4", "tformer"), ("beam4", "transformers")]
    new = saved["args"]["new_tokens"]
    for r in saved["results"]:
        assert r["sentences_per_s"] > 0 and r["output_lengths"] == [new]  # no early end on either side
        assert 0.0 <= r["same_best"] <= 1.0
        assert r["quiet"] in ("quiet", "not quiet", "unknown") and len(r["rounds"]) == saved["args"]["reps"]
    assert saved["results"][0]["same_best"] == 1.0


# --- attention_memory ---------------------------------------------------------------------------------------


def test_live_bytes_counts_storages_until_freed() -> None:
    mib = 2**20
    tracker = attention_memory.LiveBytes()
    with tracker:
        a, b = torch.ones(mib // 4), torch.ones(mib // 4)
        view = a.view(2, -1)  # shares a's storage: not counted again
        assert tracker.current == 2 * mib
        del a, view
        c = b + 1
        del b, c
    assert tracker.current == 0 and tracker.peak == 2 * mib


def test_attention_memory_quick(tmp_path: Path) -> None:
    info = quiet(attention_memory.main, ["--quick", "--device", "cpu", "--out", str(tmp_path / "attn.json")])
    rows = {(r["kernel"], r["mode"]): r for r in info["results"]}
    assert set(rows) == {(k, m) for k in ("sdpa", "eager") for m in ("forward", "train")}
    n, heads = 256, attention_memory.QUICK["heads"]
    scores = heads * n * n * 4  # (B=1, H, n, n) float32
    for r in rows.values():
        assert r["longest_n"] == n and r["time_s"] > 0 and r["memory_bytes"] > 0
        assert [p["n"] for p in r["points"]] == [64, 128, 256]
    assert rows["eager", "forward"]["memory_bytes"] >= 2 * scores  # scores and softmax live at once
    assert rows["sdpa", "forward"]["memory_bytes"] < scores  # the fused kernel never holds them
    assert json.loads((tmp_path / "attn.json").read_text())["results"][0]["longest_n"] == n


def test_attention_memory_forecast_stops_before_the_cap_or_budget() -> None:
    args = attention_memory.parse_args(["--cap-gib", "0.75", "--budget", "5"])
    points = [dict(n=1024, time_s=0.1, memory_bytes=2**27), dict(n=2048, time_s=0.4, memory_bytes=2**28)]
    assert forecast(points, 4096, "n", attention_memory.limits(args)) is None  # memory 0.5 GiB (slope 1), 1.6 s
    points.append(dict(n=4096, time_s=1.6, memory_bytes=2**29))
    assert forecast(points, 8192, "n", attention_memory.limits(args)) == "n=8192 not run: predicted 1 GiB > 0.75 GiB"
    args.cap_gib = 4.0
    assert forecast(points, 8192, "n", attention_memory.limits(args)) == "n=8192 not run: predicted 6.4 s > 5 s"


# --- bench.py targets ---------------------------------------------------------------------------------------


def fake_parts(*, gpt_vs_eager: float, bound_share: float, beam_speedup: float) -> dict:
    train = {"results": [{"family": "gpt", "rows": [
        {"contender": "tformer", "attention": "tformer sdpa", "tokens_per_s": 3000.0, "mfu": 0.9},
        {"contender": "GPT2LMHeadModel eager", "attention": "HF eager", "tokens_per_s": 3000.0 / gpt_vs_eager},
        {"contender": "GPT2LMHeadModel sdpa", "attention": "HF sdpa", "tokens_per_s": 3000.0 / 1.05}]}]}
    generate = {"bound": {"tokens_per_s": 1000.0}, "results": [
        {"contender": "tformer", "batch": 1, "tokens_per_s": 1000.0 * bound_share},
        {"contender": "transformers", "batch": 1, "tokens_per_s": 100.0},
        {"contender": "tformer", "batch": 8, "tokens_per_s": 1.0}]}
    translate = {"args": {"beam": 4}, "results": [
        {"search": "greedy", "contender": "tformer", "speedup": 9.0},
        {"search": "beam4", "contender": "tformer", "speedup": beam_speedup}]}
    ct2 = {"bound": {"tformer_share": 0.9}, "results": [
                       {"task": "translation, greedy, sentences/s", "int8_ratio": 1.2, "fp32_ratio": 0.5},
                       {"task": "translation, beam 4, sentences/s", "int8_ratio": 0.4, "fp32_ratio": 0.5},
                       {"task": "translation, beam 4, both stopping once beam finished, sentences/s",
                        "int8_ratio": 9.0, "fp32_ratio": 9.0},
                       {"task": "generation, batch 1, tokens/s", "int8_ratio": 1.0, "fp32_ratio": 0.5}]}
    return {"train_speed": {"json": train}, "generate": {"json": generate}, "translate_speed": {"json": translate},
            "ct2_speed": {"json": ct2}}


def test_targets_met_and_not_met() -> None:
    rows = bench.targets(fake_parts(gpt_vs_eager=1.6, bound_share=0.75, beam_speedup=1.9))
    status = {r["target"]: r["status"] for r in rows}
    assert status == {
        "training gpt: tformer / GPT2LMHeadModel eager": "met",  # 1.6 >= 1.5
        "training gpt: tformer / GPT2LMHeadModel sdpa": "not met",  # 1.05 < 1.1
        "training gpt: tformer MFU": "met",  # 90% >= 85%
        "generation, batch 1: tformer / transformers": "met",  # 750 / 100
        "generation, batch 1: tformer / bandwidth bound": "met",  # 75% >= 70%
        "translation, beam 4: tformer / MarianMTModel": "not met",  # 1.9 < 2
        "translation, greedy: tformer fp32 / CTranslate2 fp32": "not met",  # 0.5
        "translation, beam 4: tformer fp32 / CTranslate2 fp32": "not met",
        "generation, batch 1: tformer fp32 / CTranslate2 fp32": "not met",
        "generation, batch 8: tformer fp32 / CTranslate2 fp32": "not measured",
        "translation, greedy: tformer int8 / CTranslate2 int8": "met",  # 1.2 >= 1
        "translation, beam 4: tformer int8 / CTranslate2 int8": "not met",  # 0.4
        "generation, batch 1: tformer int8 / CTranslate2 int8": "met",  # 1.0, >= is met
        "generation, batch 8: tformer int8 / CTranslate2 int8": "not measured",  # no row
        "generation, batch 1: tformer fp32 / bandwidth bound": "met",  # 90% >= 85%
    }
    measured = {r["target"]: r["measured"] for r in rows}
    assert measured["training gpt: tformer / GPT2LMHeadModel sdpa"] == pytest.approx(1.05)
    assert measured["generation, batch 1: tformer / bandwidth bound"] == pytest.approx(0.75)
    edge = bench.targets(fake_parts(gpt_vs_eager=1.5, bound_share=0.5, beam_speedup=2.0))
    edges = ("training gpt: tformer / GPT2LMHeadModel e", "translation, beam 4: tformer / M")
    assert [r["status"] for r in edge if r["target"].startswith(edges)] == ["met", "met"]  # >= is met
    table = bench.targets_markdown(rows)
    assert "| 1.60x | ≥ 1.50x | met |" in table and "| 75.0% | ≥ 70.0% | met |" in table


def test_targets_resting_on_a_round_that_was_not_quiet_are_not_a_result() -> None:
    parts = fake_parts(gpt_vs_eager=1.6, bound_share=0.75, beam_speedup=2.5)
    loud = Check(wall_s=1.0, others=0.6, cores=2, load_before=None, load_after=None).as_dict()
    calm = Check(wall_s=1.0, others=0.0, cores=2, load_before=None, load_after=None).as_dict()
    generate = parts["generate"]["json"]["results"]
    generate[0]["rounds"], generate[1]["rounds"] = [calm, calm], [calm, loud]
    parts["ct2_speed"]["json"]["results"][0]["refused"] = {"fp32": "not a result: ...", "int8": None}
    parts["ct2_speed"]["json"]["bound"]["mismeasured"] = "the bound is mismeasured: ..."
    rows = {r["target"]: r for r in bench.targets(parts)}
    refused = rows["generation, batch 1: tformer / transformers"]
    assert refused["status"] == "not a result" and refused["measured"] == pytest.approx(7.5)
    assert refused["refused"] == ("not a result: other processes used 60% of a core (30% of the 2 cores) during "
                                  "round 2 (transformers)")
    assert rows["generation, batch 1: tformer / bandwidth bound"]["status"] == "met"  # ours were quiet
    assert rows["translation, greedy: tformer fp32 / CTranslate2 fp32"]["status"] == "not a result"
    assert rows["translation, greedy: tformer int8 / CTranslate2 int8"]["status"] == "met"
    assert rows["generation, batch 1: tformer fp32 / bandwidth bound"]["status"] == "not a result"
    table = bench.targets_markdown(list(rows.values()))
    assert "| 7.50x | ≥ 2.00x | not a result |" in table
    assert "\ngeneration, batch 1: tformer / transformers: not a result: other processes used 60%" in table


def test_targets_of_missing_or_failed_parts_are_not_measured() -> None:
    rows = bench.targets({"generate": {"error": "RuntimeError: boom", "markdown": ""}})
    assert rows and all(r["status"] == "not measured" and r["measured"] is None for r in rows)
    assert "| — |" in bench.targets_markdown(rows)


def test_ct2_random_quick_runs_every_row_with_the_same_work_on_each_side(tmp_path: Path) -> None:
    from benchmarks import ct2_random

    info = quiet(ct2_random.main, ["--device", "cpu", "--quick", "--threads", "1", "--out", str(tmp_path / "ct2.json")])
    tasks = [r["task"].rsplit(",", 1)[0] for r in info["results"]]
    assert tasks == ["translation, greedy", "translation, beam 4", "generation, batch 1", "generation, batch 8"]
    for r in info["results"]:
        assert r["same_lengths"], r["task"]
        assert set(r["seconds"]) == {"tformer fp32", "tformer int8", "ct2 fp32", "ct2 int8"}
        assert r["int8_ratio"] == pytest.approx(r["seconds"]["ct2 int8"] / r["seconds"]["tformer int8"])
    assert json.loads((tmp_path / "ct2.json").read_text())["results"][0]["task"].startswith("translation, greedy")


def test_ct2_speed_quick_trains_the_missing_models_and_compares_as_users_run_each(tmp_path: Path) -> None:
    """The user-style bench on tiny models it trains itself: every row, every contender in its process,
    the ratios from the fastest calls, the generations equal token for token (greedy on the same weights),
    the batch-1 row set against the mat-vec bound."""
    from benchmarks import ct2_speed

    info = quiet(ct2_speed.main, ["--quick", "--threads", "1", "--translator", str(tmp_path / "none"),
                                  "--models-dir", str(tmp_path / "models"), "--out", str(tmp_path / "ct2.json")])
    assert (tmp_path / "models" / "translator-quick" / "best" / "config.yaml").is_file()
    tasks = [r["task"].rsplit(",", 1)[0] for r in info["results"]]
    assert info["stopping"] == "finished"  # the run's recipe: today's default, CTranslate2's rule (no extra row)
    assert tasks == ["translation, greedy", "translation, beam 4", "generation, batch 1", "generation, batch 8"]
    for r in info["results"]:
        assert set(r["seconds"]) == {"tformer fp32", "tformer int8", "ct2 fp32", "ct2 int8"}
        assert r["fp32_ratio"] == pytest.approx(r["seconds"]["ct2 fp32"] / r["seconds"]["tformer fp32"])
        assert 0 <= r["same"] <= 1
    assert [r["same"] for r in info["results"][-2:]] == [1.0, 1.0]
    assert info["bound"]["tokens_per_s"] > 0 and info["bound"]["tformer_share"] > 0
    assert json.loads((tmp_path / "ct2.json").read_text())["stopping"] == info["stopping"]
    from benchmarks import ct2_quality

    quality = quiet(ct2_quality.main, ["--translator", info["translator"], "--gpt", info["gpt"], "--limit", "4",
                                       "--threads", "1"])
    assert quality["sentences"] == 4 and set(quality["bleu"]) == set(ct2_speed.CONTENDERS)
    assert quality["bleu"]["tformer fp32"] == quality["bleu"]["ct2 fp32"]  # the same stopping rule, same outputs
    assert set(quality["perplexity"]) == {"tformer fp32", "tformer int8"}


def test_ct2_speed_translation_tasks_build_no_gpt_and_refuse_a_ratio_of_a_round_that_was_not_quiet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--tasks beam greedy` finds (here: trains) the translator alone: the GPT's builder, its weights and its
    bound are never asked for. The workers are stood in for: each round returns a time and a quiet check, and
    one round of tformer fp32 was not quiet, so the fp32 ratios are refused and the int8 ones stand."""
    from benchmarks import bench_models, ct2_speed, machine

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a translation-only run asked for the GPT")

    monkeypatch.setattr(bench_models, "gpt", forbidden)
    monkeypatch.setattr(ct2_speed, "weight_bytes", forbidden)
    monkeypatch.setattr(machine, "decode_bound", forbidden)
    rounds = []

    def worker(task: str, contender: str, checkpoint: Path, converted: Path, argv: list[str]) -> dict:
        rounds.append((task, contender))
        assert (converted / "translator-fp32").is_dir() and not (converted / "gpt-fp32").exists()
        others = 0.8 if (contender, len(rounds)) == ("tformer fp32", 1) else 0.0
        check = Check(wall_s=1.0, others=others, cores=2, load_before=None, load_after=None)
        return {"seconds": 1.0, "check": check.as_dict(), "outputs": ["a"] * ct2_speed.QUICK["sentences"]}

    monkeypatch.setattr(ct2_speed, "in_process", worker)
    out = io.StringIO()
    with redirect_stdout(out):
        info = ct2_speed.main(["--quick", "--threads", "1", "--tasks", "beam", "greedy", "--translator",
                               str(tmp_path / "none"), "--models-dir", str(tmp_path / "models")])
    assert info["gpt"] is None and info["bound"] is None
    assert not (tmp_path / "models" / "gpt-quick").exists()
    assert [r["task"].rsplit(",", 1)[0] for r in info["results"]] == ["translation, greedy", "translation, beam 4"]
    assert {t for t, _ in rounds} == {"greedy", "beam"} and len(rounds) == 8
    greedy, beam = info["results"]
    assert greedy["quiet"] == "not quiet" and beam["quiet"] == "quiet"
    assert greedy["refused"]["int8"] is None and greedy["refused"]["fp32"] == (
        "not a result: other processes used 80% of a core (40% of the 2 cores) during round 1 (tformer fp32)")
    assert len(greedy["rounds"]["tformer fp32"]) == 1 and greedy["rounds"]["tformer fp32"][0]["quiet"] is False
    printed = out.getvalue()
    assert "| (1.00x) not a result |" in printed and "| tformer fp32 round 1: 80% |" in printed
    assert "translation, greedy, sentences/s, fp32: not a result: other processes used 80%" in printed
    assert "bound" not in printed
