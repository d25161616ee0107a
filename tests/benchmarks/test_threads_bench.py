"""benchmarks/threads.py: steps per second from the logged steps (start-up excluded), and the spinners end."""

from __future__ import annotations

import pytest

from benchmarks.threads import busy, steps_per_s


def test_steps_per_s_counts_from_the_first_logged_step() -> None:
    records = [{"step": 20, "loss": 5.0, "elapsed_s": 10.0}, {"eval": 1}, {"step": 40, "loss": 4.0, "elapsed_s": 14.0},
               {"step": 60, "loss": 3.0, "elapsed_s": 18.0}]
    assert steps_per_s(records) == pytest.approx(40 / 8)
    with pytest.raises(ValueError, match="at least two logged steps"):
        steps_per_s(records[:1])


def test_busy_processes_spin_and_end(monkeypatch) -> None:  # noqa: ANN001
    import subprocess

    started = []
    real = subprocess.Popen

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", recording)
    with busy(2):
        assert len(started) == 2 and all(p.poll() is None for p in started)  # spinning
    assert all(p.poll() is not None for p in started)  # killed and reaped
