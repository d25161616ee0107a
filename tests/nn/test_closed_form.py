"""Closed-form checks: LayerNorm against its formula, the sinusoid table, the linear-map property of
sinusoids, RMSNorm, RoPE's relative property and ALiBi's slopes."""

import math

import torch

from tformer.config import NormConfig
from tformer.models.builders import build_norm
from tformer.nn.positions import ALiBi, Rotary, alibi_slopes, sinusoid_table


def test_layernorm_matches_formula_with_biased_variance() -> None:
    norm = build_norm(NormConfig(eps=1e-5), 16)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = torch.randn(4, 16) * 3 + 1
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # divides by d, not d - 1
    expected = (x - mean) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias
    assert (norm(x) - expected).abs().max() <= 1e-5


def test_rmsnorm_matches_formula() -> None:
    norm = build_norm(NormConfig(kind="rmsnorm", eps=1e-6), 8)
    x = torch.randn(3, 8)
    expected = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-6)
    assert (norm(x) - expected).abs().max() <= 1e-6


def test_sinusoid_values() -> None:
    n, d = 50, 16
    table = sinusoid_table(n, d)
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert math.isclose(table[pos, 2 * i], math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[pos, 2 * i + 1], math.cos(angle), abs_tol=1e-6)
    split = sinusoid_table(n, d, layout="split")
    assert torch.equal(split[:, : d // 2], table[:, 0::2]) and torch.equal(split[:, d // 2 :], table[:, 1::2])


def test_shift_by_k_is_one_linear_map_for_every_position() -> None:
    n, d = 200, 32
    pe = sinusoid_table(n, d).double()
    for k in (1, 5, 17):
        x, y = pe[: n - k], pe[k:]  # PE(pos), PE(pos + k)
        m = torch.linalg.lstsq(x, y).solution  # fit y = x M once, for all positions
        assert (x @ m - y).abs().max() < 1e-5  # the table is stored in float32
        freq = 10000.0 ** (-torch.arange(0, d, 2).double() / d)  # the map is a rotation per pair
        c, s = torch.cos(k * freq), torch.sin(k * freq)
        rot = torch.zeros(d, d, dtype=torch.float64)
        rot[0::2, 0::2] = torch.diag(c)
        rot[1::2, 0::2] = torch.diag(s)  # sin(a + b) = sin a cos b + cos a sin b
        rot[0::2, 1::2] = -torch.diag(s)  # cos(a + b) = cos a cos b - sin a sin b
        rot[1::2, 1::2] = torch.diag(c)
        assert (x @ rot - y).abs().max() < 1e-5


def test_rope_scores_depend_only_on_offset() -> None:
    rope = Rotary(max_len=64, head_dim=8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(i: int, j: int) -> float:
        qi = rope(q, torch.tensor([[i]]))
        kj = rope(k, torch.tensor([[j]]))
        return float((qi * kj).sum())

    assert math.isclose(score(3, 1), score(40, 38), abs_tol=1e-4)
    assert math.isclose(score(5, 5), float((q * k).sum()), abs_tol=1e-4)


def test_alibi_slopes_and_bias() -> None:
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    bias = ALiBi(n_heads=8)(torch.arange(4), torch.arange(4))  # (1, H, T, S)
    assert bias[0, 0, 3, 0] == -0.5 * 3 and bias[0, 2, 1, 1] == 0
