"""benchmarks.continuous_profile --quick: a tiny random GPT's continuous batch, every request admitted once and
run to its length, each method's calls counted, the same run again as a TextStream would; and the methods of
`Running` unwrapped afterwards."""

import json
from pathlib import Path

from benchmarks.continuous_profile import METHODS, main
from tformer.decoding.continuous import Running


def test_it_counts_every_request_and_method_and_unwraps_them(tmp_path: Path, capsys) -> None:
    before = {name: getattr(Running, name) for name in METHODS}
    result = main(["--quick", "--rows", "4", "--out", str(tmp_path / "profile.json")])
    assert {name: getattr(Running, name) for name in METHODS} == before
    methods = result["methods"]
    assert methods["admit"]["calls"] == 6 and methods["_join"]["calls"] == 6  # none ends at its first token
    assert 2 * 6 <= result["tokens"] <= 8 * 6  # stop is off: each runs to its max_new_tokens, 2 to 8
    assert methods["_draw"]["calls"] == result["tokens"]  # one draw a token
    assert result["steps"] == methods["step"]["calls"] > 0 and result["tokens_per_s"] > 0
    assert json.loads((tmp_path / "profile.json").read_text())["tokens"] == result["tokens"]
    assert "| admit |" in capsys.readouterr().out
    streamed = main(["--quick", "--rows", "4", "--stream"])
    assert streamed["tokens"] == result["tokens"]  # the same seeded requests
