"""The bad-input catalogue's machinery (docs/errors.md), shared by the test_errors_*.py files: a world of tiny
inputs, built once per session, and `run_case`, which runs one case through `tformer.cli.main` and asserts the
rule: exit 2, one line `tformer: error: ...` naming the bad value (and, where there is a list, what is
allowed), no traceback, and the disk as it was: no new file or directory, and a file that was there unchanged.

`build_world` makes a tiny parallel corpus and recipes, and three untrained checkpoints (an encoder-decoder with
a BPE tokenizer, a GPT with a character tokenizer, a BERT classifier with WordPiece) and a Hugging Face GPT-2
directory. Each case copies what it breaks into its own temporary directory.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
import yaml
from safetensors.torch import load, save_file

import tformer
from tformer.cli import main
from tformer.interop import to_hf
from tformer.tokenization import BPETokenizer, CharTokenizer, WordPieceTokenizer
from tformer.training.checkpoint import load_model, save_checkpoint

WORDS = "the a house cat dog sees big small red blue runs sleeps".split()
GERMAN = dict(zip(WORDS, "der ein Haus Katze Hund sieht gross klein rot blau rennt schlaeft".split(), strict=True))
TINY = {"d_model": 32, "d_ff": 64, "n_heads": 4, "n_layers": 1, "max_len": 32}
ROPE = {"kind": "rope"}  # neither Marian nor Pegasus has rotary positions


def pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = [[rng.choice(WORDS) for _ in range(rng.randint(2, 6))] for _ in range(n)]
    return [(" ".join(w), " ".join(GERMAN[x] for x in w)) for w in words]


def tsv(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    return path


@dataclass(frozen=True)
class World:
    recipe: Path  # a translation recipe over the tiny corpus
    lm_recipe: Path  # a language-model recipe
    s2s: Path  # checkpoints
    gpt: Path
    clf: Path
    hf: Path  # a Hugging Face GPT-2 directory
    bpe: BPETokenizer


def build_world(root: Path) -> World:
    (root / "data").mkdir()
    (root / "ckpt").mkdir()
    train, valid = tsv(root / "data" / "train.tsv", pairs(60, 0)), tsv(root / "data" / "valid.tsv", pairs(8, 1))
    recipe = {
        "task": "translation", "out_dir": str(root / "unused"),
        "data": {"corpus": "files", "train": str(train), "valid": str(valid), "vocab_size": 300,
                 "max_tokens": 400, "bleu_sentences": 4},
        "model": {"preset": "transformer-tiny", "overrides": dict(TINY)},
        "train": {"max_steps": 2, "eval_every": 2, "log_every": 1, "schedule": {"name": "constant", "warmup": 1},
                  "optim": {"lr": 1e-3}},
        "decode": {"beam": 2, "max_len_b": 5},
    }
    (root / "data" / "translation.yaml").write_text(yaml.safe_dump(recipe))
    text = root / "data" / "text.txt"
    text.write_text("In the beginning God created the heavens and the earth.\n" * 4, encoding="utf-8")
    lm = {"task": "lm", "out_dir": str(root / "unused"),
          "data": {"corpus": "files", "paths": [str(text)], "valid_paths": [str(text)], "block_size": 16},
          "model": {"preset": "gpt-tiny", "overrides": dict(TINY)}, "train": {"max_steps": 2}}
    (root / "data" / "lm.yaml").write_text(yaml.safe_dump(lm))

    bpe = BPETokenizer.train([s for p in pairs(60, 0) for s in p], vocab_size=300)
    ids = dict(vocab_size=bpe.vocab_size, pad_id=bpe.pad_id, bos_id=bpe.bos_id, eos_id=bpe.eos_id)
    config = tformer.preset("transformer-tiny", {**TINY, **ids})
    save_checkpoint(root / "ckpt" / "s2s", model=tformer.build_model(config), config=config, tokenizer=bpe)

    chars = CharTokenizer.train([text.read_text()])
    config = tformer.preset("gpt-tiny", {**TINY, "vocab_size": chars.vocab_size, "bos_id": chars.eos_id,
                                         "eos_id": chars.eos_id})
    save_checkpoint(root / "ckpt" / "gpt", model=tformer.build_model(config), config=config, tokenizer=chars)

    pieces = WordPieceTokenizer.train([s for p in pairs(60, 0) for s in p] * 3, vocab_size=100)
    config = tformer.preset("bert-tiny", {**TINY, "vocab_size": pieces.vocab_size, "n_labels": 2})
    save_checkpoint(root / "ckpt" / "clf", model=tformer.BertClassifier(config), config=config, tokenizer=pieces)

    to_hf(tformer.GPT(tformer.GPTConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=16)),
          root / "hf")
    return World(root / "data" / "translation.yaml", root / "data" / "lm.yaml", root / "ckpt" / "s2s",
                 root / "ckpt" / "gpt", root / "ckpt" / "clf", root / "hf", bpe)


class Ctx:
    """What a case builds its inputs with: files and checkpoint copies in its own directory `tmp`."""

    def __init__(self, world: World, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.w, self.tmp, self.monkeypatch = world, tmp, monkeypatch

    def file(self, name: str, content: str | bytes = "") -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return str(path)

    def copy(self, checkpoint: Path, name: str, *, manifest: bool = True) -> Path:
        """A copy of `checkpoint`; without `manifest`, as one written before manifests or put together by
        hand, so that the loader's own checks, not the manifest's sizes and hashes, meet an edited file."""
        path = Path(shutil.copytree(checkpoint, self.tmp / name))
        if not manifest:
            (path / "manifest.json").unlink(missing_ok=True)
        return path

    def readonly(self, name: str) -> str:
        """A directory no one may write in. Root ignores the mode, so for root the refusal is simulated:
        os.access says no, and os.mkdir raises what the kernel would (EACCES) below it."""
        path = self.tmp / name
        path.mkdir()
        path.chmod(0o555)
        if os.access(path, os.W_OK):
            inside = str(path)
            access, mkdir = os.access, os.mkdir

            def denied_access(p: object, mode: int, *args: object, **kwargs: object) -> bool:
                return False if mode & os.W_OK and str(p).startswith(inside) else access(p, mode, *args, **kwargs)

            def denied_mkdir(p: object, *args: object, **kwargs: object) -> None:
                if str(p).startswith(inside + os.sep):
                    raise PermissionError(errno.EACCES, "Permission denied", str(p))
                mkdir(p, *args, **kwargs)

            self.monkeypatch.setattr(os, "access", denied_access)
            self.monkeypatch.setattr(os, "mkdir", denied_mkdir)
        return str(path)

    def train(self, *overrides: str, recipe: Path | None = None) -> list[str]:
        return ["train", str(recipe or self.w.recipe), f"out_dir={self.tmp}/run", *overrides, "--no-progress"]

    def lm(self, *overrides: str) -> list[str]:
        return self.train(*overrides, recipe=self.w.lm_recipe)


class Case(NamedTuple):
    id: str
    argv: Callable[[Ctx], list[str]]
    expect: tuple[str, ...]  # substrings of the message; {tmp} is the case's directory


# --- the builders of the cases that break a file --------------------------------------------------------


def recipe_file(c: Ctx, name: str, content: str | bytes) -> list[str]:
    return ["train", c.file(name, content), f"out_dir={c.tmp}/run", "--no-progress"]


def data(c: Ctx, name: str, content: str | bytes) -> list[str]:
    return c.train(f"data.train={c.file(name, content)}")


def two_files(c: Ctx) -> list[str]:
    c.file("a.en", "the cat\nthe dog\na house\n")
    c.file("a.de", "die Katze\nder Hund\n")
    return c.train(f"data.train={c.tmp}/a.en,{c.tmp}/a.de")


def without(c: Ctx, checkpoint: Path, name: str) -> str:
    path = c.copy(checkpoint, "ckpt")
    target = path / name
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    return str(path)


def edited_config(c: Ctx, checkpoint: Path, text: str | None = None, **changes: object) -> str:
    """A copy of `checkpoint` whose config.yaml is `text`, or has the model config `changes`."""
    path = c.copy(checkpoint, "ckpt", manifest=False)
    if text is None:
        meta = yaml.safe_load((path / "config.yaml").read_text())
        meta["config"].update(changes)
        text = yaml.safe_dump(meta)
    (path / "config.yaml").write_text(text)
    return str(path)


def truncated(c: Ctx, checkpoint: Path) -> str:
    path = c.copy(checkpoint, "ckpt")
    with open(path / "model.safetensors", "r+b") as f:
        f.truncate(100)
    return str(path)


def beside_recipe(c: Ctx, text: str) -> str:
    """A run directory holding the translator as `last` and a recipe.yaml reading `text`."""
    path = c.copy(c.w.s2s, "run/last")
    (path.parent / "recipe.yaml").write_text(text)
    return str(path)


def resumable(c: Ctx, *overrides: str) -> list[str]:
    """A run directory whose `last` is the translator checkpoint, resumed with `overrides`."""
    c.copy(c.w.s2s, "run/last")
    return c.train(*overrides, "--resume")


def broken_tokenizer(c: Ctx) -> str:
    path = c.copy(c.w.s2s, "ckpt", manifest=False)
    (path / "tokenizer" / "tokenizer.json").write_text("{broken")
    return str(path)


def big_char_tokenizer(c: Ctx) -> str:
    path = c.copy(c.w.gpt, "ckpt", manifest=False)
    vocab_size = load_model(path)[1].vocab_size
    chars = [chr(0x100 + i) for i in range(vocab_size)]  # 4 special tokens + vocab_size characters
    CharTokenizer(chars).save(path / "tokenizer")
    return str(path)


def small_translator(c: Ctx) -> str:
    """A checkpoint whose model has 270 tokens, saved with the 300-token tokenizer of another."""
    config = tformer.preset("transformer-tiny", {**TINY, "vocab_size": 270})
    save_checkpoint(c.tmp / "ckpt", model=tformer.build_model(config), config=config, tokenizer=c.w.bpe)
    return str(c.tmp / "ckpt")


def hf_dir(c: Ctx, edit: Callable[[Path], None]) -> list[str]:
    path = Path(shutil.copytree(c.w.hf, c.tmp / "hf"))
    edit(path)
    return ["convert", "--from-hf", str(path), "--out", f"{c.tmp}/out"]


def hf_json(path: Path, **changes: object) -> None:
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | changes))


def hf_weights(path: Path, drop: str | None = None, add: str | None = None) -> None:
    weights = load((path / "model.safetensors").read_bytes())  # not mapped: the file is written over below
    weights = {k: v for k, v in weights.items() if k != drop} | ({add: torch.ones(16)} if add else {})
    save_file(weights, path / "model.safetensors")


NOT_UTF8 = b"the cat \xff\xfe sees\n"
LONG = "the big red dog " * 10  # 120 tokens: more than the context of 32


def translate(c: Ctx, *args: str, checkpoint: Path | str | None = None) -> list[str]:
    return ["translate", "--checkpoint", str(checkpoint or c.w.s2s), *args]


def generate(c: Ctx, *args: str, checkpoint: Path | str | None = None, prompt: str = "In") -> list[str]:
    return ["generate", "--checkpoint", str(checkpoint or c.w.gpt), "--prompt", prompt, *args]


def score(c: Ctx, name: str, text: str, *, checkpoint: Path | None = None) -> list[str]:
    return ["score", "--checkpoint", str(checkpoint or c.w.s2s), c.file(name, text)]


def some_input(c: Ctx) -> list[str]:
    return ["--input", c.file("in.txt", "the cat\n")]


def snapshot(root: Path) -> dict[str, bytes | str | None]:
    """Every path under `root`: a symbolic link's target (dangling or not), a file's bytes, None for a
    directory."""
    def state(p: Path) -> bytes | str | None:
        return f"-> {os.readlink(p)}" if p.is_symlink() else None if p.is_dir() else p.read_bytes()

    return {str(p.relative_to(root)): state(p) for p in sorted(root.rglob("*"))}


def run_case(case: Case, c: Ctx, capsys: pytest.CaptureFixture) -> None:
    """Run `case` in `c.tmp` and assert the catalogue's rule."""
    argv = case.argv(c)
    before = snapshot(c.tmp)
    capsys.readouterr()
    try:
        code = main(argv)
    finally:
        for path in c.tmp.rglob("*"):  # let pytest clean up the read-only directories
            if path.is_dir():
                path.chmod(0o755)
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in out + err
    assert err.startswith("tformer: error: ") and err.count("\n") == 1, err
    for expected in case.expect:
        assert expected.replace("{tmp}", str(c.tmp)) in err, err
    assert snapshot(c.tmp) == before  # nothing new on disk, nothing changed


def in_catalogue(cases: list[Case]) -> list[str]:
    """The ids of `cases` that docs/errors.md does not name."""
    catalogue = (Path(__file__).parents[2] / "docs" / "errors.md").read_text(encoding="utf-8")
    return [c.id for c in cases if f"test_bad_input[{c.id}]" not in catalogue]


def case_tests(cases: list[Case]) -> tuple[Callable[..., None], Callable[[], None]]:
    """The two tests every module of cases runs: each case by `run_case`, and each id once and named in
    docs/errors.md. A module binds them by name for pytest to collect:
    `test_bad_input, test_every_case_is_in_the_catalogue = case_tests(CASES)`."""

    @pytest.mark.parametrize("case", cases, ids=[c.id for c in cases])
    def test_bad_input(case: Case, world: World, tmp_path: Path, capsys: pytest.CaptureFixture,
                       monkeypatch: pytest.MonkeyPatch) -> None:
        run_case(case, Ctx(world, tmp_path, monkeypatch), capsys)

    def test_every_case_is_in_the_catalogue() -> None:
        assert len({c.id for c in cases}) == len(cases)
        assert not in_catalogue(cases)

    return test_bad_input, test_every_case_is_in_the_catalogue
