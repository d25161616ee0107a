"""The bad-input catalogue (docs/errors.md), round two: files and checkpoints. A manifest entry of the wrong
shape, a config.yaml field of the wrong type, a tokenizer file edited or added after the save, a Hugging Face
directory whose index names a file outside it or whose weights are garbage or pickled code, a tokenizer file
of garbage, and a full disk while writing: each gives one line and exit 2 (catalogue.run_case)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import safetensors.torch
import torch
import yaml
from catalogue import (
    Case,
    Ctx,
    case_tests,
    edited_config,
    generate,
    hf_dir,
    hf_json,
    score,
    translate,
)
from safetensors import SafetensorError

from tformer.tokenization import CharTokenizer

ENOSPC = 'Error while serializing: I/O error: No space left on device (os error 28) at path "{}"'


# --- the builders ---------------------------------------------------------------------------------------


def manifest_entry(c: Ctx, checkpoint: Path, name: str, entry: object) -> str:
    """A copy of `checkpoint` whose manifest.json has `entry` for `name` (None: the whole manifest is `entry`)."""
    path = c.copy(checkpoint, "ckpt")
    data = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps(entry if name is None else data | {name: entry}))
    return str(path)


def edited_meta(c: Ctx, checkpoint: Path, **changes: object) -> str:
    """A copy of `checkpoint` (no manifest) whose config.yaml has the top-level `changes`."""
    meta = yaml.safe_load((checkpoint / "config.yaml").read_text())
    return edited_config(c, checkpoint, yaml.safe_dump(meta | changes))


def swapped_ids(c: Ctx, *, manifest: bool = True) -> str:
    """A copy of the translator whose tokenizer.json has the ids of 'a' and 'b' swapped: same size, other ids."""
    path = c.copy(c.w.s2s, "ckpt", manifest=manifest)
    file = path / "tokenizer" / "tokenizer.json"
    text = file.read_text()
    a, b = (re.search(rf'\n\s*"{t}": (\d+),', text).group(1) for t in "ab")
    text = text.replace(f'"a": {a},', '"a": @,').replace(f'"b": {b},', f'"b": {a},').replace('"a": @,', f'"a": {b},')
    file.write_text(text)
    return str(path)


def added_tokenizer_file(c: Ctx) -> str:
    """A copy of the translator with a character tokenizer put beside its tokenizer.json after the save."""
    path = c.copy(c.w.s2s, "ckpt")
    CharTokenizer(list("abc")).save(path / "tokenizer")
    return str(path)


def garbage(c: Ctx, checkpoint: Path, name: str, *, manifest: bool = False) -> str:
    """A copy of `checkpoint` whose file `name` is random bytes of the same size."""
    path = c.copy(checkpoint, "ckpt", manifest=manifest)
    file = path / name
    file.write_bytes(os.urandom(file.stat().st_size))
    return str(path)


def char_chars(c: Ctx, chars: object) -> str:
    path = c.copy(c.w.gpt, "ckpt", manifest=False)
    file = path / "tokenizer" / "char_tokenizer.json"
    file.write_text(json.dumps(json.loads(file.read_text()) | {"chars": chars}))
    return str(path)


def sharded(path: Path, weight_map: object) -> None:
    """The directory's weights behind an index whose weight_map is `weight_map`."""
    (path / "model.safetensors").rename(path / "model-00001-of-00001.safetensors")
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def shard_named(name: str | None = None, *, link_to: Path | None = None):
    """An edit that shards the weights into one file named `name` (or linked to `link_to`) by the index."""
    def edit(path: Path) -> None:
        sharded(path, {"transformer.wte.weight": name or "model-00001-of-00001.safetensors"})
        if link_to is not None:
            (path / "model-00001-of-00001.safetensors").unlink()
            os.symlink(link_to, path / "model-00001-of-00001.safetensors")
    return edit


def outside_shard(c: Ctx) -> list[str]:
    """An index naming ../../../outside.safetensors, a valid weights file that lies outside the directory."""
    argv = hf_dir(c, shard_named("../../../outside.safetensors"))
    target = (c.tmp / "hf" / "../../../outside.safetensors").resolve()
    assert not target.exists()
    return argv


def linked_weights(c: Ctx) -> list[str]:
    """model.safetensors a link to a file outside the directory (here a copy of the real one)."""
    outside = c.tmp / "elsewhere.safetensors"
    outside.write_bytes((c.w.hf / "model.safetensors").read_bytes())

    def edit(path: Path) -> None:
        (path / "model.safetensors").unlink()
        os.symlink(outside, path / "model.safetensors")
    return hf_dir(c, edit)


class Code:
    """Pickles as a call of os.system: what a malicious pytorch_model.bin carries."""

    def __reduce__(self) -> tuple:
        return os.system, ("echo owned",)


def pickled_code(path: Path) -> None:
    (path / "model.safetensors").unlink()
    torch.save({"transformer.wte.weight": torch.zeros(2), "x": Code()}, path / "pytorch_model.bin")


def corrupt_bin(path: Path) -> None:
    (path / "model.safetensors").unlink()
    (path / "pytorch_model.bin").write_bytes(os.urandom(300))


def full_disk(c: Ctx, *, existing: bool) -> list[str]:
    """convert --from-hf into {tmp}/out while the disk is full: safetensors raises its own error (ENOSPC);
    with `existing`, a checkpoint is already at {tmp}/out."""
    if existing:
        c.copy(c.w.gpt, "out")

    def no_space(tensors: dict, filename: str, metadata: dict | None = None) -> None:
        raise SafetensorError(ENOSPC.format(filename))

    c.monkeypatch.setattr(safetensors.torch, "save_file", no_space)
    return ["convert", "--from-hf", str(c.w.hf), "--out", f"{c.tmp}/out"]


def _raw_manifest(c: Ctx, data: bytes) -> str:
    path = c.copy(c.w.gpt, "ckpt")
    (path / "manifest.json").write_bytes(data)
    return str(path)


def _truncated_tokenizer(c: Ctx) -> str:
    path = c.copy(c.w.clf, "ckpt")
    (path / "tokenizer" / "tokenizer.json").write_text("0123456789")
    return str(path)


def _unlisted(c: Ctx, name: str) -> str:
    path = c.copy(c.w.gpt, "ckpt")
    data = json.loads((path / "manifest.json").read_text())
    del data[name]
    (path / "manifest.json").write_text(json.dumps(data))
    return str(path)


SCHEMA = 'must be {"bytes": N, "sha256": "<64 hex digits>"}'

def linked(c: Ctx) -> str:
    """A symbolic link out.de in the case's directory to its s.en: another name for the input."""
    (c.tmp / "out.de").symlink_to(c.tmp / "s.en")
    return f"{c.tmp}/out.de"


CASES = [
    # 13: the manifest's schema, and config.yaml's types
    Case("manifest-entry-a-string", lambda c: generate(c, checkpoint=manifest_entry(c, c.w.gpt, "model.safetensors",
                                                                                     "abc")),
         ("checkpoint {tmp}/ckpt: manifest.json entry 'model.safetensors' " + SCHEMA + ", not 'abc'",)),
    Case("manifest-entry-without-sha256",
         lambda c: generate(c, checkpoint=manifest_entry(c, c.w.gpt, "model.safetensors", {"bytes": 10})),
         ("manifest.json entry 'model.safetensors' lacks 'sha256'",)),
    Case("manifest-entry-bad-digest", lambda c: generate(c, checkpoint=manifest_entry(
        c, c.w.gpt, "config.yaml", {"bytes": 10, "sha256": "xyz"})),
         ("manifest.json entry 'config.yaml' has sha256='xyz'; expected 64 lower-case hex digits",)),
    Case("manifest-entry-bad-size", lambda c: generate(c, checkpoint=manifest_entry(
        c, c.w.gpt, "config.yaml", {"bytes": "10", "sha256": "0" * 64})),
         ("manifest.json entry 'config.yaml' has bytes='10'; expected an integer >= 0",)),
    Case("manifest-entry-unknown-key", lambda c: generate(c, checkpoint=manifest_entry(
        c, c.w.gpt, "config.yaml", {"bytes": 1, "sha256": "0" * 64, "md5": "x"})),
         ("manifest.json entry 'config.yaml' has unknown key 'md5'",)),
    Case("manifest-entry-outside", lambda c: generate(c, checkpoint=manifest_entry(
        c, c.w.gpt, "../x", {"bytes": 1, "sha256": "0" * 64})),
         ("manifest.json entry '../x' is not the name of a file inside the checkpoint",)),
    Case("manifest-not-a-mapping", lambda c: generate(c, checkpoint=manifest_entry(c, c.w.gpt, None, [1, 2])),
         ("checkpoint {tmp}/ckpt: manifest.json must map each file's name to", "not list")),
    Case("manifest-not-json", lambda c: generate(c, checkpoint=_raw_manifest(c, b"{not json")),
         ("checkpoint {tmp}/ckpt: manifest.json is corrupt",)),
    Case("manifest-not-utf8", lambda c: generate(c, checkpoint=_raw_manifest(c, b"\xff\xfe{}")),
         ("checkpoint {tmp}/ckpt: manifest.json is corrupt (not UTF-8: byte 0)",)),
    Case("config-family-a-list", lambda c: generate(c, checkpoint=edited_meta(c, c.w.gpt, family=["gpt"])),
         ("checkpoint {tmp}/ckpt: config.yaml has family=['gpt']; known: seq2seq, bert, gpt, rnn",)),
    Case("config-family-a-mapping", lambda c: generate(c, checkpoint=edited_meta(c, c.w.gpt, family={"a": 1})),
         ("config.yaml has family={'a': 1}; known: seq2seq, bert, gpt, rnn",)),
    Case("config-model-a-list", lambda c: generate(c, checkpoint=edited_meta(c, c.w.gpt, model=["GPT"])),
         ("checkpoint {tmp}/ckpt: config.yaml has model=['GPT']; expected the name of a model class",)),
    Case("config-config-a-list", lambda c: generate(c, checkpoint=edited_meta(c, c.w.gpt, config=[1])),
         ("checkpoint {tmp}/ckpt: config.yaml:", "expected a mapping")),
    Case("config-field-wrong-type", lambda c: generate(c, checkpoint=edited_config(c, c.w.gpt, d_model=[32])),
         ("checkpoint {tmp}/ckpt: config.yaml:", "'d_model'=[32] has the wrong type")),
    # 14: every file is covered, and a file not in the manifest is refused
    Case("tokenizer-ids-swapped", lambda c: translate(c, checkpoint=swapped_ids(c)),
         ("checkpoint {tmp}/ckpt: tokenizer/tokenizer.json does not match its SHA-256 in manifest.json",)),
    Case("tokenizer-file-added", lambda c: translate(c, checkpoint=added_tokenizer_file(c)),
         ("checkpoint {tmp}/ckpt: tokenizer/char_tokenizer.json is not in manifest.json",)),
    Case("char-tokenizer-edited", lambda c: generate(c, checkpoint=garbage(
        c, c.w.gpt, "tokenizer/char_tokenizer.json", manifest=True)),
         ("checkpoint {tmp}/ckpt: tokenizer/char_tokenizer.json does not match its SHA-256",)),
    Case("wordpiece-tokenizer-truncated", lambda c: ["classify", "--checkpoint", _truncated_tokenizer(c)],
         ("checkpoint {tmp}/ckpt: tokenizer/tokenizer.json has 10 bytes, the manifest says",)),
    Case("weights-edited-same-size", lambda c: generate(c, checkpoint=garbage(c, c.w.gpt, "model.safetensors",
                                                                              manifest=True)),
         ("checkpoint {tmp}/ckpt: model.safetensors does not match its SHA-256",)),
    Case("config-not-in-manifest", lambda c: generate(c, checkpoint=_unlisted(c, "config.yaml")),
         ("checkpoint {tmp}/ckpt: config.yaml is not in manifest.json",)),
    # 15: Hugging Face directories, through the one confined resolver
    Case("hf-model-type-a-list", lambda c: hf_dir(c, lambda p: hf_json(p, model_type=["gpt2"])),
         ("{tmp}/hf/config.json: model_type=['gpt2'] is not supported", "bert, gpt2, llama, marian, pegasus")),
    Case("hf-config-a-list", lambda c: hf_dir(c, lambda p: (p / "config.json").write_text("[1]")),
         ("{tmp}/hf/config.json must hold a JSON object, not list",)),
    Case("hf-config-not-utf8", lambda c: hf_dir(c, lambda p: (p / "config.json").write_bytes(b'{"a": "\xff"}')),
         ("{tmp}/hf/config.json is not valid JSON (not UTF-8: byte 7)",)),
    Case("hf-config-value-wrong-type", lambda c: hf_dir(c, lambda p: hf_json(p, n_embd="16")),
         ("{tmp}/hf: d_model='16' must be a positive integer",)),
    Case("hf-weights-random-bytes",
         lambda c: hf_dir(c, lambda p: (p / "model.safetensors").write_bytes(os.urandom(4000))),
         ("{tmp}/hf/model.safetensors is not a valid safetensors file",)),
    Case("hf-weights-empty", lambda c: hf_dir(c, lambda p: (p / "model.safetensors").write_bytes(b"")),
         ("{tmp}/hf/model.safetensors is not a valid safetensors file",)),
    Case("hf-index-without-weight-map", lambda c: hf_dir(c, lambda p: sharded(p, None)),
         ("{tmp}/hf/model.safetensors.index.json: expected a JSON object with a non-empty \"weight_map\"",)),
    Case("hf-index-weight-map-a-list", lambda c: hf_dir(c, lambda p: sharded(p, ["a.safetensors"])),
         ("model.safetensors.index.json: expected a JSON object with a non-empty \"weight_map\"",
          "found weight_map=['a.safetensors']")),
    Case("hf-index-shard-not-a-name", lambda c: hf_dir(c, lambda p: sharded(p, {"w": 5})),
         ("model.safetensors.index.json: weight_map maps 'w' to 5; expected a shard file name",)),
    Case("hf-index-absolute-shard", lambda c: hf_dir(c, shard_named("/etc/passwd")),
         ("{tmp}/hf/model.safetensors.index.json names '/etc/passwd', which is outside {tmp}/hf",)),
    Case("hf-index-parent-shard", outside_shard,
         ("index.json names '../../../outside.safetensors', which is outside {tmp}/hf",)),
    Case("hf-index-missing-shard", lambda c: hf_dir(c, shard_named("model-00002.safetensors")),
         ("index.json names 'model-00002.safetensors', which does not exist",)),
    Case("hf-index-shard-links-outside", lambda c: hf_dir(c, shard_named(link_to=Path("/etc/hostname"))),
         ("{tmp}/hf/model-00001-of-00001.safetensors is a link to", "outside {tmp}/hf")),
    Case("hf-weights-link-outside", linked_weights,
         ("{tmp}/hf/model.safetensors is a link to {tmp}/elsewhere.safetensors, outside {tmp}/hf",)),
    Case("hf-pickled-code", lambda c: hf_dir(c, pickled_code),
         ("{tmp}/hf/pytorch_model.bin holds pickled objects or code beside its tensors, which are not loaded",
          "GLOBAL posix.system")),
    Case("hf-bin-corrupt", lambda c: hf_dir(c, corrupt_bin), ("{tmp}/hf/pytorch_model.bin is not a valid weights",)),
    # 16: tokenizer files of garbage (no manifest: the loader's own check)
    Case("char-tokenizer-garbage", lambda c: generate(c, checkpoint=garbage(c, c.w.gpt,
                                                                            "tokenizer/char_tokenizer.json")),
         ("{tmp}/ckpt/tokenizer/char_tokenizer.json: not a character tokenizer file (not UTF-8",)),
    Case("char-tokenizer-chars-not-strings", lambda c: generate(c, checkpoint=char_chars(c, [1, 2])),
         ("{tmp}/ckpt/tokenizer/char_tokenizer.json: not a character tokenizer (1 is not one character",)),
    Case("char-tokenizer-chars-repeated", lambda c: generate(c, checkpoint=char_chars(c, ["a", "a"])),
         ("char_tokenizer.json: not a character tokenizer (a character is listed twice",)),
    Case("bpe-tokenizer-garbage", lambda c: translate(c, checkpoint=garbage(c, c.w.s2s, "tokenizer/tokenizer.json")),
         ("{tmp}/ckpt/tokenizer/tokenizer.json: not a valid tokenizer file",)),
    # 17: a full disk while writing (injected: safetensors raises its own error for ENOSPC)
    Case("convert-disk-full", lambda c: full_disk(c, existing=False),
         ("cannot write checkpoint {tmp}/out: No space left on device",)),
    Case("convert-disk-full-over-a-checkpoint", lambda c: full_disk(c, existing=True),
         ("cannot write checkpoint {tmp}/out: No space left on device (the previous one there is kept)",)),
    Case("output-is-the-input", lambda c: translate(c, "-i", c.file("s.en", "the cat\n"), "-o", f"{c.tmp}/s.en"),
         ("--output {tmp}/s.en is the input {tmp}/s.en: writing it would replace what is read",)),
    Case("output-links-to-the-input", lambda c: translate(c, "-i", c.file("s.en", "the cat\n"), "-o", linked(c)),
         ("--output {tmp}/out.de is the input {tmp}/s.en",)),
    Case("score-output-is-the-file", lambda c: [*score(c, "s.txt", "the cat\n"), "-o", f"{c.tmp}/s.txt"],
         ("--output {tmp}/s.txt is the input {tmp}/s.txt",)),
    Case("generate-output-is-the-input", lambda c: ["generate", "--checkpoint", str(c.w.gpt), "-i",
                                                   c.file("p.txt", "In\n"), "-o", f"{c.tmp}/p.txt"],
         ("--output {tmp}/p.txt is the input {tmp}/p.txt",)),
]


test_bad_input, test_every_case_is_in_the_catalogue = case_tests(CASES)
