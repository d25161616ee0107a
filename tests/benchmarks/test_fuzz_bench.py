"""benchmarks/fuzz.py --quick: both contracts' properties run a few examples each, from the same functions the
property tests check (tests/properties/contracts.py), and the summary counts every outcome."""

import io
from contextlib import redirect_stdout

from benchmarks import fuzz


def test_fuzz_quick() -> None:
    with redirect_stdout(io.StringIO()) as printed:
        summary = fuzz.main(["--quick", "--seed", "0"])
    assert summary["breaches"] == 0 and summary["seed"] == 0
    names = ["train translation", "train lm", *(f"serve /{e}" for e in fuzz.ENDPOINTS)]
    assert list(summary["results"]) == names
    assert all(sum(r["outcomes"].values()) == 5 for r in summary["results"].values())
    assert "| serve /translate | 5 |" in printed.getvalue()
