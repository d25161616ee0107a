"""The one way to reach a Hugging Face directory's files (interop/hffiles.py): confined to the directory (but
a Hugging Face cache snapshot, whose files are links into the cache's blobs/), shards included; and an export
that meets a full disk says so in one line and leaves nothing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import torch
from safetensors import SafetensorError

import tformer
from tformer.interop import from_hf, to_hf
from tformer.interop.hffiles import hf_file, weight_files
from tformer.tokenization import BPETokenizer


def tiny_gpt() -> tformer.GPT:
    return tformer.GPT(tformer.GPTConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=16))


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "gpt2"
    to_hf(tiny_gpt(), path)
    return path


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", "..", "\\etc\\passwd", "C:/x", "", 5, None])
def test_names_outside_the_directory_are_refused(checkpoint: Path, name: object) -> None:
    with pytest.raises(ValueError, match="outside|not a file name"):
        hf_file(checkpoint, name)


def test_a_link_inside_the_directory_is_followed(checkpoint: Path) -> None:
    (checkpoint / "sub").mkdir()
    os.replace(checkpoint / "model.safetensors", checkpoint / "sub" / "w.safetensors")
    os.symlink("sub/w.safetensors", checkpoint / "model.safetensors")
    assert weight_files(checkpoint) == [checkpoint / "model.safetensors"]
    from_hf(checkpoint)


def test_a_hugging_face_cache_snapshot_loads(checkpoint: Path, tmp_path: Path) -> None:
    """models--x/snapshots/<rev>/ holds links to models--x/blobs/<hash>: those stay allowed."""
    repo = tmp_path / "models--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for file in checkpoint.iterdir():
        shutil.copy(file, repo / "blobs" / f"hash-{file.name}")
        os.symlink(f"../../blobs/hash-{file.name}", snapshot / file.name)
    model, _ = from_hf(snapshot)
    assert torch.equal(model.lm_head.weight, from_hf(checkpoint)[0].lm_head.weight)


def test_a_directory_named_like_a_snapshot_still_confines(checkpoint: Path, tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshots" / "rev"
    snapshot.mkdir(parents=True)
    shutil.copy(checkpoint / "config.json", snapshot / "config.json")
    os.symlink(checkpoint / "model.safetensors", snapshot / "model.safetensors")
    with pytest.raises(ValueError, match="is a link to .* outside"):
        from_hf(snapshot)


def test_a_sharded_index_with_two_shards(checkpoint: Path) -> None:
    weights = safetensors.torch.load_file(checkpoint / "model.safetensors")
    names = sorted(weights)
    half = len(names) // 2
    parts = {"a.safetensors": names[:half], "b.safetensors": names[half:]}
    for shard, keys in parts.items():
        safetensors.torch.save_file({k: weights[k] for k in keys}, checkpoint / shard)
    (checkpoint / "model.safetensors").unlink()
    weight_map = {k: shard for shard, keys in parts.items() for k in keys}
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert [p.name for p in weight_files(checkpoint)] == ["a.safetensors", "b.safetensors"]
    from_hf(checkpoint)


def test_an_export_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(tensors: dict, filename: str, metadata: dict | None = None) -> None:
        raise SafetensorError('Error while serializing: I/O error: No space left on device (os error 28) at path "x"')

    monkeypatch.setattr("tformer.interop.hf.save_file", no_space)
    with pytest.raises(ValueError, match=r"cannot write .*out: No space left on device$"):
        to_hf(tiny_gpt(), tmp_path / "out", tokenizer=None)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match=r"cannot write .*out: No space left on device \(what was there is kept\)"):
        to_hf(tiny_gpt(), tmp_path / "out", tokenizer=None)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_tokenizer_beside_the_weights_is_confined_too(checkpoint: Path, tmp_path: Path) -> None:
    from tformer.interop.hf import tokenizer_file

    assert tokenizer_file(checkpoint) is None
    BPETokenizer.train(["the cat"] * 3, vocab_size=270).save(tmp_path)
    os.symlink(tmp_path / "tokenizer.json", checkpoint / "tokenizer.json")
    with pytest.raises(ValueError, match="is a link to .* outside"):
        tokenizer_file(checkpoint)
