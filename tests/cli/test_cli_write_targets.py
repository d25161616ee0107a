"""Every command that writes a file or a folder the user names, over the same special targets (issue 31,
class 1: every file a command writes goes through the one writer, `tformer.files`).

A file (`-o`, `--hyp-out`, `recipes copy DEST`): a new file gets the bytes the command writes to stdout
with `-`; a symbolic link stays a link and its target is written (a dangling one: the file it names is
made); a FIFO's reader gets the bytes and it stays a FIFO; /dev/null stays the device; a 0600 file keeps
its mode; `-` is stdout (no file named -); a missing folder on the way is made (by `recipes copy`, refused:
catalogue case 196). Refused with one line and exit 2, nothing on disk made or changed: an empty name, a
missing folder named with a trailing slash, a directory.

A folder (`--out-dir`, `convert --out`, `average --out`): made if missing (with a trailing slash too); a
link to a folder, or a dangling one, stays a link and its target holds the files. Refused the same way: an
empty name, `-` (standard output holds no folder), and a file, a FIFO or a device where the folder should be.

The checkpoints are the catalogue's tiny ones (`world`, built once a session); each command's reference
output is made once, to a plain new file.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from catalogue import World, snapshot

from tformer import recipes
from tformer.cli import main

RESULTS = Path(__file__).parents[2] / "docs" / "bench" / "complexity" / "results.json"
DEMO = recipes.path("demo").read_bytes()


class Inputs:
    """What the commands read, outside the folder each case writes in: a text file, a translator's run
    (`best` and its recipe, for evaluate) and a run holding only metrics.jsonl (curves, report)."""

    def __init__(self, world: World, root: Path) -> None:
        self.world, self.text = world, root / "in.txt"
        self.text.write_text("the cat\nthe big dog\n", encoding="utf-8")
        self.run = root / "run"
        shutil.copytree(world.s2s, self.run / "best")
        shutil.copy(world.recipe, self.run / "recipe.yaml")
        self.gpt_copy = other_step(world.gpt, root / "gpt-copy")  # a second checkpoint to average
        self.metrics = root / "metrics"
        self.metrics.mkdir()
        (self.metrics / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0, "lr": 0.001}\n'
                                                    '{"step": 2, "loss": 2.5, "lr": 0.001}\n'
                                                    '{"step": 2, "eval/valid_loss": 2.7}\n')
        self.references: dict[str, bytes] = {}


def other_step(checkpoint: Path, path: Path) -> Path:
    """A checkpoint of the same model and tokenizer as `checkpoint` with other weights (a later step's)."""
    from tformer.checkpoints import load_model
    from tformer.tokenization import load_tokenizer
    from tformer.training.checkpoint import save_checkpoint

    model, config = load_model(checkpoint)
    with torch.no_grad():
        next(model.parameters()).add_(0.5)
    save_checkpoint(path, model=model, config=config, tokenizer=load_tokenizer(checkpoint / "tokenizer"))
    return path


@pytest.fixture(scope="module")
def inputs(world: World, tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    return Inputs(world, tmp_path_factory.mktemp("inputs"))


# --- the commands: name -> (argv for target T, suffix of a file it names) ------------------------------

FILE_COMMANDS: dict[str, tuple[Callable[[Inputs, str], list[str]], str]] = {
    "translate": (lambda i, t: ["translate", "--checkpoint", str(i.world.s2s), "-i", str(i.text), "--beam", "1",
                                "-o", t], ".txt"),
    "evaluate-output": (lambda i, t: ["evaluate", "--checkpoint", str(i.run / "best"), "--split", "valid", "--limit",
                                      "2", "--beam", "1", "-o", t], ".txt"),
    "evaluate-hyp-out": (lambda i, t: ["evaluate", "--checkpoint", str(i.run / "best"), "--split", "valid",
                                       "--limit", "2", "--beam", "1", "--hyp-out", t, "-o", os.devnull], ".txt"),
    "generate": (lambda i, t: ["generate", "--checkpoint", str(i.world.gpt), "--prompt", "In", "--max-new-tokens", "3",
                               "--seed", "0", "-o", t], ".txt"),
    "score": (lambda i, t: ["score", "--checkpoint", str(i.world.gpt), "-i", str(i.text), "-o", t], ".txt"),
    "classify": (lambda i, t: ["classify", "--checkpoint", str(i.world.clf), "-i", str(i.text), "-o", t], ".txt"),
    "plot-attention": (lambda i, t: ["plot", "attention", "--checkpoint", str(i.world.gpt), "--text", "In", "-o", t],
                       ".png"),
    "plot-curves": (lambda i, t: ["plot", "curves", str(i.metrics), "-o", t], ".png"),
    "report": (lambda i, t: ["report", str(i.metrics), "-o", t], ".html"),
    "recipes-copy": (lambda i, t: ["recipes", "copy", "demo", t, "--overwrite"], ".yaml"),
}

FOLDER_COMMANDS: dict[str, tuple[Callable[[Inputs, str], list[str]], set[str]]] = {  # the files written in it
    "plot-positions": (lambda i, t: ["plot", "positions", "--max-len", "8", "--d-model", "8", "--heads", "2",
                                     "--out-dir", t],
                       {"positions-sinusoidal.png", "positions-rope.png", "positions-alibi.png"}),
    "plot-complexity": (lambda i, t: ["plot", "complexity", "--results", str(RESULTS), "--out-dir", t],
                        {"complexity-time_vs_n.png", "complexity-memory_vs_n.png", "complexity-time_vs_d.png"}),
    "convert-from-hf": (lambda i, t: ["convert", "--from-hf", str(i.world.hf), "--out", t],
                        {"config.yaml", "manifest.json", "model.safetensors"}),
    "convert-to-hf": (lambda i, t: ["convert", "--to-hf", str(i.world.gpt), "--out", t],
                      {"config.json", "model.safetensors"}),
    "average": (lambda i, t: ["average", str(i.world.gpt), str(i.gpt_copy), "--out", t, "--overwrite"],
                {"config.yaml", "manifest.json", "model.safetensors", "tokenizer"}),
}


def run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, bytes, str]:
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err.decode("utf-8", "replace")


def reference(command: str, inputs: Inputs, tmp_path_factory: pytest.TempPathFactory,
              capsys: pytest.CaptureFixture) -> bytes:
    """The bytes `command` writes to a plain new file (made once)."""
    if command not in inputs.references:
        build, suffix = FILE_COMMANDS[command]
        path = tmp_path_factory.mktemp("reference") / f"out{suffix}"
        code, _, err = run(build(inputs, str(path)), capsys)
        assert code == 0, err
        inputs.references[command] = path.read_bytes()
        assert inputs.references[command]
    return inputs.references[command]


def same(written: bytes, expected: bytes) -> bool:
    """The bytes are the reference's, but for the minute a report page names as when it was made."""
    stamp = re.compile(rb"made by tformer report on [^<]*")
    return stamp.sub(b"", written) == stamp.sub(b"", expected)


def refused(result: tuple[int, bytes, str], *words: str) -> None:
    """Exit 2, one line `tformer: error: ...` holding `words`, nothing on stdout."""
    code, out, err = result
    assert out == b"" and code == 2 and err.startswith("tformer: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and all(w in err for w in words), err


def read_fifo(fifo: Path, run_command: Callable[[], tuple[int, bytes, str]]) -> tuple[tuple[int, bytes, str], bytes]:
    """Run the command while a thread reads `fifo`; the reader is let go if the command never opened it."""
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    try:
        result = run_command()
    finally:
        reader.join(timeout=30)
        if reader.is_alive():  # never opened for writing: open and close it so the reader ends
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            reader.join(timeout=10)
    return result, got[0] if got else b""


# --- a file --------------------------------------------------------------------------------------------

FILE_TARGETS = ["new-file", "dangling-link", "link-to-a-file", "fifo", "dev-null", "private-file", "dash",
                "missing-parent", "empty", "missing-folder-with-slash", "a-directory"]


@pytest.mark.parametrize("target", FILE_TARGETS)
@pytest.mark.parametrize("command", list(FILE_COMMANDS))
def test_a_file_output(command: str, target: str, inputs: Inputs, tmp_path: Path,
                       tmp_path_factory: pytest.TempPathFactory, capsysbinary: pytest.CaptureFixture,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    build, suffix = FILE_COMMANDS[command]
    expected = reference(command, inputs, tmp_path_factory, capsysbinary)
    monkeypatch.chdir(tmp_path)  # a file named "-" or "" would land here
    out = tmp_path / f"out{suffix}"
    argv = lambda t: build(inputs, t)  # noqa: E731

    if target == "new-file":
        code, _, err = run(argv(str(out)), capsysbinary)
        assert code == 0, err
        assert same(out.read_bytes(), expected) and [p.name for p in tmp_path.iterdir()] == [out.name]
    elif target in ("dangling-link", "link-to-a-file"):
        real = tmp_path / f"real{suffix}"
        if target == "link-to-a-file":
            real.write_bytes(b"old\n")
            real.chmod(0o640)
        out.symlink_to(real.name)
        code, _, err = run(argv(str(out)), capsysbinary)
        assert code == 0, err
        assert out.is_symlink() and os.readlink(out) == real.name  # the link kept, its target written
        assert same(real.read_bytes(), expected) and sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name,
                                                                                                       real.name])
        if target == "link-to-a-file":
            assert stat.S_IMODE(real.stat().st_mode) == 0o640
    elif target == "fifo":
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        (code, _, err), got = read_fifo(fifo, lambda: run(argv(str(fifo)), capsysbinary))
        assert code == 0, err
        assert same(got, expected) and fifo.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["fifo"]
    elif target == "dev-null":
        code, _, err = run(argv(os.devnull), capsysbinary)
        assert code == 0, err
        assert Path(os.devnull).is_char_device() and list(tmp_path.iterdir()) == []
    elif target == "private-file":
        out.write_bytes(b"old\n")
        out.chmod(0o600)
        code, _, err = run(argv(str(out)), capsysbinary)
        assert code == 0, err
        assert same(out.read_bytes(), expected) and stat.S_IMODE(out.stat().st_mode) == 0o600
        assert [p.name for p in tmp_path.iterdir()] == [out.name]
    elif target == "dash":
        code, stdout, err = run(argv("-"), capsysbinary)
        assert code == 0, err
        assert same(stdout, expected) and list(tmp_path.iterdir()) == []  # (evaluate's report: to /dev/null)
    elif target == "missing-parent":
        nested = tmp_path / "no" / "such" / out.name
        code, _, err = run(argv(str(nested)), capsysbinary)
        if command == "recipes-copy":  # catalogue case 196: recipes copy makes no folder
            refused((code, b"", err), "folder", "does not exist")
            assert list(tmp_path.iterdir()) == []
        else:
            assert code == 0, err
            assert same(nested.read_bytes(), expected)
    elif target == "empty":
        refused(run(argv(""), capsysbinary), "'' is empty", "- for standard output")
        assert list(tmp_path.iterdir()) == []
    elif target == "missing-folder-with-slash":
        refused(run(argv(f"{tmp_path}/newdir/"), capsysbinary), f"{tmp_path}/newdir/", "no such folder")
        assert list(tmp_path.iterdir()) == []
    elif target == "a-directory":
        (tmp_path / "adir").mkdir()
        code, _, err = run(argv(str(tmp_path / "adir")), capsysbinary)
        if command == "recipes-copy":  # DEST may be a folder: NAME.yaml goes in it
            assert code == 0, err
            assert (tmp_path / "adir" / "demo.yaml").read_bytes() == DEMO
        else:
            refused((code, b"", err), f"{tmp_path}/adir is a directory; give a file path")
            assert snapshot(tmp_path) == {"adir": None}


def test_recipes_copy_refuses_a_dangling_link_without_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The one command with --overwrite counts a dangling link as there (catalogue case 234)."""
    (tmp_path / "link.yaml").symlink_to("made.yaml")
    code = main(["recipes", "copy", "demo", str(tmp_path / "link.yaml")])
    refused((code, b"", capsys.readouterr().err), f"{tmp_path}/link.yaml already exists; add --overwrite to replace it")
    assert snapshot(tmp_path) == {"link.yaml": "-> made.yaml"}


# --- a folder ------------------------------------------------------------------------------------------

FOLDER_TARGETS = ["new-folder", "with-slash", "dangling-link", "link-to-a-folder", "a-file", "fifo", "dev-null",
                  "dash", "empty"]


@pytest.mark.parametrize("target", FOLDER_TARGETS)
@pytest.mark.parametrize("command", list(FOLDER_COMMANDS))
def test_a_folder_output(command: str, target: str, inputs: Inputs, tmp_path: Path,
                         capsysbinary: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    build, names = FOLDER_COMMANDS[command]
    monkeypatch.chdir(tmp_path)
    argv = lambda t: build(inputs, t)  # noqa: E731
    out = tmp_path / "out"

    if target in ("new-folder", "with-slash", "dangling-link", "link-to-a-folder"):
        folder = out
        if target in ("dangling-link", "link-to-a-folder"):
            folder = tmp_path / "real"
            if target == "link-to-a-folder":
                folder.mkdir()
            out.symlink_to("real")
        code, _, err = run(argv(str(out) + ("/" if target == "with-slash" else "")), capsysbinary)
        assert code == 0, err
        assert {p.name for p in folder.iterdir()} == names
        if folder != out:
            assert out.is_symlink() and os.readlink(out) == "real"  # the link kept, its target written
        assert {p.name for p in tmp_path.iterdir()} == {out.name, folder.name}  # no leftover sibling
    elif target in ("a-file", "fifo"):
        if target == "a-file":
            out.write_bytes(b"mine\n")
            out.chmod(0o600)
        else:
            os.mkfifo(out)
        before = snapshot(tmp_path) if target == "a-file" else None
        refused(run(argv(str(out)), capsysbinary), str(out))
        assert out.is_fifo() if target == "fifo" else snapshot(tmp_path) == before
        assert [p.name for p in tmp_path.iterdir()] == ["out"]
        if target == "a-file":
            assert stat.S_IMODE(out.stat().st_mode) == 0o600
    elif target == "dev-null":
        refused(run(argv(os.devnull), capsysbinary), os.devnull)
        assert Path(os.devnull).is_char_device() and list(tmp_path.iterdir()) == []
    elif target == "dash":
        refused(run(argv("-"), capsysbinary), "- would be standard output")
        assert list(tmp_path.iterdir()) == []
    elif target == "empty":
        refused(run(argv(""), capsysbinary), "'' is empty; give a folder name")
        assert list(tmp_path.iterdir()) == []
