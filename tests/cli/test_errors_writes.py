"""The bad-input catalogue (docs/errors.md), round four of faults: writes, disks and checkpoints. A checkpoint
edited after its save read to write another (average, convert), a write that fails (/dev/full, a full disk
while a library writes, standard output full or closed), a training log or a kept evaluation that a resumed
run cannot read, and weights that are not finite: each gives one line naming the file and exit 2
(catalogue.run_case), and nothing on disk changes. A file-size limit (RLIMIT_FSIZE) is set in a child
process, where SIGXFSZ would otherwise end the command without a word."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch
from catalogue import Case, Ctx, World, in_catalogue, run_case, translate

from tformer.tokenization import BPETokenizer

SRC = Path(__file__).resolve().parents[2] / "src"
ENOSPC = "I/O error: No space left on device (os error 28)"  # how Hugging Face `tokenizers` says it


def edited_tokenizer(c: Ctx, checkpoint: Path, name: str) -> str:
    """A copy of `checkpoint` (with its manifest) whose tokenizer file `name` was edited after the save."""
    path = c.copy(checkpoint, name)
    file = next(p for p in sorted((path / "tokenizer").iterdir()) if p.suffix == ".json")
    file.write_bytes(file.read_bytes().replace(b"\n", b" \n", 1))
    return str(path)


def average_edited(c: Ctx) -> list[str]:
    return ["average", str(c.copy(c.w.s2s, "a")), edited_tokenizer(c, c.w.s2s, "b"), "--out", f"{c.tmp}/avg"]


def other_weights(checkpoint: Path, path: Path) -> Path:
    """A checkpoint of `checkpoint`'s model and tokenizer with other weights, as a later step's."""
    from tformer.checkpoints import load_model
    from tformer.tokenization import load_tokenizer
    from tformer.training.checkpoint import save_checkpoint

    model, config = load_model(checkpoint)
    with torch.no_grad():
        next(model.parameters()).add_(0.5)
    save_checkpoint(path, model=model, config=config, tokenizer=load_tokenizer(checkpoint / "tokenizer"))
    return path


def average_full_disk(c: Ctx) -> list[str]:
    """average while the disk is full: shutil.copytree (the tokenizer's files) gathers the failure in its list."""
    def no_space(src: str, dst: str, *args: object, **kwargs: object) -> str:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    second = other_weights(c.w.s2s, c.tmp / "a")  # two steps: one checkpoint twice is refused first
    c.monkeypatch.setattr(shutil, "copyfile", no_space)
    return ["average", str(c.w.s2s), str(second), "--out", f"{c.tmp}/avg"]


def ct2_full_disk(c: Ctx, *, existing: bool) -> list[str]:
    """convert --to-ct2 while the disk fills as the tokenizer is saved (tokenizers' own exception)."""
    pytest.importorskip("ctranslate2")
    if existing:
        c.file("out/model.bin", "an older export")

    def no_space(self: BPETokenizer, directory: object) -> None:
        raise Exception(ENOSPC)

    c.monkeypatch.setattr(BPETokenizer, "save", no_space)
    return ["convert", "--to-ct2", str(c.w.s2s), "--out", f"{c.tmp}/out"]


def stdout_to(c: Ctx, stream: object) -> list[str]:
    c.monkeypatch.setattr(sys, "stdout", stream)
    return translate(c, "-i", c.file("in.txt", "the cat\n"))


def full_stdout(c: Ctx) -> list[str]:
    """Standard output on /dev/full (`tformer translate ... > /dev/full`); the test closes it."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    c.opened = open("/dev/full", "w")  # noqa: SIM115
    return stdout_to(c, c.opened)


def resumed_with(c: Ctx, name: str, data: bytes) -> list[str]:
    """--resume of a copy of a trained run (`trained`, train.average_last=2) whose file `name` holds `data`."""
    shutil.copytree(c.trained, c.tmp / "run")
    c.file(f"run/{name}", data)
    return c.train("train.average_last=2", "train.max_steps=4", "--resume")


def a_run(c: Ctx) -> str:
    """{tmp}/run/best, a translator with its recipe beside it (what evaluate reads its test split from)."""
    c.copy(c.w.s2s, "run/best")
    c.file("run/recipe.yaml", Path(c.w.recipe).read_text())
    return str(c.tmp / "run" / "best")


def non_finite(c: Ctx) -> str:
    """A copy of the translator without a manifest (put together by hand) whose weights hold a NaN."""
    path = c.copy(c.w.s2s, "ckpt", manifest=False)
    weights = safetensors.torch.load_file(path / "model.safetensors")
    name = sorted(weights)[3]
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] = float("nan")
    safetensors.torch.save_file(weights, path / "model.safetensors")
    return str(path)


CASES = [
    # 320: average certified a checkpoint edited after its save; convert read one
    Case("average-edited-tokenizer", average_edited,
         ("checkpoint {tmp}/b: tokenizer/tokenizer.json has", "the manifest says")),
    Case("convert-to-hf-unlisted-file", lambda c: ["convert", "--to-hf", str(added(c)), "--out", f"{c.tmp}/out"],
         ("checkpoint {tmp}/src: notes.txt is not in manifest.json",)),
    # 321: a write that fails names its file (a file-size limit: test_a_file_size_limit_names_the_file...)
    Case("translate-output-dev-full", lambda c: translate(c, "-i", c.file("in.txt", "the cat\n"), "-o", "/dev/full"),
         ("/dev/full: No space left on device",)),
    Case("evaluate-hyp-out-dev-full", lambda c: ["evaluate", "--checkpoint", a_run(c), "--split", "valid", "--limit",
                                                 "2", "--hyp-out", "/dev/full"],
         ("/dev/full: No space left on device",)),
    # 322: standard output full
    Case("translate-stdout-full", full_stdout, ("standard output: No space left on device",)),
    Case("recipes-list-stdout-full", lambda c: (full_stdout(c), ["recipes", "list"])[1],
         ("standard output: No space left on device",)),
    # 323: standard output closed (`>&-`): Python has no sys.stdout
    Case("translate-stdout-closed", lambda c: stdout_to(c, None),
         ("standard output is closed (was the command run with >&-?)",)),
    # 324: a full disk while a library writes into a checkpoint or an export (a traceback; shutil's list)
    Case("convert-to-ct2-disk-full-in-the-tokenizer", lambda c: ct2_full_disk(c, existing=False),
         ("cannot write {tmp}/out: No space left on device",)),
    Case("convert-to-ct2-disk-full-over-an-export", lambda c: ct2_full_disk(c, existing=True),
         ("cannot write {tmp}/out: No space left on device (what was there is kept)",)),
    Case("average-disk-full", average_full_disk, ("cannot write checkpoint {tmp}/avg: No space left on device",)),
    # 325: a training log that is not UTF-8, resumed
    Case("resume-log-not-utf8",
         lambda c: resumed_with(c, "metrics.jsonl", b'{"step": 1, "loss": 3.0}\n{"step": 2, "lo\xffss": 2.9}\n'),
         ("cannot resume: {tmp}/run/metrics.jsonl:2: not valid UTF-8 (byte 0xff at column 16)",
          "delete or fix that line of the training log")),
    # 326: a kept evaluation truncated, resumed with train.average_last
    Case("resume-truncated-evals",
         lambda c: resumed_with(c, "evals/step-00000002.pt", b"PK\x03\x04 truncated"),
         ("{tmp}/run/evals/step-00000002.pt is corrupt", "delete it to resume")),
    # 327: weights that are not finite
    Case("translate-non-finite-weights", lambda c: translate(c, "-i", c.file("in.txt", "the cat\n"), "--beam", "2",
                                                             checkpoint=non_finite(c)),
         ("checkpoint {tmp}/ckpt: model.safetensors holds non-finite values (NaN or infinity) in",)),
]


def added(c: Ctx) -> Path:
    """A copy of the GPT with a file added after its save."""
    path = c.copy(c.w.gpt, "src")
    (path / "notes.txt").write_text("mine")
    return path


@pytest.fixture(scope="module")
def trained(world: World, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the tiny translation recipe, 2 steps, its evaluation kept for train.average_last=2."""
    from tformer.cli import main

    run = tmp_path_factory.mktemp("trained") / "run"
    assert main(["train", str(world.recipe), f"out_dir={run}", "train.average_last=2", "--no-progress"]) == 0
    assert (run / "evals" / "step-00000002.pt").is_file() and (run / "last" / "trainer.pt").is_file()
    return run


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, world: World, trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    c = Ctx(world, tmp_path, monkeypatch)
    c.trained = trained
    try:
        run_case(case, c, capsys)
    finally:
        if (stream := getattr(c, "opened", None)) is not None:
            monkeypatch.undo()
            try:
                stream.close()
            except OSError:  # what is still buffered for /dev/full
                pass


def test_every_case_is_in_the_catalogue() -> None:
    assert len({c.id for c in CASES}) == len(CASES)
    assert not in_catalogue(CASES)


def tformer_limited(tmp_path: Path, limit: int, *argv: str) -> subprocess.CompletedProcess:
    """`tformer argv` in a child process whose files may grow to `limit` bytes (RLIMIT_FSIZE)."""
    code = ("import resource, sys\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
            "from tformer.cli import main\n"
            f"sys.exit(main({list(argv)!r}))\n")
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ: Linux")
def test_a_file_size_limit_names_the_file_and_leaves_nothing(tmp_path: Path) -> None:
    """(case 321) Past the limit the write fails with EFBIG, named, where SIGXFSZ ended the process."""
    done = tformer_limited(tmp_path, 64, "recipes", "copy", "demo", "r.yaml")
    assert done.returncode == 2, done.stderr
    assert done.stderr == "tformer: error: r.yaml: File too large\n"
    assert list(tmp_path.iterdir()) == []
