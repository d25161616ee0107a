"""The layers of nn/layers.py: an `EncoderLayer` with the state-space mixer in its mixer slot decodes with a
`LayerCache` exactly as its full forward computes.

B batch, T length, d width.
"""


import pytest
import torch
from torch import nn

from tformer.nn.kv_cache import LayerCache
from tformer.nn.layers import EncoderLayer
from tformer.nn.mlp import FeedForward
from tformer.nn.ssm import SSMMixer

D = 16


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


def test_relu2_is_relu_squared() -> None:
    torch.manual_seed(0)
    ffn = FeedForward(d_model=D, d_ff=2 * D, activation="relu2", bias=True, dropout=0.0).double()
    x = torch.randn(2, 5, D, dtype=torch.double)  # (B, T, d)
    assert torch.allclose(ffn(x), ffn.fc_out(torch.relu(ffn.fc_in(x)) ** 2))
