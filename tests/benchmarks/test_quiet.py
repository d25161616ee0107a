"""benchmarks/quiet.py: the accounting of other processes' CPU time on fake /proc text, the verdicts and
refusals built on it, and a round run beside a busy process getting the mark."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import quiet
from benchmarks.quiet import Check, Reading

STAT = """cpu  700 10 200 9000 50 5 5 30 40 0
cpu0 300 10 100 4500 25 5 5 10 40 0
cpu1 400 0 100 4500 25 0 0 20 0 0
intr 12345 0 0
ctxt 999
"""


def test_busy_seconds_counts_user_nice_system_irq_softirq_steal_of_the_chosen_cores() -> None:
    assert quiet.busy_seconds(STAT) == (pytest.approx((430 + 520) / 100), 2)  # guest (40) is inside user
    assert quiet.busy_seconds(STAT, {1}) == (pytest.approx(5.2), 1)
    assert quiet.busy_seconds(STAT, {0}, hz=1000) == (pytest.approx(0.43), 1)
    assert quiet.busy_seconds(STAT, {7}) == (pytest.approx(9.5), 2)  # none of them listed: every core


def test_busy_seconds_falls_back_to_the_total_line_and_gives_none_without_cpu_lines() -> None:
    busy, _ = quiet.busy_seconds("cpu  100 0 100 800 0 0 0 0\n")
    assert busy == pytest.approx(2.0)
    assert quiet.busy_seconds("intr 1 2 3\n") is None


def test_load_1min() -> None:
    assert quiet.load_1min("0.76 1.05 0.72 3/94 15505\n") == 0.76
    assert quiet.load_1min("") is None


def test_check_is_others_cores_over_the_wall_time() -> None:
    before = Reading(wall_s=10.0, busy_s=100.0, own_s=5.0, load1=0.5, cores=2)
    after = Reading(wall_s=12.0, busy_s=103.0, own_s=7.0, load1=1.1, cores=2)  # 3 s busy, 2 s ours, in 2 s
    c = quiet.check(before, after)
    assert c.others == pytest.approx(0.5) and c.quiet is False and (c.load_before, c.load_after) == (0.5, 1.1)
    assert c.share() == "50% of a core (25% of the 2 cores)"
    alone = quiet.check(before, Reading(wall_s=12.0, busy_s=102.1, own_s=7.0, load1=0.5, cores=2))
    assert alone.others == pytest.approx(0.05) and alone.quiet is True
    ticks = quiet.check(before, Reading(wall_s=12.0, busy_s=101.9, own_s=7.0, load1=0.5, cores=2))
    assert ticks.others == 0.0  # our own accounting ahead of the kernel's ticks: never below zero
    assert quiet.check(before, after, threshold=0.6).quiet is True
    assert Check.from_dict(c.as_dict()) == c and c.as_dict()["quiet"] is False
    assert c.resolution == pytest.approx(3 * 0.01 / 2)  # (cores + 1) ticks over the wall time


def test_a_round_too_short_for_the_ticks_is_unknown_unless_clearly_loud() -> None:
    before = Reading(wall_s=0.0, busy_s=100.0, own_s=5.0, load1=None, cores=2)
    short = quiet.check(before, Reading(wall_s=0.02, busy_s=100.02, own_s=5.01, load1=None, cores=2))
    assert short.others == pytest.approx(0.5) and short.resolution == pytest.approx(1.5) and short.quiet is None
    calm = quiet.check(before, Reading(wall_s=0.02, busy_s=100.01, own_s=5.01, load1=None, cores=2))
    assert calm.others == pytest.approx(0.0, abs=1e-9) and calm.quiet is None  # too short to say so
    loud = quiet.check(before, Reading(wall_s=0.2, busy_s=100.35, own_s=5.0, load1=None, cores=2))
    assert loud.quiet is False  # 1.75 cores, good to 0.15
    ticks = quiet.check(before, Reading(wall_s=0.01, busy_s=100.04, own_s=5.0, load1=None, cores=2))
    assert ticks.others == 2.0 and ticks.quiet is None  # 4 cores' worth of ticks in 0.01 s: kept to the 2 there are


def test_reading_from_a_fake_proc_and_unknown_without_one(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(STAT)
    (tmp_path / "loadavg").write_text("1.50 1.00 0.50 2/100 42\n")
    r = quiet.reading(tmp_path)
    assert r.busy_s is not None and r.busy_s > 0 and r.load1 == 1.5 and r.own_s > 0
    missing = quiet.reading(tmp_path / "no-proc")
    assert (missing.busy_s, missing.load1, missing.cores) == (None, None, None)
    c = quiet.check(missing, quiet.reading(tmp_path / "no-proc"))
    assert c.others is None and c.quiet is None
    assert quiet.verdict([c]) == "unknown" and quiet.marks([c]) == "unknown" and quiet.refusal({"a": [c]}) is None


def test_verdicts_marks_and_the_refusal_name_the_worst_round() -> None:
    calm, loud, louder = (Check(wall_s=1.0, others=x, cores=2, load_before=None, load_after=None)
                          for x in (0.02, 0.3, 0.9))
    assert quiet.verdict([calm, calm]) == "quiet" and quiet.marks([calm, calm]) == "yes"
    assert quiet.verdict([calm, loud]) == "not quiet" and quiet.marks([calm, loud, louder]) == \
        "round 2: 30%, round 3: 90%"
    assert quiet.refusal({"a": [calm, calm], "b": [calm]}) is None
    assert quiet.refusal({"a": [calm, loud], "b": [louder, calm]}) == \
        "not a result: other processes used 90% of a core (45% of the 2 cores) during round 1 (b)"
    assert quiet.rounds_of({"rounds": [loud.as_dict()]}) == [loud] and quiet.rounds_of({}) == []


# --- a real round beside a busy process -----------------------------------------------------------------------

SPIN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {s}: pass\n"


def round_in_a_child(seconds: float = 1.5) -> Check:
    """A tiny bench round: a child process that computes for `seconds`, waited for (so its CPU is ours)."""
    return quiet.watch(lambda: subprocess.run([sys.executable, "-c", SPIN.format(s=seconds)], check=True))[1]


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="the accounting reads /proc/stat (Linux)")
def test_a_round_beside_a_busy_process_is_marked_and_one_without_it_reports_less() -> None:
    alone = round_in_a_child()
    busy = subprocess.Popen([sys.executable, "-c", "print('ready', flush=True)\n" + SPIN.format(s=20)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout.readline().strip() == "ready"
        beside = round_in_a_child()
    finally:
        busy.kill()
        busy.wait()
    time.sleep(0.2)
    alone = min(alone, round_in_a_child(), key=lambda c: c.others)  # the calmer of two rounds without it
    assert beside.quiet is False, beside  # the busy process kept close to a core busy beside the round
    assert beside.others > 0.3 and alone.others < beside.others, (alone, beside)
    assert "not a result" in quiet.refusal({"round beside a busy process": [beside]})
