"""Windowed and sparse kernels against the eager reference with the dense mask of their definition.

B batch, H query heads, Hk key/value heads, T queries (the last T of the S positions), S keys, D width.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from tformer.nn.kernels.eager import eager_attention
from tformer.nn.kernels.sparse import SparseAttention
from tformer.nn.kernels.windowed import WindowedAttention, window_partial

TOL = 1e-5


def qkv(b: int = 2, h: int = 4, hk: int = 4, s: int = 13, d: int = 8) -> tuple[Tensor, Tensor, Tensor]:
    q = torch.randn(b, h, s, d)
    k = torch.randn(b, hk, s, d)
    v = torch.randn(b, hk, s, d)
    return q, k, v


def padding(b: int, s: int, *, pad: int) -> Tensor:
    """(B, 1, 1, S) key-padding mask: the last `pad` keys of batch row 1 are padding."""
    valid = torch.ones(b, s, dtype=torch.bool)
    if pad:
        valid[1, s - pad:] = False
    return valid[:, None, None, :]


def offsets(t: int, s: int) -> tuple[Tensor, Tensor, Tensor]:
    """(T, 1) query positions i, (1, S) key positions j, (T, S) i - j."""
    i = torch.arange(s - t, s)[:, None]
    j = torch.arange(s)[None, :]
    return i, j, i - j


def window_mask(t: int, s: int, *, window: int, causal: bool) -> Tensor:
    _, _, diff = offsets(t, s)
    return (diff >= 0) & (diff <= window) if causal else diff.abs() <= window


def strided_mask(t: int, s: int, *, block: int, causal: bool) -> Tensor:
    _, _, diff = offsets(t, s)
    if causal:
        return (diff >= 0) & ((diff < block) | (diff % block == 0))
    return (diff.abs() < block) | (diff % block == 0)


def fixed_mask(t: int, s: int, *, block: int, summary: int, causal: bool) -> Tensor:
    i, j, _ = offsets(t, s)
    allowed = (j // block == i // block) | (j % block >= block - summary)
    return allowed & (j <= i) if causal else allowed


def reference(q: Tensor, k: Tensor, v: Tensor, *, dense: Tensor, mask: Tensor | None, t: int) -> Tensor:
    """Eager attention over all S queries with the (S, S) pattern and the key padding; the last T rows."""
    full = dense if mask is None else dense & mask
    out, _ = eager_attention(q, k, v, mask=full, scale=q.shape[-1] ** -0.5)
    return out[:, :, -t:]


def run(kernel: torch.nn.Module, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, causal: bool,
        t: int) -> Tensor:
    out, weights = kernel(q[:, :, -t:], k, v, mask=mask, causal=causal, scale=q.shape[-1] ** -0.5)
    assert weights is None
    return out


# --- windowed ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hk", [4, 2, 1])
def test_windowed_wide_window_is_exact(causal: bool, hk: int) -> None:
    q, k, v = qkv(hk=hk, s=13)
    mask = padding(2, 13, pad=4)
    expected, _ = eager_attention(q, k, v, mask=mask, causal=causal, scale=8**-0.5)
    for window in (12, 13, 100):
        got = run(WindowedAttention(window=window), q, k, v, mask=mask, causal=causal, t=13)
        assert (got - expected).abs().max() <= TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [0, 1, 3, 20])
@pytest.mark.parametrize("s,t", [(37, 37), (37, 1), (37, 5), (37, 30), (50, 50)])
def test_windowed_matches_band_mask(causal: bool, window: int, s: int, t: int) -> None:
    q, k, v = qkv(hk=2, s=s)
    mask = padding(2, s, pad=6)
    dense = window_mask(s, s, window=window, causal=causal)
    expected = reference(q, k, v, dense=dense, mask=mask, t=t)
    got = run(WindowedAttention(window=window), q, k, v, mask=mask, causal=causal, t=t)
    assert (got - expected).abs().max() <= TOL


def test_windowed_cached_decoding_matches_full() -> None:
    q, k, v = qkv(b=2, h=4, hk=2, s=21)
    kernel = WindowedAttention(window=5)
    full = run(kernel, q, k, v, mask=None, causal=True, t=21)
    cache = kernel.new_cache(batch=2, n_kv_heads=2, max_len=21, head_dim=8)
    steps = [kernel(q[:, :, :9], k[:, :, :9], v[:, :, :9], causal=True, scale=8**-0.5, cache=cache)[0]]
    for i in range(9, 21):
        sl = slice(i, i + 1)
        steps.append(kernel(q[:, :, sl], k[:, :, sl], v[:, :, sl], causal=True, scale=8**-0.5, cache=cache)[0])
    assert (torch.cat(steps, dim=2) - full).abs().max() <= TOL


# --- sparse --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_sparse_full_block_is_exact(causal: bool, pattern: str) -> None:
    q, k, v = qkv(hk=2, s=13)
    mask = padding(2, 13, pad=3)
    expected, _ = eager_attention(q, k, v, mask=mask, causal=causal, scale=8**-0.5)
    for block in (13, 16):
        kernel = SparseAttention(pattern=pattern, block=block, summary=2)
        got = run(kernel, q, k, v, mask=mask, causal=causal, t=13)
        assert (got - expected).abs().max() <= TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [1, 3, 4, 7])
@pytest.mark.parametrize("s,t", [(29, 29), (29, 1), (29, 6), (32, 32), (32, 9)])
def test_sparse_strided_matches_pattern(causal: bool, block: int, s: int, t: int) -> None:
    q, k, v = qkv(hk=2, s=s)
    mask = padding(2, s, pad=5)
    expected = reference(q, k, v, dense=strided_mask(s, s, block=block, causal=causal), mask=mask, t=t)
    got = run(SparseAttention(pattern="strided", block=block, summary=1), q, k, v, mask=mask, causal=causal, t=t)
    assert (got - expected).abs().max() <= TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block,summary", [(1, 1), (4, 1), (4, 2), (5, 5), (8, 3)])
@pytest.mark.parametrize("s,t", [(29, 29), (29, 1), (29, 6), (32, 32), (32, 9)])
def test_sparse_fixed_matches_pattern(causal: bool, block: int, summary: int, s: int, t: int) -> None:
    q, k, v = qkv(hk=2, s=s)
    mask = padding(2, s, pad=5)
    dense = fixed_mask(s, s, block=block, summary=summary, causal=causal)
    expected = reference(q, k, v, dense=dense, mask=mask, t=t)
    kernel = SparseAttention(pattern="fixed", block=block, summary=summary)
    got = run(kernel, q, k, v, mask=mask, causal=causal, t=t)
    assert (got - expected).abs().max() <= TOL


# --- empty rows, bad input -----------------------------------------------------------------------------


KERNELS = [
    WindowedAttention(window=2),
    SparseAttention(pattern="strided", block=3, summary=1),
    SparseAttention(pattern="fixed", block=3, summary=1),
]


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
@pytest.mark.parametrize("causal", [False, True])
def test_query_with_no_visible_key_gives_zeros_and_finite_grads(kernel: torch.nn.Module, causal: bool) -> None:
    q, k, v = (x.requires_grad_() for x in qkv(s=12))
    mask = torch.ones(2, 1, 1, 12, dtype=torch.bool)
    mask[1] = False  # batch row 1: every key is padding
    out, _ = kernel(q, k, v, mask=mask, causal=causal, scale=8**-0.5)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.isfinite(out).all()
    out.square().sum().backward()
    for x in (q, k, v):
        assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
def test_bias_and_query_dependent_mask_are_rejected(kernel: torch.nn.Module) -> None:
    q, k, v = qkv(s=6)
    with pytest.raises(ValueError, match="bias"):
        kernel(q, k, v, causal=True, scale=1.0, bias=torch.zeros(1, 4, 6, 6))
    with pytest.raises(ValueError, match="key-padding"):
        kernel(q, k, v, mask=torch.ones(6, 6, dtype=torch.bool).tril()[None, None], scale=1.0)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError):
        WindowedAttention(window=-1)
    with pytest.raises(ValueError):
        SparseAttention(pattern="dilated", block=4, summary=1)
    with pytest.raises(ValueError):
        SparseAttention(pattern="fixed", block=4, summary=5)


# --- cost, not timing ----------------------------------------------------------------------------------


def largest_saved(fn: Callable[[], object]) -> int:
    """The most elements in any tensor autograd saves while `fn` runs (the scores are among them)."""
    sizes = [0]

    def pack(x: Tensor) -> Tensor:
        sizes.append(x.numel())
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        fn()
    return max(sizes)


@pytest.mark.parametrize("causal", [False, True])
def test_windowed_cost_is_linear(causal: bool) -> None:
    s, r, d = 4096, 8, 8
    q, k, v = (torch.randn(1, 1, s, d, requires_grad=True) for _ in range(3))
    train = largest_saved(lambda: window_partial(q, k, v, window=r, causal=causal, valid=None, scale=1.0))
    assert train <= s * (16 + 2 * r)  # blocks of 16 queries x (16 + 2r) keys, not S x S = 16.7M
    decode = largest_saved(lambda: window_partial(q[:, :, -1:], k, v, window=r, causal=causal, valid=None,
                                                  scale=1.0))
    assert decode <= (1 + 2 * r) * d  # one query: O(r), not O(S)


def test_windowed_runs_where_dense_scores_would_need_16_gib() -> None:
    s = 65536
    q, k, v = (torch.randn(1, 1, s, 8) for _ in range(3))
    out, lse = window_partial(q, k, v, window=8, causal=True, valid=None, scale=8**-0.5)
    assert out.shape == (1, 1, s, 8) and torch.isfinite(lse).all()


@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_sparse_cost_follows_pattern(pattern: str) -> None:
    s, l, c, d = 4096, 64, 4, 8
    q, k, v = (torch.randn(1, 1, s, d, requires_grad=True) for _ in range(3))
    kernel = SparseAttention(pattern=pattern, block=l, summary=c)
    keys = 2 * l + s // l if pattern == "strided" else 2 * l + s // l * c  # per query; S x S = 16.7M in all
    train = largest_saved(lambda: kernel(q, k, v, causal=True, scale=1.0))
    assert train <= s * keys
    decode = largest_saved(lambda: kernel(q[:, :, -1:], k, v, causal=True, scale=1.0))
    assert decode <= keys * d  # one query: O(l + S / l), not O(S)
