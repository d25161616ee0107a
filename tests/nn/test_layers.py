"""The layers of nn/layers.py: state dicts with the names from before issue 17 (`self_attn.*`,
`attn_norm.*`, now `mixer.*`, `mixer_norm.*`) load into today's models with identical outputs, directly and
from a checkpoint file; and an `EncoderLayer` with the state-space mixer in its mixer slot decodes with a
`LayerCache` exactly as its full forward computes.

B batch, T length, d width.
"""

from pathlib import Path

import pytest
import torch
from torch import nn

from tformer.models.presets import build_model, preset
from tformer.nn.kv_cache import LayerCache
from tformer.nn.layers import OLD_NAMES, EncoderLayer
from tformer.nn.mlp import FeedForward
from tformer.nn.ssm import SSMMixer
from tformer.training.checkpoint import load_model, save_checkpoint

D = 16


def old_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict as a model from before issue 17 wrote it."""
    new_to_old = {new: old for old, new in OLD_NAMES.items()}

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
def test_old_key_names_load_with_identical_outputs(name: str) -> None:
    torch.manual_seed(0)
    config = preset(name, {"n_layers": 2, "vocab_size": 50})
    trained = build_model(config).eval()
    old = old_names(trained.state_dict())
    assert any(".self_attn." in k for k in old) and any(".attn_norm." in k for k in old)
    assert not any(".mixer." in k or ".mixer_norm." in k for k in old)
    torch.manual_seed(1)  # other initial weights: only loading can make the outputs equal
    fresh = build_model(config).eval()
    fresh.load_state_dict(old, strict=True)
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


@pytest.mark.parametrize("placement", ["pre", "post"])
@torch.no_grad()
def test_encoder_layer_with_an_ssm_mixer_decodes_as_its_full_forward(placement: str) -> None:
    torch.manual_seed(0)
    layer = EncoderLayer(mixer=SSMMixer(d_model=D, state=4, expand=2, conv=3, chunk=4, bidirectional=False),
                         mlp=FeedForward(d_model=D, d_ff=2 * D, activation="gelu", bias=True, dropout=0.0),
                         mixer_norm=nn.LayerNorm(D), mlp_norm=nn.LayerNorm(D), dropout=0.0,
                         placement=placement).double().eval()
    x = torch.randn(2, 9, D, dtype=torch.double)  # (B, T, d)
    full = layer(x, causal=True)
    cache = LayerCache(layer.mixer.new_cache(batch=2, max_len=9, dtype=torch.double))
    parts = [layer(x[:, :4], causal=True, cache=cache)]  # prefill
    parts += [layer(x[:, t : t + 1], causal=True, cache=cache) for t in range(4, 9)]  # one token a step
    assert cache.mixer_state.length == 9
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-10, rtol=1e-10)
