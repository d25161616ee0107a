"""Attention: the eager reference against torch.nn.MultiheadAttention, the fast path against the eager
one, masks, and grouped-query heads."""

import pytest
import torch
from torch import nn

from tformer.nn.attention import Attention
from tformer.nn.kernels import ExactAttention
from tformer.nn.kv_cache import KVCache, StaticKV
from tformer.nn.masks import attention_mask, causal_mask

D, H = 32, 4


def make(kernel: str, *, n_kv_heads: int = H) -> Attention:
    return Attention(d_model=D, n_heads=H, n_kv_heads=n_kv_heads, head_dim=D // H,
                     kernel=ExactAttention(fused=kernel == "sdpa")).eval()


def copy_from_torch(ours: Attention, ref: nn.MultiheadAttention) -> None:
    wq, wk, wv = ref.in_proj_weight.chunk(3)
    bq, bk, bv = ref.in_proj_bias.chunk(3)
    with torch.no_grad():
        for proj, w, b in ((ours.q_proj, wq, bq), (ours.k_proj, wk, bk), (ours.v_proj, wv, bv)):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        ours.out_proj.weight.copy_(ref.out_proj.weight)
        ours.out_proj.bias.copy_(ref.out_proj.bias)


@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_torch_multihead_attention(kernel: str, causal: bool) -> None:
    ref = nn.MultiheadAttention(D, H, batch_first=True).eval()
    ours = make(kernel)
    copy_from_torch(ours, ref)
    x = torch.randn(3, 7, D)
    valid = torch.ones(3, 7, dtype=torch.bool)
    valid[1, 5:] = False
    valid[2, 3:] = False
    attn_mask = ~causal_mask(7, 7) if causal else None
    expected, _ = ref(x, x, x, key_padding_mask=~valid, attn_mask=attn_mask, need_weights=False)
    got = ours(x, mask=attention_mask(7, valid), causal=causal)
    assert (got - expected).abs().max() <= 1e-5


def test_cross_attention_matches_torch() -> None:
    ref = nn.MultiheadAttention(D, H, batch_first=True).eval()
    ours = make("sdpa")
    copy_from_torch(ours, ref)
    x, memory = torch.randn(2, 5, D), torch.randn(2, 9, D)
    valid = torch.ones(2, 9, dtype=torch.bool)
    valid[0, 6:] = False
    expected, _ = ref(x, memory, memory, key_padding_mask=~valid, need_weights=False)
    got = ours(x, memory, mask=valid[:, None, None, :])
    assert (got - expected).abs().max() <= 1e-5


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_fast_path_equals_eager_with_grouped_heads(n_kv_heads: int) -> None:
    eager = make("eager", n_kv_heads=n_kv_heads)
    fast = make("sdpa", n_kv_heads=n_kv_heads)
    fast.load_state_dict(eager.state_dict())
    x = torch.randn(2, 6, D)
    valid = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    for mask, causal in ((None, False), (None, True), (attention_mask(6, valid), True)):
        assert (eager(x, mask=mask, causal=causal) - fast(x, mask=mask, causal=causal)).abs().max() <= 1e-5


@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_grouped_query_heads_share_keys(n_kv_heads: int) -> None:
    """Grouped-query attention is multi-head attention whose key/value heads are copies within each group
    of H / n_kv_heads query heads: copying them out gives an MHA with the same outputs and cache."""
    grouped = make("eager", n_kv_heads=n_kv_heads)
    full = make("eager")
    group = H // n_kv_heads
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            getattr(full, name).load_state_dict(getattr(grouped, name).state_dict())
        for name in ("k_proj", "v_proj"):
            small, big = getattr(grouped, name), getattr(full, name)
            big.weight.copy_(small.weight.view(n_kv_heads, 1, D // H, D).expand(-1, group, -1, -1).reshape(D, D))
            big.bias.copy_(small.bias.view(n_kv_heads, 1, D // H).expand(-1, group, -1).reshape(D))
    x = torch.randn(2, 6, D)
    torch.testing.assert_close(grouped(x, causal=True), full(x, causal=True), atol=1e-5, rtol=0)
    caches = [KVCache(batch=2, n_kv_heads=n, max_len=6, head_dim=D // H) for n in (n_kv_heads, H)]
    grouped(x, causal=True, cache=caches[0])
    full(x, causal=True, cache=caches[1])
    assert caches[0].k.numel() * group == caches[1].k.numel()  # the cache is `group` times smaller
    torch.testing.assert_close(caches[0].k.repeat_interleave(group, dim=1), caches[1].k, atol=1e-6, rtol=0)


def test_fully_masked_rows_give_zeros_not_nan() -> None:
    x = torch.randn(1, 4, D)
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    mask[..., 2, :] = False  # query 2 may see no key
    for kernel in ("eager", "sdpa"):
        attn = make(kernel)
        attn.out_proj.bias.data.zero_()
        out = attn(x, mask=mask)
        assert torch.isfinite(out).all()
        assert out[0, 2].abs().max() == 0


def test_recorded_weights_are_distributions() -> None:
    attn = make("sdpa")
    attn.record_weights = True
    valid = torch.tensor([[True, True, True, False]])
    attn(torch.randn(1, 4, D), mask=attention_mask(4, valid), causal=True)
    w = attn.weights  # (B, H, T, S)
    assert w.shape == (1, H, 4, 4)
    assert torch.allclose(w.sum(-1), torch.ones(1, H, 4))
    assert w[..., 3].abs().max() == 0 and w[0, :, 0, 1:].abs().max() == 0


def test_cache_matches_full_causal_pass() -> None:
    attn = make("sdpa", n_kv_heads=2)
    x = torch.randn(2, 6, D)
    full = attn(x, causal=True)
    cache = KVCache(batch=2, n_kv_heads=2, max_len=8, head_dim=D // H)
    steps = [attn(x[:, :3], causal=True, cache=cache)]  # prefill 3, then one at a time
    steps += [attn(x[:, t : t + 1], causal=True, cache=cache) for t in range(3, 6)]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5


def test_beams_sharing_a_source_attend_as_if_each_had_its_own() -> None:
    torch.manual_seed(0)
    attn = make("sdpa")
    beams = 3
    x, memory = torch.randn(2 * beams, 1, D), torch.randn(2, 9, D)  # rows 0-2 read source 0, rows 3-5 source 1
    valid = torch.ones(2, 9, dtype=torch.bool)
    valid[1, 4:] = False
    each = attn(x, memory.repeat_interleave(beams, 0), mask=valid.repeat_interleave(beams, 0)[:, None, None, :])
    shared = attn(x, memory, mask=valid[:, None, None, :])  # each source's keys once, for its 3 beams
    assert shared.shape == each.shape and (shared - each).abs().max() <= 1e-6
    kv = StaticKV()
    attn(x, memory, mask=valid[:, None, None, :], cache=kv)  # the first step keeps the keys of 2 sources
    assert kv.k.shape[0] == 2
    attn.record_weights = True
    later = attn(x, memory, mask=valid[:, None, None, :], cache=kv)
    assert (later - each).abs().max() <= 1e-6 and attn.weights.shape == (2 * beams, H, 1, 9)
    assert attn.weights[3:, :, 0, 4:].abs().max() == 0  # the second source's padding, for each of its beams
    with pytest.raises(ValueError, match="6 rows of queries cannot share keys of 4 rows"):
        attn(x, memory.repeat(2, 1, 1))


def test_mask_of_wrong_shape_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"attention mask of shape \(2, 5\)"):
        make("sdpa")(torch.randn(2, 5, D), mask=torch.ones(2, 5, dtype=torch.bool))
