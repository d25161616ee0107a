"""The conventions every command follows (docs/cli.md): help text with defaults for every option, -i/-o with
- for stdin/stdout, --device and --dtype, translate and classify answering each line as it arrives from a
pipe, generate over many prompts and samples, and evaluate --json / --hyp-out. The checkpoints are the
catalogue's tiny untrained ones (conftest.py `world`)."""

from __future__ import annotations

import argparse
import io
import json
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from catalogue import World

from tformer.cli import build_parser, main
from tformer.data.lines import line_batches

SRC = str(Path(__file__).resolve().parents[2] / "src")


Command = tuple[tuple[str, ...], argparse.ArgumentParser]


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[Command]:
    """Every (sub)command's parser, by its words, e.g. ("plot", "attention")."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [((*path, name), sub), *commands(sub, (*path, name))]
    return found


def test_every_option_of_every_command_has_help_and_shows_its_default(capsys: pytest.CaptureFixture) -> None:
    parsers = commands(build_parser())
    assert {words[0] for words, _ in parsers} >= {"train", "translate", "evaluate", "generate", "score", "classify",
                                                 "convert", "plot", "report", "serve"}
    for words, parser in parsers:
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert action.help, f"tformer {' '.join(words)}: {action.option_strings or action.dest} has no help"
        assert main([*words, "--help"]) == 0  # every help page prints
        capsys.readouterr()
        formatter = parser._get_formatter()
        for action in parser._actions:
            if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
                assert "default" in formatter._get_help_string(action), (words, action.option_strings)
    assert main(["translate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "- for stdin (default: -)" in text and "(default: float32)" in text and "(default: auto)" in text


def test_every_option_with_a_value_says_what_leaving_it_out_means() -> None:
    """Every option that takes a value and may be left out shows its default in its help: argparse's (the
    HelpFormatter adds it), or the help's own words for one whose default is no value, e.g. --top-k
    (default: none: no top-k filter). Required options, and those of a required choice (convert), have none."""
    for words, parser in commands(build_parser()):
        formatter = parser._get_formatter()
        chosen = {a for group in parser._mutually_exclusive_groups if group.required for a in group._group_actions}
        for action in parser._actions:
            if not action.option_strings or action.nargs == 0 or action.required or action in chosen:
                continue  # flags (store_true, --help), required options, positionals
            text = formatter._expand_help(action)
            assert "default" in text, f"tformer {' '.join(words)} {action.option_strings[-1]}: {text!r}"


@pytest.mark.parametrize("words, shown", [
    (["generate"], ["--top-k K sample among the K likeliest tokens (default: none: no top-k filter)",
                    "(nucleus sampling) (default: none: no nucleus filter)",
                    "(default: none: torch's global generator)"]),
    (["plot", "attention"], ["--layer LAYER only this layer (0-based; default: every layer)",
                             "--head HEAD only this head (0-based; default: every head)"]),
    (["evaluate"], ["(default: all of the split)", "--no-progress no progress bar (default: a bar on stderr"]),
])
def test_help_shows_the_defaults_of_options_without_a_value(words: list[str], shown: list[str],
                                                            capsys: pytest.CaptureFixture) -> None:
    assert main([*words, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert all(s in text for s in shown), text


INFERENCE = [("translate", "s2s"), ("classify", "clf"), ("generate", "gpt"), ("score", "gpt")]


@pytest.mark.parametrize("command, kind", INFERENCE)
def test_every_inference_command_has_device_dtype_input_and_output(command: str, kind: str) -> None:
    parser = dict(commands(build_parser()))[(command,)]
    flags = {flag for action in parser._actions for flag in action.option_strings}
    assert {"--device", "--dtype", "-i", "--input", "-o", "--output"} <= flags


@pytest.mark.parametrize("argv, words", [
    (["--device", "xla"], ("--device='xla' is not allowed", "auto, cpu, cuda, cuda:N or mps")),
    (["--device", "gpu:0"], ("--device='gpu:0' is not a device", "auto, cpu, cuda, cuda:N or mps")),
    (["--dtype", "int4"], ("argument --dtype: invalid choice: 'int4'", "float32")),
])
@pytest.mark.parametrize("command, kind", INFERENCE)
def test_a_bad_device_or_dtype_is_one_line_before_anything_loads(world: World, capsys: pytest.CaptureFixture,
                                                                 command: str, kind: str, argv: list[str],
                                                                 words: tuple[str, ...]) -> None:
    extra = ["--prompt", "x"] if command == "generate" else ["-i", os.devnull]
    assert main([command, "--checkpoint", str(getattr(world, kind)), *extra, *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("tformer: error: ")
    assert all(w in err for w in words), err


def test_a_gpu_that_is_not_there_is_one_line(world: World, capsys: pytest.CaptureFixture) -> None:
    import torch

    wanted = f"cuda:{torch.cuda.device_count()}"  # one past the last GPU (cuda:0 without any)
    assert main(["translate", "--checkpoint", str(world.s2s), "-i", os.devnull, "--device", wanted]) == 2
    err = capsys.readouterr().err
    assert f"--device='{wanted}' but torch sees" in err and err.count("\n") == 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_translate_and_classify_run_in_each_dtype_on_the_cpu(world: World, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture, dtype: str) -> None:
    source = tmp_path / "in.txt"
    source.write_text("the cat\n\nthe red house sees a dog\n", encoding="utf-8")
    assert main(["translate", "--checkpoint", str(world.s2s), "-i", str(source), "--beam", "2", "--device", "cpu",
                 "--dtype", dtype]) == 0
    assert capsys.readouterr().out.count("\n") == 3
    assert main(["classify", "--checkpoint", str(world.clf), "-i", str(source), "--top", "2", "--dtype", dtype]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 3 and all(len(r) == 4 and 0 <= float(r[1]) <= 1 for r in rows)


def test_score_in_each_dtype_is_close_to_float32(world: World, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = tmp_path / "text.txt"
    text.write_text("In the beginning God created the heavens\n", encoding="utf-8")
    totals = {}
    for dtype in ("float32", "bfloat16", "float16"):
        assert main(["score", "--checkpoint", str(world.gpt), "-i", str(text), "--dtype", dtype]) == 0
        totals[dtype] = float(capsys.readouterr().out.splitlines()[-1].split("\t")[1])  # the "all" row
    assert totals["bfloat16"] == pytest.approx(totals["float32"], rel=1e-2)
    assert totals["float16"] == pytest.approx(totals["float32"], rel=1e-3)


def test_dash_means_stdin_and_stdout_and_a_file_output_is_written_whole(world: World, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    text = b"the cat\nthe dog\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text), encoding="utf-8"))
    assert main(["translate", "--checkpoint", str(world.s2s), "-i", "-", "-o", "-", "--beam", "1"]) == 0
    to_stdout = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text), encoding="utf-8"))
    out = tmp_path / "out.txt"
    assert main(["translate", "--checkpoint", str(world.s2s), "-o", str(out), "--beam", "1"]) == 0
    assert capsys.readouterr().out == "" and out.read_text(encoding="utf-8") == to_stdout
    assert to_stdout.count("\n") == 2


# --- streaming: each line answered as it arrives ------------------------------------------------------------


def read_line(process: subprocess.Popen, *, wait_s: float = 300) -> str:
    """The next line the process writes; fails (rather than hanging the suite) if none comes in `wait_s`."""
    ready, _, _ = select.select([process.stdout], [], [], wait_s)
    assert ready, "no answer while stdin was still open"
    return process.stdout.readline()


@pytest.mark.parametrize("command, kind", [("translate", "s2s"), ("classify", "clf")])
def test_a_line_written_into_an_open_pipe_is_answered_before_the_next(world: World, command: str,
                                                                      kind: str) -> None:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "tformer", command, "--checkpoint", str(getattr(world, kind)), "--device", "cpu"]
    process = subprocess.Popen(argv + (["--beam", "1"] if command == "translate" else []), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, bufsize=1)
    try:
        answers = []
        for line in ("the cat sees a dog", "", "a red house"):
            process.stdin.write(line + "\n")
            process.stdin.flush()
            answers.append(read_line(process))  # stdin is still open: the answer came line by line
        process.stdin.write("the big dog")  # a last line without its "\n" counts, at the end of input
        process.stdin.close()
        answers.append(process.stdout.read())
        assert process.wait(timeout=300) == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
    assert len(answers) == 4 and all(a.endswith("\n") and a.count("\n") == 1 for a in answers)
    if command == "translate":
        assert answers[1] == "\n"  # an empty line stays empty


def pipe_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """stdin as a real pipe holding `data`, closed at the writing end."""
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    monkeypatch.setattr(sys, "stdin", os.fdopen(read, "r", encoding="utf-8"))


def test_lines_from_a_pipe_come_in_batches_of_what_is_there(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe_stdin(monkeypatch, "\ufeffone\r\ntwo\u2028still two\nthree\nfour".encode())
    batches = list(line_batches("-", max_batch=2))
    # all there at once: full batches; a last line without its "\n" is whole only at the end of input
    assert batches == [["one", "two\u2028still two"], ["three"], ["four"]]
    sys.stdin.close()


@pytest.mark.parametrize("data, message", [
    (b"ok\nfine\n\xffbad\n", "stdin:3: not valid UTF-8 (byte 0xff at column 1); the text must be UTF-8"),
    (b"ok\nthe caf\xc3", "stdin:2: not valid UTF-8 (byte 0xc3 at column 8); the text must be UTF-8"),
])
def test_bad_bytes_from_a_pipe_are_named_by_their_place_in_all_of_stdin(monkeypatch: pytest.MonkeyPatch,
                                                                        data: bytes, message: str) -> None:
    pipe_stdin(monkeypatch, data)
    with pytest.raises(ValueError) as e:
        list(line_batches(None, max_batch=1))
    assert str(e.value) == message
    sys.stdin.close()


def test_a_long_line_from_a_pipe_is_named_by_its_line_in_all_of_stdin(world: World, capsys: pytest.CaptureFixture,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pipe_stdin(monkeypatch, ("the cat\n" * 3 + "the cat " * 60 + "\n").encode())
    assert main(["translate", "--checkpoint", str(world.s2s), "--beam", "1", "--batch-size", "1"]) == 2
    out, err = capsys.readouterr()
    assert out.count("\n") == 3  # the lines before it were answered as they came
    assert "stdin:4: the line is" in err and "longer than the model's context max_len=32" in err


# --- generate ---------------------------------------------------------------------------------------------


def test_generate_many_prompts_and_samples_as_json(world: World, capsys: pytest.CaptureFixture) -> None:
    argv = ["generate", "--checkpoint", str(world.gpt), "--prompt", "In the", "--prompt", "God", "-n", "3",
            "--max-new-tokens", "6", "--seed", "7", "--no-stop", "--json"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["prompt"], r["prompt_number"], r["sample"], r["seed"]) for r in rows] == [
        ("In the", 1, 1, 7), ("In the", 1, 2, 8), ("In the", 1, 3, 9), ("God", 2, 1, 10), ("God", 2, 2, 11),
        ("God", 2, 3, 12)]
    assert len({r["text"] for r in rows}) > 1  # each sample drawn with its own seed
    assert main(["generate", "--checkpoint", str(world.gpt), "--prompt", "In the", "--max-new-tokens", "6",
                 "--seed", "7", "--no-stop"]) == 0
    assert capsys.readouterr().out == "In the" + rows[0]["text"] + "\n"  # sample 1 is what --seed alone gives


def test_generate_reads_prompts_from_stdin_or_a_file(world: World, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    common = ["--max-new-tokens", "4", "--temperature", "0", "--no-stop"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"In the\nGod\n"), encoding="utf-8"))
    assert main(["generate", "--checkpoint", str(world.gpt), *common]) == 0
    from_stdin = capsys.readouterr().out
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("In the\nGod\n", encoding="utf-8")
    out = tmp_path / "samples.txt"
    assert main(["generate", "--checkpoint", str(world.gpt), "-i", str(prompts), "-o", str(out), *common]) == 0
    assert capsys.readouterr().out == "" and out.read_text(encoding="utf-8") == from_stdin
    first, second = from_stdin.split("\n\n")  # a blank line between samples
    assert first.startswith("In the") and len(first) == len("In the") + 4 and second.startswith("God")


# --- evaluate --------------------------------------------------------------------------------------------


@pytest.fixture
def run_dir(world: World, tmp_path: Path) -> Path:
    """The catalogue's translator as the `best` of a run, with the recipe beside it."""
    shutil.copytree(world.s2s, tmp_path / "run" / "best")
    shutil.copy(world.recipe, tmp_path / "run" / "recipe.yaml")
    return tmp_path / "run"


def test_evaluate_json_and_hypotheses(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    hyps = tmp_path / "out" / "valid.hyp"
    assert main(["evaluate", "--checkpoint", str(run_dir / "best"), "--split", "valid", "--beam", "2", "--json",
                 "--hyp-out", str(hyps)]) == 0
    report = json.loads(capsys.readouterr().out)
    valid = yaml.safe_load(Path(run_dir / "recipe.yaml").read_text())["data"]["valid"]
    assert report["sentences"] == len(Path(valid).read_text().splitlines()) == 8
    assert report["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert report["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:")
    assert report["decode"]["beam"] == 2 and report["decode"]["max_len_b"] == 5 and report["split"] == "valid"
    assert 0 <= report["bleu"] <= 100 and 0 <= report["degenerate"] <= 1
    assert len(hyps.read_text(encoding="utf-8").split("\n")) == 8 + 1
    report_file = tmp_path / "report.json"
    assert main(["evaluate", "--checkpoint", str(run_dir / "best"), "--split", "valid", "--beam", "2", "--json",
                 "-o", str(report_file)]) == 0
    assert capsys.readouterr().out == "" and json.loads(report_file.read_text()) == report


def test_the_lines_before_a_bad_line_of_a_pipe_are_answered_first(world: World, capsys: pytest.CaptureFixture,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 lines piped at once, line 600 not UTF-8: lines 1-599 are translated and printed, then the one
    line naming line 600, exit 2; the answers are those the good lines get alone."""
    good = b"the cat sees a dog\n" * 599
    pipe_stdin(monkeypatch, good + b"the \xff dog\n" + b"a red house\n" * 400)
    argv = ["translate", "--checkpoint", str(world.s2s), "--beam", "1", "--batch-size", "64"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    sys.stdin.close()
    assert out.count("\n") == 599
    assert err == "tformer: error: stdin:600: not valid UTF-8 (byte 0xff at column 5); the text must be UTF-8\n"
    pipe_stdin(monkeypatch, good)
    assert main(argv) == 0
    assert capsys.readouterr().out == out
    sys.stdin.close()
