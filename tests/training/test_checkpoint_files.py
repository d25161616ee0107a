"""A checkpoint's files: the manifest lists every one (the tokenizer's too) and refuses what it does not list;
old checkpoints still load; and a write that fails (a full disk, a file-size limit) while writing the weights,
trainer.pt or the tokenizer reads `cannot write checkpoint <path>: <reason> (the previous one there is kept)`,
with the previous checkpoint intact and nothing left beside it. The failures are injected: the OSError a full
disk raises, in the write of the file object torch.save is given, and the error safetensors and tokenizers
raise for it in Rust; and a real one, from the kernel, under a file-size limit (RLIMIT_FSIZE)."""

from __future__ import annotations

import errno
import io
import json
import os
import resource
import signal
from pathlib import Path

import pytest
import safetensors.torch
import torch
from safetensors import SafetensorError
from tokenizers import Tokenizer as Backend

from tformer.manifest import read_manifest, verify_checkpoint
from tformer.models.presets import build_model, preset
from tformer.tokenization import BPETokenizer, CharTokenizer, load_tokenizer
from tformer.training.checkpoint import load_model, load_training_state, save_checkpoint

SMALL = dict(vocab_size=40, d_model=16, d_ff=32, n_heads=2, n_layers=1, max_len=16)
NO_SPACE = "No space left on device"


def tiny() -> tuple[torch.nn.Module, object]:
    config = preset("gpt-tiny", SMALL)
    return build_model(config), config


def with_optimizer(path: Path, **kwargs: object) -> None:
    model, config = tiny()
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    optimizer.step()
    save_checkpoint(path, model=model, config=config, optimizer=optimizer, state={"step": 1}, **kwargs)


def unchanged(path: Path, before: dict[str, bytes]) -> None:
    """`path` holds exactly the files of `before`, and nothing else lies beside it."""
    assert {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    verify_checkpoint(path)


def files(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


# --- the manifest -----------------------------------------------------------------------------------------


def test_the_manifest_lists_every_file_the_tokenizer_included(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    with_optimizer(path, tokenizer=CharTokenizer(list("abc")))
    listed = set(read_manifest(path))
    assert listed == {"model.safetensors", "config.yaml", "trainer.pt", "tokenizer/char_tokenizer.json"}
    verify_checkpoint(path)


def test_an_edited_tokenizer_is_refused_through_every_loader(tmp_path: Path) -> None:
    """load_tokenizer on the checkpoint, on its tokenizer/ and on the file, and the class's own load."""
    path = tmp_path / "ckpt"
    model, config = tiny()
    save_checkpoint(path, model=model, config=config, tokenizer=CharTokenizer(list("abc")))
    file = path / "tokenizer" / "char_tokenizer.json"
    file.write_text(file.read_text().replace('"a"', '"z"'))  # same size, another vocabulary
    for loader, where in ((load_tokenizer, path), (load_tokenizer, path / "tokenizer"), (load_tokenizer, file),
                          (CharTokenizer.load, path / "tokenizer")):
        with pytest.raises(ValueError, match="tokenizer/char_tokenizer.json does not match its SHA-256"):
            loader(where)


def test_a_bpe_tokenizer_added_after_the_save_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    model, config = tiny()
    save_checkpoint(path, model=model, config=config)
    BPETokenizer.train(["the cat sees the dog"] * 3, vocab_size=270).save(path / "tokenizer")
    with pytest.raises(ValueError, match="tokenizer/tokenizer.json is not in manifest.json"):
        BPETokenizer.load(path / "tokenizer")


def test_trainer_state_added_after_the_save_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    with_optimizer(tmp_path / "other")
    model, config = tiny()
    save_checkpoint(path, model=model, config=config)
    (path / "trainer.pt").write_bytes((tmp_path / "other" / "trainer.pt").read_bytes())
    with pytest.raises(ValueError, match="trainer.pt is not in manifest.json"):
        load_training_state(path, restore_rng=False)
    with pytest.raises(ValueError, match="trainer.pt is not in manifest.json"):
        verify_checkpoint(path)


def test_verify_checkpoint_names_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    with_optimizer(path)
    (path / "trainer.pt").unlink()
    with pytest.raises(ValueError, match="missing trainer.pt, which manifest.json lists"):
        verify_checkpoint(path)


def test_checkpoints_of_before_still_load(tmp_path: Path) -> None:
    """Without a manifest (written before manifests), and with the manifest format they were written with."""
    path = tmp_path / "ckpt"
    model, config = tiny()
    save_checkpoint(path, model=model, config=config, tokenizer=CharTokenizer(list("abc")))
    (path / "manifest.json").unlink()
    load_model(path)
    load_tokenizer(path)
    save_checkpoint(path, model=model, config=config, tokenizer=CharTokenizer(list("abc")))
    manifest = json.loads((path / "manifest.json").read_text())
    assert all(set(entry) == {"bytes", "sha256"} for entry in manifest.values())  # the format of round one


# --- a failed write --------------------------------------------------------------------------------------


class FullDisk(io.RawIOBase):
    """A file whose writes fail as a full disk's do."""

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_while_writing_trainer_pt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.save is given a file object, so the OSError of its write comes through, not torch's
    "[enforce fail at inline_container.cc]"."""
    path = tmp_path / "ckpt"
    with_optimizer(path)
    before = files(path)
    real = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f, **kw: real(obj, FullDisk(), **kw))
    with pytest.raises(ValueError, match=rf"cannot write checkpoint .*ckpt: {NO_SPACE} \(the previous one there is "
                                         r"kept\)$"):
        with_optimizer(path)
    monkeypatch.undo()
    unchanged(path, before)


def test_a_full_disk_while_writing_the_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """safetensors reports ENOSPC as its own SafetensorError, '... (os error 28) ...'."""
    path = tmp_path / "ckpt"
    with_optimizer(path)
    before = files(path)

    def no_space(tensors: dict, filename: str, metadata: dict | None = None) -> None:
        raise SafetensorError(f'Error while serializing: I/O error: {NO_SPACE} (os error 28) at path "{filename}"')

    monkeypatch.setattr(safetensors.torch, "save_file", no_space)
    with pytest.raises(ValueError, match=rf"cannot write checkpoint .*ckpt: {NO_SPACE} \(the previous one there"):
        with_optimizer(path)
    monkeypatch.undo()
    unchanged(path, before)


def test_a_full_disk_while_writing_the_tokenizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tokenizers reports ENOSPC as a bare Exception, '... (os error 28)'; a new checkpoint leaves nothing."""
    def no_space(self: Backend, path: str, pretty: bool = True) -> None:
        raise Exception(f"{NO_SPACE} (os error 28)")  # noqa: TRY002 - what tokenizers raises

    monkeypatch.setattr(Backend, "save", no_space)
    model, config = tiny()
    tokenizer = BPETokenizer.train(["the cat sees the dog"] * 3, vocab_size=270)
    with pytest.raises(ValueError, match=rf"cannot write checkpoint .*ckpt: {NO_SPACE}$"):
        save_checkpoint(tmp_path / "ckpt", model=model, config=config, tokenizer=tokenizer)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("victim", ["model.safetensors", "trainer.pt"])
def test_a_real_write_failure_from_the_kernel(tmp_path: Path, victim: str) -> None:
    """Under a file-size limit the kernel fails the write with EFBIG, in Rust (safetensors) and in torch's
    writer alike: the one line names the reason, the old checkpoint stays."""
    path = tmp_path / "ckpt"
    with_optimizer(path)
    before = files(path)
    sizes = {name: len(data) for name, data in before.items()}
    limit = sizes["config.yaml"] + 1 if victim == "model.safetensors" else sizes["model.safetensors"] + 1
    assert sizes["trainer.pt"] > limit
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        with pytest.raises(ValueError, match=r"cannot write checkpoint .*ckpt: File too large \(the previous one"):
            with_optimizer(path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    unchanged(path, before)
