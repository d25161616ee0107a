"""Reading a checkpoint back (`tformer.checkpoints`): state dicts with the layer names from before the mixer
could be a state-space block (`self_attn.*`, `attn_norm.*`, now `mixer.*`, `mixer_norm.*`) load into today's
models with identical outputs, through the loader's one table (`RENAMED`), from a checkpoint file too; the
modules themselves take only today's names; and a real mismatch is named by its new key.

B batch, T length.
"""

import os
import threading
from pathlib import Path

import pytest
import torch
from torch import nn

from tformer.checkpoints import RENAMED, first_non_finite, load_model, renamed, verify_source
from tformer.models.presets import build_model, preset
from tformer.training.checkpoint import save_checkpoint


def old_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict as a model from before issue 17 wrote it."""
    new_to_old = {new: old for old, new in RENAMED.items()}

    def rename(key: str) -> str:
        head, sep, tail = key.partition(".layers.")
        if not sep:
            return key
        index, _, rest = tail.partition(".")
        for new, old in new_to_old.items():
            if rest.startswith(new):
                return f"{head}.layers.{index}.{old}{rest[len(new):]}"
        return key

    return {rename(k): v for k, v in state.items()}


def outputs(model: nn.Module, name: str) -> tuple[torch.Tensor, ...]:
    ids = torch.randint(3, 50, (2, 7), generator=torch.Generator().manual_seed(1))
    out = model(ids, ids) if name.startswith("transformer") else model(ids)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("name", ["transformer-tiny", "bert-tiny", "gpt-tiny"])
@torch.no_grad()
def test_renamed_maps_old_key_names_to_identical_outputs(name: str) -> None:
    torch.manual_seed(0)
    config = preset(name, {"n_layers": 2, "vocab_size": 50})
    trained = build_model(config).eval()
    old = old_names(trained.state_dict())
    assert any(".self_attn." in k for k in old) and any(".attn_norm." in k for k in old)
    assert not any(".mixer." in k or ".mixer_norm." in k for k in old)
    torch.manual_seed(1)  # other initial weights: only loading can make the outputs equal
    fresh = build_model(config).eval()
    fresh.load_state_dict(renamed(old), strict=True)
    for a, b in zip(outputs(trained, name), outputs(fresh, name), strict=True):
        assert torch.equal(a, b)


@torch.no_grad()
def test_old_checkpoint_file_loads_and_a_real_mismatch_names_the_new_key(tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = preset("gpt-tiny", {"n_layers": 2, "vocab_size": 50})
    model = build_model(config).eval()
    old = old_names(model.state_dict())
    save_checkpoint(tmp_path / "old", model=model, config=config, model_state=old)
    loaded, _ = load_model(tmp_path / "old")
    assert torch.equal(outputs(loaded, "gpt-tiny")[0], outputs(model, "gpt-tiny")[0])
    del old["decoder.layers.1.attn_norm.weight"]
    save_checkpoint(tmp_path / "short", model=model, config=config, model_state=old)
    with pytest.raises(ValueError, match=r"weights 1 missing \(first: decoder\.layers\.1\.mixer_norm\.weight\)$"):
        load_model(tmp_path / "short")  # the old names that are there are not reported as unexpected


def test_modules_take_only_todays_names() -> None:
    config = preset("gpt-tiny", {"n_layers": 1, "vocab_size": 50})
    model = build_model(config)
    old = old_names(model.state_dict())
    with pytest.raises(RuntimeError, match="mixer"):
        build_model(config).load_state_dict(old, strict=True)


def test_renamed_leaves_other_keys_alone() -> None:
    state = {"encoder.self_attn.weight": 1, "decoder.layers.x.self_attn.w": 2, "decoder.layers.0.attn_norm.b": 3,
             "decoder.layers.12.mlp.self_attn.w": 4}
    assert renamed(state) == {"encoder.self_attn.weight": 1, "decoder.layers.x.self_attn.w": 2,
                              "decoder.layers.0.mixer_norm.b": 3, "decoder.layers.12.mlp.self_attn.w": 4}


@pytest.mark.parametrize("inside, meant", [(("best", "last"), "best"), (("last",), "last"), ((), None)])
def test_a_run_directory_for_a_checkpoint_names_the_one_meant(tmp_path: Path, inside: tuple[str, ...],
                                                              meant: str | None) -> None:
    """The run directory (runs/tiny) given where its checkpoint (runs/tiny/best) is meant: the one place that
    reads a checkpoint's files says which one, best/ else last/; any other directory gets no guess."""
    run = tmp_path / "tiny"
    for name in inside:
        (run / name).mkdir(parents=True)
    run.mkdir(exist_ok=True)
    hint = f"; {run} is a run directory: did you mean {run / meant}?" if meant else ""
    with pytest.raises(ValueError) as e:
        load_model(run)
    assert str(e.value) == f"checkpoint {run}: missing config.yaml{hint}"


# --- a checkpoint read while a training saves it anew; weights that are not finite; a source verified whole --


def tiny_gpt(seed: int) -> tuple[nn.Module, object]:
    torch.manual_seed(seed)
    config = preset("gpt-tiny", {"n_layers": 1, "vocab_size": 40, "d_model": 16, "d_ff": 32, "n_heads": 2})
    return build_model(config), config


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_a_save_started_while_a_read_runs_waits_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A training saves `last` (another thread) while a reader is between the manifest and the hash: the save
    waits for the read (`files.swap_lock`), the reader gets the old checkpoint whole, then the new one is in."""
    import tformer.manifest

    last = tmp_path / "last"
    old, config = tiny_gpt(0)
    new, _ = tiny_gpt(1)
    save_checkpoint(last, model=old, config=config)
    hash_file, savers = tformer.manifest.sha256, []

    def save_meanwhile(file: Path) -> str:
        if not savers and file.name == "model.safetensors":
            savers.append(threading.Thread(target=save_checkpoint, args=(last,),
                                           kwargs=dict(model=new, config=config)))
            savers[0].start()
            savers[0].join(timeout=1.0)  # it cannot swap its checkpoint in while this read holds the lock
            assert savers[0].is_alive()
        return hash_file(file)

    monkeypatch.setattr(tformer.manifest, "sha256", save_meanwhile)
    loaded, _ = load_model(last)
    assert savers and same_weights(loaded, old)
    savers[0].join()
    monkeypatch.setattr(tformer.manifest, "sha256", hash_file)
    assert same_weights(load_model(last)[0], new)


def test_a_replacement_between_the_manifest_and_the_hash_is_read_again(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory put in place by another program (no lock) after the reader read the old manifest, before it
    hashes the new weights: no false 'does not match its SHA-256', but the new checkpoint, read whole."""
    import tformer.manifest

    last = tmp_path / "last"
    old, config = tiny_gpt(0)
    new, _ = tiny_gpt(1)
    save_checkpoint(last, model=old, config=config)
    save_checkpoint(tmp_path / "next", model=new, config=config)
    hash_file, swapped = tformer.manifest.sha256, []

    def swap_first(file: Path) -> str:
        if not swapped and file.name == "model.safetensors":
            swapped.append(file)
            os.replace(last, tmp_path / "previous")
            os.replace(tmp_path / "next", last)
        return hash_file(file)

    monkeypatch.setattr(tformer.manifest, "sha256", swap_first)
    loaded, _ = load_model(last)
    assert swapped and same_weights(loaded, new)


def test_a_read_while_the_save_has_moved_the_old_one_aside_waits_for_the_new(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Between its two renames a save leaves no `last` for an instant (the old one moved aside, the new one
    still `.last.tmp-*`); a reader then waits for the new one instead of reporting 'no such directory'."""
    import tformer.checkpoints

    last = tmp_path / "last"
    old, config = tiny_gpt(0)
    new, _ = tiny_gpt(1)
    save_checkpoint(last, model=old, config=config)
    save_checkpoint(tmp_path / ".last.tmp-0", model=new, config=config)
    read_config, timers = tformer.checkpoints.load_config, []

    def swap_midway(path: Path) -> object:
        if not timers:  # the first read: the save moves `last` aside now, renames the new one in a moment later
            os.replace(last, tmp_path / ".last.old-0")
            timers.append(threading.Timer(0.2, os.replace, (tmp_path / ".last.tmp-0", last)))
            timers[0].start()
        return read_config(path)

    monkeypatch.setattr(tformer.checkpoints, "load_config", swap_midway)
    loaded, _ = load_model(last)
    timers[0].join()
    assert same_weights(loaded, new)


def test_reads_while_a_training_saves_in_a_loop_never_fail(tmp_path: Path) -> None:
    """A thread saving `last` over and over while another loads it 200 times: every load is one whole
    checkpoint (read only once, many of them fail: no such directory, a SHA-256 mismatch)."""
    last = tmp_path / "last"
    models = [tiny_gpt(seed)[0] for seed in range(2)]
    config = models[0].config
    save_checkpoint(last, model=models[0], config=config)
    stop, failures = threading.Event(), []

    def saving() -> None:  # a save after each step of a training whose steps take next to no time
        i = 0
        while not stop.wait(0.002):
            i += 1
            save_checkpoint(last, model=models[i % 2], config=config)

    saver = threading.Thread(target=saving)
    saver.start()
    try:
        for _ in range(200):
            try:
                loaded, _ = load_model(last)
                assert any(same_weights(loaded, m) for m in models)
            except ValueError as e:
                failures.append(str(e))
    finally:
        stop.set()
        saver.join()
    assert failures == []


def test_weights_that_are_not_finite_are_refused_naming_the_tensor(tmp_path: Path) -> None:
    model, config = tiny_gpt(0)
    name = sorted(model.state_dict())[2]
    with torch.no_grad():
        model.state_dict()[name].view(-1)[1] = float("inf")
    save_checkpoint(tmp_path / "ckpt", model=model, config=config)
    with pytest.raises(ValueError) as e:
        load_model(tmp_path / "ckpt")
    assert str(e.value).startswith(f"checkpoint {tmp_path / 'ckpt'}: model.safetensors holds non-finite values "
                                   f"(NaN or infinity) in {name}: ")
    assert first_non_finite({"a": torch.zeros(2), "b": torch.tensor([1.0, float("nan")])}) == "b"
    assert first_non_finite({"ids": torch.tensor([1, 2]), "w": torch.ones(3)}) is None


def test_a_source_checkpoint_is_verified_whole(tmp_path: Path) -> None:
    """What average and convert read to write another checkpoint: every file, listed and unchanged; one
    without a manifest passes, as loading reads it unchecked."""
    model, config = tiny_gpt(0)
    save_checkpoint(tmp_path / "ckpt", model=model, config=config)
    assert verify_source(tmp_path / "ckpt") == tmp_path / "ckpt"
    (tmp_path / "ckpt" / "config.yaml").write_text((tmp_path / "ckpt" / "config.yaml").read_text() + "\n")
    with pytest.raises(ValueError, match="config.yaml has .* bytes, the manifest says"):
        verify_source(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "manifest.json").unlink()
    verify_source(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="no such directory"):
        verify_source(tmp_path / "none")
