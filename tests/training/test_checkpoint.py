"""Checkpoints: weights and outputs round-trip, tied weights stay tied, training resumes bitwise, RNG
states come back, and a failed save never damages the checkpoint already there."""

import os
import random
from pathlib import Path

import numpy as np
import pytest
import safetensors
import torch
from torch import nn

from tformer.config import GPTConfig
from tformer.models import BertClassifier
from tformer.models.presets import build_model, preset
from tformer.training.checkpoint import (
    load_config,
    load_model,
    load_training_state,
    save_checkpoint,
    tokenizer_dir,
)
from tformer.training.losses import label_smoothed_nll
from tformer.training.optim import OptimConfig, build_optimizer
from tformer.training.schedules import ScheduleConfig, build_scheduler

SMALL = dict(vocab_size=40, d_model=16, d_ff=32, n_heads=2, n_layers=1, max_len=16)
TIED = {  # family preset -> names that must be one tensor
    "gpt-tiny": ("embed.tokens.weight", "lm_head.weight"),
    "bert-tiny": ("bert.embed.tokens.weight", "mlm_head.decoder.weight"),
    "transformer-tiny": ("src_embed.tokens.weight", "tgt_embed.tokens.weight", "lm_head.weight"),
}


class FakeTokenizer:
    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab

    def save(self, directory: Path) -> None:
        (directory / "vocab.txt").write_text("\n".join(self.vocab))

    @classmethod
    def load(cls, directory: Path) -> "FakeTokenizer":
        return cls((directory / "vocab.txt").read_text().split("\n"))


def tiny(name: str) -> tuple[nn.Module, object]:
    torch.manual_seed(0)
    config = preset(name, SMALL)
    return build_model(config), config


def outputs(model: nn.Module) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 40, (2, 6), generator=g)
    model.eval()
    with torch.no_grad():
        out = model(ids, ids[:, :4]) if "src_embed" in dict(model.named_modules()) else model(ids)
    return list(out) if isinstance(out, tuple) else [out]


def param(model: nn.Module, name: str) -> torch.Tensor:
    return model.get_parameter(name)


@pytest.mark.parametrize("name", list(TIED))
def test_weights_outputs_and_ties_round_trip(tmp_path, name):
    model, config = tiny(name)
    save_checkpoint(tmp_path / "ckpt", model=model, config=config)
    loaded, loaded_config = load_model(tmp_path / "ckpt")
    assert type(loaded) is type(model) and loaded_config == config
    assert not loaded.training
    before, after = model.state_dict(), loaded.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    for a, b in zip(outputs(model), outputs(loaded), strict=True):
        assert torch.equal(a, b)
    first, *others = TIED[name]
    assert all(param(loaded, o) is param(loaded, first) for o in others)
    with safetensors.safe_open(tmp_path / "ckpt" / "model.safetensors", "pt") as f:
        assert len([k for k in f.keys() if k in TIED[name]]) == 1  # one copy on disk
    with torch.no_grad():  # still tied: an update through one name is seen through the others
        param(loaded, first).add_(1.0)
    assert torch.equal(param(loaded, others[0]), param(loaded, first))


def test_untied_llama_and_classifier_round_trip(tmp_path):
    model, config = tiny("llama-tiny")
    save_checkpoint(tmp_path / "llama", model=model, config=config)
    loaded, _ = load_model(tmp_path / "llama")
    assert loaded.lm_head.weight is not loaded.embed.tokens.weight
    assert torch.equal(outputs(model)[0], outputs(loaded)[0])

    torch.manual_seed(0)
    config = preset("bert-tiny", SMALL)
    classifier = BertClassifier(config)
    save_checkpoint(tmp_path / "cls", model=classifier, config=config)
    loaded, _ = load_model(tmp_path / "cls")
    assert type(loaded) is BertClassifier
    assert torch.equal(outputs(classifier)[0], outputs(loaded)[0])


def test_config_and_tokenizer_are_saved(tmp_path):
    model, config = tiny("gpt-tiny")
    save_checkpoint(tmp_path / "c", model=model, config=config, tokenizer=FakeTokenizer(["<pad>", "a", "b"]))
    loaded_config, class_name = load_config(tmp_path / "c")
    assert isinstance(loaded_config, GPTConfig) and loaded_config == config and class_name == "GPT"
    assert FakeTokenizer.load(tokenizer_dir(tmp_path / "c")).vocab == ["<pad>", "a", "b"]
    assert not (tmp_path / "c" / "trainer.pt").exists()  # no training state given, none written


def train(model, opt, sched, steps: int) -> None:
    """Steps that draw from every RNG: data from torch, dropout from torch, a shuffle from python/numpy."""
    model.train()
    for _ in range(steps):
        ids = torch.randint(1, 40, (3, 8))
        ids = ids[torch.from_numpy(np.random.permutation(3))][random.sample(range(3), 3)]
        loss, n = label_smoothed_nll(model(ids[:, :-1]), ids[:, 1:], smoothing=0.1, ignore_index=0)
        (loss / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)


OPTIM = OptimConfig(name="adamw", lr=1e-2, weight_decay=0.01)
SCHEDULE = ScheduleConfig(name="cosine", warmup=2, total_steps=10)


def fresh_trainer(model):
    opt = build_optimizer(model, OPTIM)
    return opt, build_scheduler(opt, SCHEDULE, d_model=16, lr=OPTIM.lr)


def resume(path, *, restore_rng: bool = True):
    model, _ = load_model(path)  # building draws random numbers; the RNG is restored after it
    opt, sched = fresh_trainer(model)
    state = load_training_state(path, optimizer=opt, scheduler=sched, restore_rng=restore_rng)
    return model, opt, sched, state


def test_resume_continues_bitwise(tmp_path):
    random.seed(0)
    np.random.seed(0)
    model, config = tiny("gpt-tiny")  # dropout 0.1: the masks depend on the restored torch RNG
    opt, sched = fresh_trainer(model)
    train(model, opt, sched, 2)
    saved = {"step": 2, "epoch": 1, "batch": 7, "best": None, "history": [1.0, 2.0]}
    save_checkpoint(tmp_path / "ckpt", model=model, config=config, optimizer=opt, scheduler=sched,
                    state=saved)
    train(model, opt, sched, 3)
    reference = model.state_dict()

    resumed, opt2, sched2, state = resume(tmp_path / "ckpt")
    assert state == saved
    assert sched2.last_epoch == 2
    train(resumed, opt2, sched2, 3)
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    after = resumed.state_dict()
    assert all(torch.equal(reference[k], after[k]) for k in reference)

    other, opt3, sched3, _ = resume(tmp_path / "ckpt", restore_rng=False)  # the RNG matters
    torch.manual_seed(123)
    train(other, opt3, sched3, 3)
    assert not all(torch.equal(reference[k], v) for k, v in other.state_dict().items())

    torch.manual_seed(7)  # resume in place: weights into a model built elsewhere, as the loop does
    in_place = build_model(config)
    opt4, sched4 = fresh_trainer(in_place)
    load_training_state(tmp_path / "ckpt", optimizer=opt4, scheduler=sched4, model=in_place)
    assert in_place.lm_head.weight is in_place.embed.tokens.weight
    train(in_place, opt4, sched4, 3)
    assert all(torch.equal(reference[k], v) for k, v in in_place.state_dict().items())


def test_rng_states_are_restored(tmp_path):
    model, config = tiny("gpt-tiny")
    opt, sched = fresh_trainer(model)
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    np.random.normal()  # leave a cached gaussian in numpy's state
    save_checkpoint(tmp_path / "ckpt", model=model, config=config, optimizer=opt, scheduler=sched)
    draws = (random.random(), np.random.normal(), np.random.rand(), torch.rand(3))
    load_training_state(tmp_path / "ckpt")
    again = (random.random(), np.random.normal(), np.random.rand(), torch.rand(3))
    assert draws[:3] == again[:3] and torch.equal(draws[3], again[3])


class Explodes(FakeTokenizer):
    def save(self, directory: Path) -> None:
        (directory / "vocab.txt").write_text("half")
        raise RuntimeError("disk full")


def test_failed_save_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    model, config = tiny("gpt-tiny")
    good = {k: v.clone() for k, v in model.state_dict().items()}
    save_checkpoint(tmp_path / "ckpt", model=model, config=config, tokenizer=FakeTokenizer(["x"]))
    with torch.no_grad():
        model.lm_head.weight.mul_(2.0)

    with pytest.raises(RuntimeError, match="disk full"):  # fails half way through writing
        save_checkpoint(tmp_path / "ckpt", model=model, config=config, tokenizer=Explodes(["y"]))
    real_replace = os.replace

    def failing_replace(src, dst):  # fails at the publishing rename, after the old one moved aside
        if ".tmp-" in str(src):
            raise OSError("rename failed")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(ValueError, match="cannot write checkpoint .*ckpt: rename failed"):
        save_checkpoint(tmp_path / "ckpt", model=model, config=config, tokenizer=FakeTokenizer(["z"]))
    monkeypatch.undo()

    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary siblings left
    loaded, _ = load_model(tmp_path / "ckpt")
    assert all(torch.equal(good[k], v) for k, v in loaded.state_dict().items())
    assert FakeTokenizer.load(tokenizer_dir(tmp_path / "ckpt")).vocab == ["x"]

    save_checkpoint(tmp_path / "ckpt", model=model, config=config)  # a good save does replace it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert torch.equal(load_model(tmp_path / "ckpt")[0].lm_head.weight, model.lm_head.weight)
    assert tokenizer_dir(tmp_path / "ckpt") is None


def test_missing_or_corrupt_checkpoints_are_named(tmp_path):
    model, config = tiny("gpt-tiny")
    path = tmp_path / "ckpt"
    with pytest.raises(ValueError, match=r"ckpt: no such directory"):
        load_model(path)
    save_checkpoint(path, model=model, config=config, state={"step": 1})
    (path / "trainer.pt").unlink()
    with pytest.raises(ValueError, match=r"ckpt: missing trainer.pt"):
        load_training_state(path)

    (path / "trainer.pt").write_bytes(b"not a pickle")
    (path / "manifest.json").unlink()  # as a checkpoint from before manifests: the loader itself must object
    with pytest.raises(ValueError, match=r"ckpt: trainer.pt is corrupt"):
        load_training_state(path)
    (path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00garbage!")
    with pytest.raises(ValueError, match=r"ckpt: cannot load model.safetensors into GPT"):
        load_model(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"ckpt: missing model.safetensors"):
        load_model(path)
    (path / "config.yaml").write_text("family: cnn\nconfig: {}\n")
    with pytest.raises(ValueError, match=r"ckpt: config.yaml has family='cnn'"):
        load_model(path)
    (path / "config.yaml").write_text("family: gpt\nconfig: {d_model: 17, n_heads: 2}\n")
    with pytest.raises(ValueError, match=r"ckpt: config.yaml: d_model=17"):
        load_model(path)


def test_weights_of_another_architecture_are_refused(tmp_path):
    model, config = tiny("gpt-tiny")
    save_checkpoint(tmp_path / "ckpt", model=model, config=config)
    bert, bert_config = tiny("bert-tiny")
    save_checkpoint(tmp_path / "bert", model=bert, config=bert_config)
    os.replace(tmp_path / "bert" / "model.safetensors", tmp_path / "ckpt" / "model.safetensors")
    with pytest.raises(ValueError, match=r"model.safetensors has \d+ bytes, the manifest says"):
        load_model(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "manifest.json").unlink()  # without the manifest, loading itself must refuse
    with pytest.raises(ValueError, match="cannot load model.safetensors into GPT"):
        load_model(tmp_path / "ckpt")


def test_a_file_is_not_overwritten(tmp_path):
    model, config = tiny("gpt-tiny")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        save_checkpoint(tmp_path / "file", model=model, config=config)


def test_truncated_or_altered_files_are_caught_by_the_manifest(tmp_path):
    model, config = tiny("gpt-tiny")
    path = tmp_path / "ckpt"
    save_checkpoint(path, model=model, config=config, state={"step": 3})
    assert load_training_state(path)["step"] == 3
    weights = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(weights[: len(weights) // 2])  # a copy cut short
    with pytest.raises(ValueError, match=r"ckpt: model.safetensors has \d+ bytes, the manifest says \d+"):
        load_model(path)
    flipped = bytearray(weights)
    flipped[-1] ^= 0xFF  # same size, one byte of one weight changed
    (path / "model.safetensors").write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match=r"ckpt: model.safetensors does not match its SHA-256"):
        load_model(path)


def test_a_full_disk_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    import errno

    model, config = tiny("gpt-tiny")
    path = tmp_path / "ckpt"
    save_checkpoint(path, model=model, config=config)
    before = (path / "model.safetensors").read_bytes()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)  # trainer.pt is written after the weights
    with pytest.raises(ValueError, match=r"cannot write checkpoint .*ckpt: No space left on device \(the previous"):
        save_checkpoint(path, model=model, config=config, state={"step": 1})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # nothing half-written beside it
    assert (path / "model.safetensors").read_bytes() == before
    load_model(path)  # still verifies


def test_keep_previous_as_keeps_the_replaced_checkpoint(tmp_path):
    model, config = tiny("gpt-tiny")
    save_checkpoint(tmp_path / "last", model=model, config=config, state={"step": 1})
    save_checkpoint(tmp_path / "last", model=model, config=config, state={"step": 2},
                    keep_previous_as=tmp_path / "step-00000001")
    assert load_training_state(tmp_path / "step-00000001", restore_rng=False)["step"] == 1
    assert load_training_state(tmp_path / "last", restore_rng=False)["step"] == 2
