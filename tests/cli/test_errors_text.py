"""The bad-input catalogue (docs/errors.md), round two: text input and output. Bad bytes on stdin and in
files, lines longer than the model's context, non-finite and out-of-range numbers on the command line, and
outputs that cannot be written; each gives one line and exit 2 with the disk as it was (catalogue.run_case).
The correct results of this class (one line out for each line in, whatever the line holds; `--output` that
is a symbolic link, a FIFO or a pipe) are tested below the cases."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import threading
from pathlib import Path

import pytest
import torch
from catalogue import (
    LONG,
    NOT_UTF8,
    Case,
    Ctx,
    World,
    edited_config,
    generate,
    in_catalogue,
    run_case,
    score,
    some_input,
    translate,
)

from tformer.cli import main


def stdin(c: Ctx, data: bytes) -> None:
    """Give the command `data` on stdin, as bytes, the way a pipe does."""
    c.monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def piped(c: Ctx, data: bytes, argv: list[str]) -> list[str]:
    stdin(c, data)
    return argv


def closed_stdin(c: Ctx, argv: list[str]) -> list[str]:
    """Run with stdin closed (`<&-`): Python's sys.stdin is None."""
    c.monkeypatch.setattr(sys, "stdin", None)
    return argv


def classify(c: Ctx, *args: str) -> list[str]:
    return ["classify", "--checkpoint", str(c.w.clf), *args]


def plot_attention(c: Ctx, *args: str) -> list[str]:
    return ["plot", "attention", "--checkpoint", str(c.w.gpt), "--out", f"{c.tmp}/a.png", *args]


def link_into_read_only(c: Ctx) -> str:
    """A symbolic link to an existing file in a read-only directory (where no atomic rename can happen)."""
    directory = Path(c.readonly("ro"))
    directory.chmod(0o755)
    (directory / "out.txt").write_text("OLD\n")
    directory.chmod(0o555)
    (c.tmp / "link.txt").symlink_to(directory / "out.txt")
    return str(c.tmp / "link.txt")


TWO_LONG = f"the cat\n{LONG}\n".encode()
HUGE_LINE = "the cat " * 40_000  # 320,000 characters: more than max_len=32 tokens at any tokenization


def failing_at(c: Ctx, target: str, error: BaseException, argv: list[str]) -> list[str]:
    """`argv`, run with the function `target` (module.name) raising `error`, as an allocation would."""
    def fail(*args: object, **kwargs: object) -> None:
        raise error

    module, name = target.rsplit(".", 1)
    importlib.import_module(module)
    c.monkeypatch.setattr(sys.modules[module], name, fail)
    return argv


CPU_ALLOC = RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you "
                         "tried to allocate 160000000000 bytes. Error code 12 (Cannot allocate memory)")

CASES = [
    # case 1: bytes that are not UTF-8, on stdin as in a file, and where they are
    Case("translate-stdin-not-utf8", lambda c: piped(c, NOT_UTF8, translate(c)),
         ("stdin:1: not valid UTF-8 (byte 0xff at column 9); the text must be UTF-8",)),
    Case("classify-stdin-not-utf8", lambda c: piped(c, NOT_UTF8, classify(c)),
         ("stdin:1: not valid UTF-8 (byte 0xff at column 9); the text must be UTF-8",)),
    Case("translate-stdin-dash-not-utf8", lambda c: piped(c, b"ok\n" + NOT_UTF8, translate(c, "--input", "-")),
         ("stdin:2: not valid UTF-8 (byte 0xff at column 9); the text must be UTF-8",)),
    Case("translate-input-not-utf8-line-3",
         lambda c: translate(c, "--input", c.file("in.txt", b"the cat\nthe dog\n" + NOT_UTF8)),
         ("{tmp}/in.txt:3: not valid UTF-8 (byte 0xff at column 9); the text must be UTF-8",)),
    Case("translate-stdin-cut-character", lambda c: piped(c, b"the caf\xc3", translate(c)),
         ("stdin:1: not valid UTF-8 (byte 0xc3 at column 8); the text must be UTF-8",)),
    Case("translate-stdin-latin1", lambda c: piped(c, "the café\n".encode("latin-1"), translate(c)),
         ("stdin:1: not valid UTF-8 (byte 0xe9 at column 8); the text must be UTF-8",)),
    Case("score-file-not-utf8", lambda c: ["score", "--checkpoint", str(c.w.gpt), c.file("s.txt", NOT_UTF8)],
         ("{tmp}/s.txt:1: not valid UTF-8 (byte 0xff at column 9); the text must be UTF-8",)),
    Case("translate-stdin-closed", lambda c: closed_stdin(c, translate(c)),
         ("there is no stdin to read; give --input FILE",)),
    Case("translate-input-is-a-directory", lambda c: translate(c, "--input", str(c.tmp)),
         ("input file {tmp} is a directory",)),
    # case 3: a line longer than the model's context is refused (or cut with --truncate), never cut silently
    Case("translate-line-longer-than-context",
         lambda c: translate(c, "--input", c.file("in.txt", TWO_LONG), "--output", c.file("out.txt", "OLD\n")),
         ("{tmp}/in.txt:2: the line is 120 tokens", "max_len=32", "cut it to the context on purpose (--truncate)")),
    Case("translate-stdin-line-longer-than-context", lambda c: piped(c, TWO_LONG, translate(c)),
         ("stdin:2: the line is 120 tokens, longer than the model's context max_len=32; shorten it, or cut it to the "
          "context on purpose (--truncate)",)),
    Case("classify-line-longer-than-context", lambda c: classify(c, "--input", c.file("in.txt", TWO_LONG)),
         ("{tmp}/in.txt:2: the line is 60 tokens", "max_len=32, which leaves 30 for text",
          "cut it to the context on purpose (--truncate)")),
    Case("score-line-number-counts-blank-lines",
         lambda c: score(c, "p.tsv", f"the cat\tdie Katze\n\n{LONG}\tder Hund\n"),
         ("{tmp}/p.tsv:3: the source is 120 tokens",)),
    Case("score-pair-without-tab-after-blank-lines", lambda c: score(c, "p.tsv", "\nthe cat\tdie Katze\n\nthe dog\n"),
         ("{tmp}/p.tsv:4: expected source<TAB>target",)),
    # round four, memory and inputs at scale: a line, an input, a model, an allocation too large
    Case("translate-input-dev-zero", lambda c: translate(c, "--input", "/dev/zero"),
         ("/dev/zero:1: the line is longer than 4194304 bytes (4 MiB), the most a line may hold",)),
    Case("translate-stdin-line-longer-than-any-tokenization",
         lambda c: piped(c, f"the cat\n{HUGE_LINE}\n".encode(), translate(c)),
         ("stdin:2: the line is 320000 characters, more than the model's context max_len=32 can hold (3200, at 100 "
          "characters a token); shorten it, or cut it to the context on purpose (--truncate)",)),
    Case("classify-line-longer-than-any-tokenization",
         lambda c: classify(c, "--input", c.file("in.txt", f"{HUGE_LINE}\n")),
         ("{tmp}/in.txt:1: the line is 320000 characters", "(--truncate)")),
    Case("generate-prompt-longer-than-any-tokenization", lambda c: generate(c, prompt=HUGE_LINE),
         ("the prompt is 320000 characters, more than the model's context max_len=32 can hold",)),
    Case("score-source-longer-than-any-tokenization", lambda c: score(c, "p.tsv", f"{HUGE_LINE}\tdie Katze\n"),
         ("{tmp}/p.tsv:1: the source is 320000 characters",)),
    Case("translate-checkpoint-larger-than-memory",
         lambda c: translate(c, *some_input(c), checkpoint=edited_config(c, c.w.s2s, d_ff=4_000_000_000)),
         ("the model needs ", " GiB for its weights (", "d_ff=4000000000", "GiB this machine has free")),
    Case("train-model-larger-than-memory", lambda c: c.train("model.overrides.d_ff=4000000000"),
         ("the model needs ", "d_ff=4000000000", "GiB this machine has free")),
    Case("translate-allocation-fails-decoding",
         lambda c: failing_at(c, "tformer.inference.translate.best_tokens", CPU_ALLOC, translate(c, *some_input(c))),
         ("out of memory while decoding batch 1 (1 sentences) (it asked for 149.0 GiB more); give it less at a time",)),
    Case("translate-allocation-fails-loading",
         lambda c: failing_at(c, "tformer.inference.loaded.load_weights", MemoryError("std::bad_alloc"),
                              translate(c, *some_input(c))),
         ("out of memory while loading the model; give it less at a time",)),
    Case("classify-cuda-out-of-memory",
         lambda c: failing_at(c, "tformer.inference.classify.collate_texts",
                              torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)"),
                              classify(c, *some_input(c))),
         ("out of memory while classifying batch 1 (1 texts) (it asked for 2.00 GiB more)",)),
    Case("generate-allocation-fails-unnamed",
         lambda c: failing_at(c, "tformer.cli.shared.unknown_warner", RuntimeError("std::bad_alloc"),
                              generate(c, "--max-new-tokens", "1")),
         ("out of memory; give it less at a time",)),
    # case 10: numbers on the command line: finite, in range, refused while the arguments are parsed
    Case("translate-lenpen-nan", lambda c: translate(c, "--lenpen", "nan"),
         ("argument --lenpen: 'nan' is not a finite number",)),
    Case("translate-lenpen-inf", lambda c: translate(c, "--lenpen=-inf"),
         ("argument --lenpen: '-inf' is not a finite number",)),
    Case("translate-lenpen-overflow", lambda c: translate(c, "--lenpen", "1e999"),
         ("argument --lenpen: '1e999' is not a finite number",)),
    Case("evaluate-lenpen-nan", lambda c: ["evaluate", "--checkpoint", str(c.w.s2s), "--lenpen", "NaN"],
         ("argument --lenpen: 'NaN' is not a finite number",)),
    Case("translate-beam-overflow", lambda c: translate(c, "--beam", "99999999999999999999"),
         ("argument --beam: 99999999999999999999 is out of range", "[-2**63, 2**63 - 1]")),
    Case("generate-temperature-nan", lambda c: generate(c, "--temperature", "nan"),
         ("argument --temperature: 'nan' is not a finite number",)),
    Case("generate-temperature-inf", lambda c: generate(c, "--temperature", "inf"),
         ("argument --temperature: 'inf' is not a finite number",)),
    Case("generate-top-p-nan", lambda c: generate(c, "--top-p", "nan"),
         ("argument --top-p: 'nan' is not a finite number",)),
    Case("generate-seed-overflow", lambda c: generate(c, "--seed", "99999999999999999999999"),
         ("argument --seed: 99999999999999999999999 is out of range; give an integer in [0, 2**64 - 1]",)),
    Case("generate-seed-negative", lambda c: generate(c, "--seed", "-1"),
         ("argument --seed: -1 is out of range; give an integer in [0, 2**64 - 1]",)),
    Case("generate-max-new-tokens-overflow", lambda c: generate(c, "--max-new-tokens", str(2**63)),
         (f"argument --max-new-tokens: {2**63} is out of range",)),
    Case("generate-top-k-overflow", lambda c: generate(c, "--top-k", str(10**30)),
         (f"argument --top-k: {10**30} is out of range",)),
    Case("classify-top-overflow", lambda c: classify(c, "--top", str(10**30)),
         (f"argument --top: {10**30} is out of range",)),
    Case("plot-layer-overflow", lambda c: plot_attention(c, "--text", "In", "--layer", str(2**64)),
         (f"argument --layer: {2**64} is out of range",)),
    # text arguments that are not UTF-8 (the shell hands the bytes over as they are)
    Case("generate-prompt-not-utf8", lambda c: generate(c, prompt="In \udcff"),
         ("argument --prompt: not valid UTF-8 (byte 0xff at character 4)",)),
    Case("plot-text-not-utf8", lambda c: plot_attention(c, "--text", "caf\udce9"),
         ("argument --text: not valid UTF-8 (byte 0xe9 at character 4)",)),
    # case 22's neighbours: an output that cannot be written, found before the work
    Case("translate-output-symlink-into-read-only",
         lambda c: translate(c, "--input", c.file("in.txt", "the cat\n"), "--output", link_into_read_only(c)),
         ("--output {tmp}/link.txt: directory {tmp}/ro is not writable",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture) -> None:
    run_case(case, Ctx(world, tmp_path, monkeypatch), capsys)


def test_every_case_is_in_the_catalogue() -> None:
    assert in_catalogue(CASES) == []


def test_ids_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


# --- the correct results --------------------------------------------------------------------------------

SEPARATORS = "the cat\u2028sees\nthe\x0cdog\nred\x85cat\x1cruns\u2029\n"  # 3 lines, by "\n" alone


def run(argv: list[str], capsys: pytest.CaptureFixture, data: bytes | None = None,
        monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    if data is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["translate", "classify"])
def test_one_line_out_for_each_line_in(command: str, world: World, tmp_path: Path, capsys: pytest.CaptureFixture,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Case 2: U+2028, U+2029, form feed, U+0085 and \\x1c inside lines; stdin and --input alike, and each
    answer the one the line gets alone."""
    checkpoint = str(world.s2s if command == "translate" else world.clf)
    file = tmp_path / "in.txt"
    file.write_text(SEPARATORS, encoding="utf-8")
    from_file = run([command, "--checkpoint", checkpoint, "--input", str(file)], capsys)
    from_stdin = run([command, "--checkpoint", checkpoint], capsys, SEPARATORS.encode(), monkeypatch)
    assert from_file == from_stdin
    assert from_file.count("\n") == 3 and from_file.endswith("\n")
    for line, answer in zip(SEPARATORS.split("\n")[:3], from_file.split("\n")[:3], strict=True):
        alone = run([command, "--checkpoint", checkpoint], capsys, line.encode() + b"\r\n", monkeypatch)
        assert alone == answer + "\n"


def test_truncate_cuts_on_purpose(world: World, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Case 3: --truncate answers a long line from its first max_len tokens, one line out."""
    file = tmp_path / "in.txt"
    file.write_bytes(TWO_LONG)
    for argv in (["translate", "--checkpoint", str(world.s2s)], ["classify", "--checkpoint", str(world.clf)]):
        assert run([*argv, "--input", str(file), "--truncate"], capsys).count("\n") == 2


def test_score_numbers_the_lines_of_the_file(world: World, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    file = tmp_path / "s.txt"
    file.write_text("\nIn the beginning\n\nthe earth\n", encoding="utf-8")
    rows = run(["score", "--checkpoint", str(world.gpt), str(file)], capsys).splitlines()
    assert [row.split("\t")[0] for row in rows[1:]] == ["2", "4", "all"]


def test_temperature_nan_fails_before_anything_is_printed(world: World, capsys: pytest.CaptureFixture) -> None:
    """Case 10: the prompt used to be printed, then the error."""
    assert main(["generate", "--checkpoint", str(world.gpt), "--prompt", "In", "--temperature", "nan"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1


def test_the_largest_seed_works(world: World, capsys: pytest.CaptureFixture) -> None:
    argv = ["generate", "--checkpoint", str(world.gpt), "--prompt", "In", "--max-new-tokens", "3"]
    assert run([*argv, "--seed", str(2**64 - 1)], capsys) == run([*argv, "--seed", str(2**64 - 1)], capsys)


def translate_to(world: World, tmp_path: Path, output: str) -> int:
    file = tmp_path / "in.txt"
    file.write_text("the cat\nthe dog\n", encoding="utf-8")
    return main(["translate", "--checkpoint", str(world.s2s), "--input", str(file), "--output", output])


def test_output_through_a_symlink_writes_its_target(world: World, tmp_path: Path) -> None:
    """Case 22: the link stays a link; its target (mode kept) gets the translations."""
    target = tmp_path / "real.txt"
    target.write_text("OLD\n")
    target.chmod(0o640)
    (tmp_path / "link.txt").symlink_to("real.txt")
    assert translate_to(world, tmp_path, str(tmp_path / "link.txt")) == 0
    assert (tmp_path / "link.txt").is_symlink()
    assert target.read_text().count("\n") == 2 and target.stat().st_mode & 0o777 == 0o640


def test_output_to_a_fifo_is_written_in_place(world: World, tmp_path: Path) -> None:
    """Case 22: a reader waiting on the FIFO gets the translations; the FIFO stays a FIFO."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    try:
        assert translate_to(world, tmp_path, str(fifo)) == 0
    finally:
        while reader.is_alive():  # unblock a reader still waiting (a blocking open would wait for one forever)
            with contextlib.suppress(OSError):  # no reader yet, or none any more
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            reader.join(0.05)
    assert got[0].count(b"\n") == 2 and fifo.is_fifo()


def test_output_to_a_pipe_by_dev_fd(world: World, tmp_path: Path) -> None:
    """Case 22: bash's `--output >(cmd)` names /dev/fd/N, a pipe."""
    read_end, write_end = os.pipe()
    try:
        assert translate_to(world, tmp_path, f"/dev/fd/{write_end}") == 0
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        assert f.read().count(b"\n") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_plot_out_through_a_symlink(world: World, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "link.png").symlink_to("real.png")
    run(["plot", "attention", "--checkpoint", str(world.gpt), "--text", "In", "--out", str(tmp_path / "link.png")],
        capsys)
    assert (tmp_path / "link.png").is_symlink() and (tmp_path / "real.png").read_bytes().startswith(b"\x89PNG")


def test_a_huge_line_is_cut_with_truncate(world: World, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A line longer than any tokenization fits is cut to the context with --truncate, as a long line is."""
    file = tmp_path / "in.txt"
    file.write_text(f"{HUGE_LINE}\nthe cat\n", encoding="utf-8")
    for argv in (["translate", "--checkpoint", str(world.s2s), "--beam", "1"],
                 ["classify", "--checkpoint", str(world.clf)]):
        out = run([*argv, "--input", str(file), "--truncate"], capsys)
        assert out.count("\n") == 2
        assert out.split("\n")[0] == run([*argv, "--input", c_file(tmp_path, HUGE_LINE[:3200]), "--truncate"],
                                         capsys).split("\n")[0]


def c_file(tmp_path: Path, text: str) -> str:
    (tmp_path / "one.txt").write_text(text + "\n", encoding="utf-8")
    return str(tmp_path / "one.txt")


def test_a_bug_that_is_not_about_memory_keeps_its_traceback(world: World, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Only allocation failures are one line: any other RuntimeError is a bug and goes on."""
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")

    monkeypatch.setattr(sys.modules["tformer.inference.translate"], "best_tokens", fail)
    file = tmp_path / "in.txt"
    file.write_text("the cat\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        main(["translate", "--checkpoint", str(world.s2s), "--input", str(file)])
