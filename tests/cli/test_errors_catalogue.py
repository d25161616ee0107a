"""The bad-input catalogue (docs/errors.md): every case through `tformer.cli.main` returns 2 and prints one
line `tformer: error: ...` naming the bad value (and, where there is a list, what is allowed), with no
traceback, and leaves the disk as it was: no new file or directory, and a file that was there unchanged.

Module fixtures build, once: a tiny parallel corpus and recipes, and three untrained checkpoints (an
encoder-decoder with a BPE tokenizer, a GPT with a character tokenizer, a BERT classifier with WordPiece)
and a Hugging Face GPT-2 directory. Each case copies what it breaks into its own temporary directory.
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
from safetensors.torch import load_file, save_file

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


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("world")
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
    weights = load_file(path / "model.safetensors")
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


CASES = [
    # the recipe: keys, types and values (train; the same checks serve demo)
    Case("unknown-key", lambda c: c.train("epochs=3"), ("unknown config key 'epochs'", "known keys: data, decode")),
    Case("unknown-nested-key", lambda c: c.train("model.overrides.d_modle=32"),
         ("unknown config key 'd_modle'", "d_model")),
    Case("wrong-type", lambda c: c.train("train.max_steps=abc"),
         ("'train.max_steps'='abc' has the wrong type", "expected an integer")),
    Case("list-for-number", lambda c: c.train("train.optim.lr=[1, 2]"),
         ("'train.optim.lr'=[1, 2] has the wrong type", "expected float")),
    Case("number-for-mapping", lambda c: c.train("model.overrides=5"),
         ("'model.overrides'=5 has the wrong type", "expected a mapping")),
    Case("override-syntax", lambda c: c.train("foo"), ("override 'foo' is not key=value",)),
    Case("override-value-yaml", lambda c: c.train("model.overrides.attention={kind: windowed"),
         ("override 'model.overrides.attention={kind: windowed'", "not valid YAML (line 1, column 16")),
    Case("override-into-a-value", lambda c: c.train("train.max_steps.x=1"),
         ("override 'train.max_steps.x'", "'max_steps' is not a section")),
    Case("negative-dropout", lambda c: c.train("model.overrides.dropout.residual=-0.1"),
         ("dropout.residual=-0.1", "[0, 1)")),
    Case("heads-not-dividing-width", lambda c: c.train("model.overrides.n_heads=5"),
         ("d_model=32 is not divisible by n_heads=5",)),
    Case("kv-heads-not-dividing-heads", lambda c: c.train("model.overrides.n_kv_heads=3"),
         ("n_heads=4 is not divisible by n_kv_heads=3",)),
    Case("zero-layers", lambda c: c.train("model.overrides.n_layers=0"), ("n_layers=0 must be a positive integer",)),
    Case("lr-not-positive", lambda c: c.train("train.optim.lr=-0.001"), ("optim.lr=-0.001 must be > 0",)),
    Case("label-smoothing-one", lambda c: c.train("train.label_smoothing=1.0"),
         ("train.label_smoothing=1.0", "[0, 1)")),
    Case("recipe-beam-zero", lambda c: c.train("decode.beam=0"), ("decode.beam=0 must be at least 1",)),
    Case("unknown-schedule", lambda c: c.train("train.schedule.name=exponential"),
         ("schedule.name='exponential' is not allowed", "inverse_sqrt, cosine, linear, constant")),
    Case("unknown-preset", lambda c: c.train("model.preset=transformer-huge"),
         ("unknown preset 'transformer-huge'", "transformer-base")),
    Case("preset-of-another-family", lambda c: c.train("model.preset=gpt-tiny"),
         ("model.preset='gpt-tiny' is not an encoder-decoder",)),
    Case("unknown-task", lambda c: c.train("task=summarise"),
         ("task='summarise'", "translation, lm, bert, classify")),
    Case("task-not-a-name", lambda c: c.train("task=[lm]"), ("task=['lm']", "translation, lm, bert, classify")),
    Case("unknown-attention-kind", lambda c: c.train("model.overrides.attention=flash"),
         ("attention.kind='flash' is not allowed", "sdpa, eager, windowed")),
    Case("unknown-position-kind", lambda c: c.train("model.overrides.positions=xpos"),
         ("positions.kind='xpos' is not allowed", "sinusoidal, learned")),
    Case("sample-temperature-negative", lambda c: c.lm("sample.temperature=-1"), ("sample.temperature=-1", ">= 0")),
    Case("sample-top-p-above-one", lambda c: c.lm("sample.top_p=1.5"), ("sample.top_p=1.5", "(0, 1]")),
    Case("sample-top-k-zero", lambda c: c.lm("sample.top_k=0"), ("sample.top_k=0", "positive integer")),
    # the recipe file
    Case("config-missing", lambda c: ["train", f"{c.tmp}/nope.yaml"], ("config file {tmp}/nope.yaml does not exist",)),
    Case("config-empty", lambda c: recipe_file(c, "empty.yaml", "# nothing\n"),
         ("config file {tmp}/empty.yaml is empty",)),
    Case("config-not-a-mapping", lambda c: recipe_file(c, "list.yaml", "- task\n- lm\n"),
         ("config file {tmp}/list.yaml must hold a mapping", "not list")),
    Case("config-invalid-yaml", lambda c: recipe_file(c, "bad.yaml", "task: [lm\n"),
         ("config file {tmp}/bad.yaml is not valid YAML (line 2, column 1",)),
    Case("config-not-utf8", lambda c: recipe_file(c, "latin1.yaml", "out_dir: caf\xe9\n".encode("latin-1")),
         ("config file {tmp}/latin1.yaml is not UTF-8 (byte 12)",)),
    # the data
    Case("data-missing", lambda c: c.train(f"data.train={c.tmp}/none.tsv"), ("{tmp}/none.tsv: no such file",)),
    Case("data-empty", lambda c: data(c, "empty.tsv", ""), ("{tmp}/empty.tsv: no sentence pairs",)),
    Case("data-not-utf8", lambda c: data(c, "bytes.tsv", b"a b\t" + NOT_UTF8),
         ("{tmp}/bytes.tsv:1: not valid UTF-8 (byte 0xff",)),
    Case("data-unequal-files", two_files, ("{tmp}/a.en:3: no matching line in {tmp}/a.de, which has 2 lines",)),
    Case("data-line-without-tab", lambda c: data(c, "bad.tsv", "a b\tc d\nthree only\n"),
         ("{tmp}/bad.tsv:2: expected 2 tab-separated columns", "found 1")),
    Case("data-unknown-suffix", lambda c: data(c, "pairs.csv", "a,b\n"),
         ("unknown parallel-corpus suffix '.csv'", ".tsv, .tab, .jsonl, .ndjson")),
    Case("text-shorter-than-a-block", lambda c: c.lm("data.block_size=500"),
         ("data.block_size=500 needs at least 501", "the training text has")),
    Case("out-dir-read-only", lambda c: c.train(f"out_dir={c.readonly('ro')}/run"),
         ("{tmp}/ro/run: Permission denied",)),
    Case("out-dir-under-a-file", lambda c: c.train(f"out_dir={c.file('afile', 'x')}/run"),
         ("{tmp}/afile/run: Not a directory",)),
    # checkpoints
    Case("checkpoint-missing", lambda c: translate(c, checkpoint=f"{c.tmp}/nothing"),
         ("checkpoint {tmp}/nothing: no such directory",)),
    Case("checkpoint-without-weights", lambda c: generate(c, checkpoint=without(c, c.w.gpt, "model.safetensors")),
         ("checkpoint {tmp}/ckpt: missing model.safetensors",)),
    Case("checkpoint-without-config", lambda c: generate(c, checkpoint=without(c, c.w.gpt, "config.yaml")),
         ("checkpoint {tmp}/ckpt: missing config.yaml",)),
    Case("checkpoint-corrupt-config", lambda c: generate(c, checkpoint=edited_config(c, c.w.gpt, "family: [gpt\n")),
         ("checkpoint {tmp}/ckpt: config.yaml is not valid YAML",)),
    Case("checkpoint-unknown-family",
         lambda c: generate(c, checkpoint=edited_config(c, c.w.gpt, "family: rnn\nconfig: {}\n")),
         ("checkpoint {tmp}/ckpt: config.yaml has family='rnn'", "known: seq2seq, bert, gpt")),
    Case("checkpoint-other-architecture",
         lambda c: generate(c, checkpoint=edited_config(c, c.w.gpt, d_model=64, d_ff=128)),
         ("checkpoint {tmp}/ckpt: cannot load model.safetensors into GPT", "size mismatches, the first:",
          "in the file but [64] in the model")),
    Case("checkpoint-truncated", lambda c: generate(c, checkpoint=truncated(c, c.w.gpt)),
         ("checkpoint {tmp}/ckpt: model.safetensors has 100 bytes, the manifest says",
          "the file is truncated or was replaced")),
    Case("translate-beside-a-corrupt-recipe", lambda c: translate(c, checkpoint=beside_recipe(c, "data: [x\n")),
         ("{tmp}/run/recipe.yaml (the run's recipe beside the checkpoint) is not a valid recipe",)),
    Case("train-device-unknown", lambda c: c.train("train.device=tpu"),
         ("train.device='tpu' is not allowed", "use auto, cpu, cuda or cuda:N")),
    Case("train-device-absent", lambda c: c.train("train.device=cuda"),
         ("train.device='cuda' but torch sees no GPU here",)),
    Case("resume-without-checkpoint", lambda c: c.train("--resume"),
         ("cannot resume: no checkpoint with a tokenizer at {tmp}/run/last",)),
    Case("resume-with-a-changed-model", lambda c: resumable(c, "model.overrides.d_model=64"),
         ("cannot resume {tmp}/run/last: model d_model is 32 in the checkpoint but 64 in the recipe",)),
    Case("checkpoint-without-tokenizer", lambda c: translate(c, checkpoint=without(c, c.w.s2s, "tokenizer")),
         ("checkpoint {tmp}/ckpt has no tokenizer/ directory",)),
    Case("tokenizer-corrupt", lambda c: translate(c, checkpoint=broken_tokenizer(c)),
         ("{tmp}/ckpt/tokenizer/tokenizer.json: not a valid tokenizer file",)),
    Case("tokenizer-larger-than-model", lambda c: generate(c, checkpoint=big_char_tokenizer(c)),
         ("checkpoint {tmp}/ckpt: the tokenizer has 27 tokens but the model's vocab_size=23",)),
    Case("translate-tokenizer-larger-than-model", lambda c: translate(c, checkpoint=small_translator(c)),
         ("checkpoint {tmp}/ckpt: the tokenizer has 300 tokens but the model's vocab_size=270",)),
    # a checkpoint of the wrong family for the command
    Case("translate-a-gpt", lambda c: translate(c, checkpoint=c.w.gpt),
         ("gpt holds a GPTConfig, not an encoder-decoder",)),
    Case("generate-a-translator", lambda c: generate(c, checkpoint=c.w.s2s),
         ("s2s holds a Seq2SeqConfig; generate needs a GPT",)),
    Case("classify-a-gpt", lambda c: ["classify", "--checkpoint", str(c.w.gpt)],
         ("gpt holds a GPT; classify needs a BertClassifier",)),
    Case("score-a-classifier", lambda c: score(c, "t.txt", "a\n", checkpoint=c.w.clf),
         ("clf holds a BertConfig; score needs a GPT or an encoder-decoder",)),
    # translate and evaluate
    Case("translate-beam-zero",  # the existing output stays as it was
         lambda c: translate(c, "--beam", "0", *some_input(c), "--output", c.file("out.txt", "OLD\n")),
         ("decode.beam=0 must be at least 1",)),
    Case("translate-batch-size-zero", lambda c: translate(c, "--batch-size", "0"),
         ("decode.batch_size=0 must be at least 1",)),
    Case("translate-input-missing", lambda c: translate(c, "--input", f"{c.tmp}/no.txt"),
         ("input file {tmp}/no.txt does not exist",)),
    Case("translate-input-not-utf8",
         lambda c: translate(c, "--input", c.file("in.txt", NOT_UTF8), "--output", f"{c.tmp}/out.txt"),
         ("input file {tmp}/in.txt is not UTF-8 (byte 8)",)),
    Case("translate-output-read-only",
         lambda c: translate(c, *some_input(c), "--output", f"{c.readonly('ro')}/out.txt"),
         ("--output {tmp}/ro/out.txt: directory {tmp}/ro is not writable",)),
    Case("translate-output-under-a-file",
         lambda c: translate(c, *some_input(c), "--output", f"{c.file('afile')}/out.txt"),
         ("--output {tmp}/afile/out.txt: {tmp}/afile is a file",)),
    Case("translate-output-is-a-directory", lambda c: translate(c, *some_input(c), "--output", str(c.tmp)),
         ("--output {tmp} is a directory",)),
    Case("evaluate-without-recipe", lambda c: ["evaluate", "--checkpoint", str(c.w.s2s)],
         ("no recipe.yaml beside", "evaluate needs the run directory")),
    Case("evaluate-limit-zero", lambda c: ["evaluate", "--checkpoint", str(c.w.s2s), "--limit", "0"],
         ("--limit=0 must be a positive integer",)),
    # generate
    Case("generate-prompt-too-long", lambda c: generate(c, prompt="In the " * 6),
         ("the prompt is 43 tokens", "max_len=32")),
    Case("generate-max-new-tokens-negative", lambda c: generate(c, "--max-new-tokens", "-1"),
         ("--max-new-tokens=-1 must be >= 0",)),
    Case("generate-temperature-negative", lambda c: generate(c, "--temperature", "-0.5"),
         ("temperature=-0.5 must be >= 0",)),
    Case("generate-top-p-above-one", lambda c: generate(c, "--top-p", "1.5"), ("top_p=1.5 must be in (0, 1]",)),
    Case("generate-top-p-zero", lambda c: generate(c, "--top-p", "0"), ("top_p=0.0 must be in (0, 1]",)),
    Case("generate-top-k-zero", lambda c: generate(c, "--top-k", "0"), ("top_k=0 must be >= 1",)),
    # score and classify
    Case("score-file-missing", lambda c: ["score", "--checkpoint", str(c.w.gpt), f"{c.tmp}/no.txt"],
         ("input file {tmp}/no.txt does not exist",)),
    Case("score-file-empty", lambda c: score(c, "blank.txt", "\n\n", checkpoint=c.w.gpt),
         ("{tmp}/blank.txt has no non-empty line to score",)),
    Case("score-pair-without-tab", lambda c: score(c, "p.tsv", "the cat\tdie Katze\nthe dog\n"),
         ("{tmp}/p.tsv:2: expected source<TAB>target",)),
    Case("score-line-longer-than-context", lambda c: score(c, "p.tsv", f"the cat\tdie Katze\n{LONG}\tder Hund\n"),
         ("{tmp}/p.tsv:2: the source is 120 tokens", "max_len=32")),
    Case("classify-top-zero", lambda c: ["classify", "--checkpoint", str(c.w.clf), "--top", "0"],
         ("--top=0 must be a positive integer",)),
    Case("classify-input-not-utf8", lambda c: ["classify", "--checkpoint", str(c.w.clf), "--input",
                                               c.file("in.txt", NOT_UTF8)], ("input file {tmp}/in.txt is not UTF-8",)),
    # Hugging Face directories (convert --from-hf DIR --out {tmp}/out)
    Case("hf-missing-directory", lambda c: ["convert", "--from-hf", f"{c.tmp}/none", "--out", f"{c.tmp}/out"],
         ("{tmp}/none is not a directory",)),
    Case("hf-no-config", lambda c: hf_dir(c, lambda p: (p / "config.json").unlink()), ("{tmp}/hf has no config.json",)),
    Case("hf-config-not-json", lambda c: hf_dir(c, lambda p: (p / "config.json").write_text("{not json")),
         ("{tmp}/hf/config.json is not valid JSON",)),
    Case("hf-unknown-model-type", lambda c: hf_dir(c, lambda p: hf_json(p, model_type="t5")),
         ("model_type='t5' is not supported", "bert, gpt2, llama, marian, pegasus")),
    Case("hf-no-weights", lambda c: hf_dir(c, lambda p: (p / "model.safetensors").unlink()),
         ("{tmp}/hf has no weights", "model.safetensors")),
    Case("hf-missing-weight", lambda c: hf_dir(c, lambda p: hf_weights(p, drop="transformer.h.1.ln_1.weight")),
         ("{tmp}/hf: the checkpoint has no weight 'transformer.h.1.ln_1.weight'",)),
    Case("hf-unexpected-weight", lambda c: hf_dir(c, lambda p: hf_weights(p, add="transformer.h.2.ln_1.weight")),
         ("{tmp}/hf: the checkpoint has 1 weights our model has no place for: transformer.h.2.ln_1.weight",)),
    Case("hf-weights-do-not-fit", lambda c: hf_dir(c, lambda p: hf_json(p, n_embd=32)),
         ("{tmp}/hf: the weights do not fit config.json", "size mismatches, the first: embed.tokens.weight is "
                                                            "[50, 16] in the weights but [50, 32] by config.json")),
    Case("hf-export-impossible", lambda c: ["convert", "--to-hf", edited_config(c, c.w.s2s, positions=ROPE),
                                            "--out", f"{c.tmp}/out"],
         ("no Hugging Face equivalent", "as marian: positions.kind='rope' (needs 'sinusoidal')",
          "as pegasus: positions.kind='rope' (needs 'sinusoidal')")),
    Case("convert-out-is-a-file", lambda c: ["convert", "--from-hf", str(c.w.hf), "--out", c.file("out", "OLD\n")],
         ("checkpoint {tmp}/out: exists and is not a directory",)),
    # the command line itself (argparse, one line)
    Case("unknown-command", lambda c: ["frobnicate"], ("invalid choice: 'frobnicate'", "'train', 'translate'")),
    Case("not-an-integer", lambda c: translate(c, "--beam", "abc"), ("argument --beam: invalid int value: 'abc'",)),
    Case("missing-argument", lambda c: ["translate"], ("the following arguments are required: --checkpoint",)),
    Case("unknown-argument", lambda c: translate(c, "--bogus"), ("unrecognized arguments: --bogus",)),
    Case("unknown-split", lambda c: ["evaluate", "--checkpoint", str(c.w.s2s), "--split", "dev"],
         ("argument --split: invalid choice: 'dev'", "'train', 'valid', 'test'")),
]


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root`: a file's bytes, None for a directory."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, world: World, tmp_path: Path, capsys: pytest.CaptureFixture,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    c = Ctx(world, tmp_path, monkeypatch)
    argv = case.argv(c)
    before = snapshot(tmp_path)
    capsys.readouterr()
    try:
        code = main(argv)
    finally:
        for path in tmp_path.rglob("*"):  # let pytest clean up the read-only directories
            if path.is_dir():
                path.chmod(0o755)
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in out + err
    assert err.startswith("tformer: error: ") and err.count("\n") == 1, err
    for expected in case.expect:
        assert expected.replace("{tmp}", str(tmp_path)) in err, err
    assert snapshot(tmp_path) == before  # nothing new on disk, nothing changed


def test_every_case_is_in_the_catalogue() -> None:
    assert len({c.id for c in CASES}) == len(CASES) >= 45
    catalogue = (Path(__file__).parents[2] / "docs" / "errors.md").read_text(encoding="utf-8")
    assert not [c.id for c in CASES if f"test_bad_input[{c.id}]" not in catalogue]


def test_token_id_outside_the_vocabulary(world: World) -> None:
    """Through the Python API: a ValueError naming the id and the vocabulary's range, for both families."""
    gpt, config = load_model(world.gpt)
    with pytest.raises(ValueError, match=f"token id {config.vocab_size} is out of range; the vocabulary has ids "
                                         f"0..{config.vocab_size - 1}"):
        gpt(torch.tensor([[1, config.vocab_size]]))
    s2s, config = load_model(world.s2s)
    with pytest.raises(ValueError, match="token id -1 is out of range"):
        s2s(torch.tensor([[5, 6]]), torch.tensor([[1, -1]]))
