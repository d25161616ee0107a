"""Reading a checkpoint back (`tformer.checkpoints`): state dicts with the layer names from before the mixer
could be a state-space block (`self_attn.*`, `attn_norm.*`, now `mixer.*`, `mixer_norm.*`) load into today's
models with identical outputs, through the loader's one table (`RENAMED`), from a checkpoint file too; the
modules themselves take only today's names; and a real mismatch is named by its new key.

B batch, T length.
"""

from pathlib import Path

import pytest
import torch
from torch import nn

from tformer.checkpoints import RENAMED, load_model, renamed
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
