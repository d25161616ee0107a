"""benchmarks/beam_profile.py on the bench's quick translator: a call's time, the encoder's share and the
operator table of one profiled call."""

from __future__ import annotations

from pathlib import Path

from benchmarks import beam_profile, bench_models


def test_beam_profile_times_the_call_the_encoder_and_the_operators(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    checkpoint = bench_models.translator(None, minutes=0, root=tmp_path, quick=True)
    out = beam_profile.main(["--checkpoint", str(checkpoint), "--sentences", "6", "--beam", "2", "--top", "5"])
    assert 0 < out["encoder_seconds"] < out["seconds"]
    assert len(out["operators"]) == 5 and all(r["calls"] >= 1 for r in out["operators"])
    shares = [r["share"] for r in out["operators"]]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 1
    assert "sentences/s" in capsys.readouterr().out
