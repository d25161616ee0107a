"""What torch.compile gets from a GPT training step, read on the CPU from its aten graphs (a GPU gets the
same graphs): a batch without padding takes the fused attention's own causal path (no mask: flash
attention on a GPU), each layer's self-attention projects q, k and v in one matmul as GPT-2's c_attn does,
and the position table is read for one row of T positions, not B T. The stacked projection gives the
numbers of the three separate ones.

B batch, T length, L layers, d width, V vocabulary.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

import tformer
from tformer.models.stacks import positions_for
from tformer.nn.kv_cache import KVCache

B, T, L, V = 2, 16, 2, 97
MATMULS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default)
DROPOUT = {"embed": 0.0, "attention": 0.0, "residual": 0.0, "activation": 0.0}


def small_gpt() -> tformer.GPT:
    config = tformer.GPTConfig(vocab_size=V, d_model=32, n_heads=4, d_ff=64, n_layers=L, max_len=T,
                               dropout=DROPOUT)
    return tformer.GPT(config).train()


@pytest.fixture(scope="module")
def step_graphs() -> list[torch.fx.GraphModule]:
    """The forward and backward aten graphs torch.compile gives a training step of a small GPT (the loss
    outside, as `tformer train` and benchmarks/train_speed.py run it)."""
    graphs = []

    def keep(graph: torch.fx.GraphModule, example_inputs: list[Tensor]) -> object:
        graphs.append(graph)
        return make_boxed_func(graph.forward)

    torch._dynamo.reset()
    model, ids = small_gpt(), torch.randint(0, V, (B, T))
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep), fullgraph=True)
    F.cross_entropy(compiled(ids).flatten(0, 1), ids.flatten()).backward()
    torch._dynamo.reset()
    return graphs


def ops(graphs: list[torch.fx.GraphModule]) -> list[torch.fx.Node]:
    return [n for g in graphs for n in g.graph.nodes if n.op == "call_function"]


def test_unpadded_causal_attention_takes_the_fused_causal_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """No `valid`: every layer calls scaled_dot_product_attention with is_causal and no mask (a mask, even
    an all-True one, would rule out flash attention on a GPU). With padding the mask is passed."""
    calls = []
    sdpa = F.scaled_dot_product_attention

    def recording(*args: Tensor, **kwargs: object) -> Tensor:
        calls.append((kwargs["attn_mask"] is None, kwargs["is_causal"]))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    model, ids = small_gpt(), torch.randint(0, V, (B, T))
    model(ids)
    assert calls == [(True, True)] * L
    calls.clear()
    model(ids, valid=torch.ones(B, T, dtype=torch.bool))
    assert calls == [(False, False)] * L


def test_one_matmul_per_projection_forward_and_two_backward(step_graphs: list[torch.fx.GraphModule]) -> None:
    """Per layer, forward: q, k and v stacked, out_proj, fc_in, fc_out; plus lm_head: 4 L + 1 products, and
    each has two in the backward (input and weight): 3 (4 L + 1) in all, as nanoGPT's model has."""
    assert len(step_graphs) == 2  # forward, backward: one graph, no break
    assert sum(n.target in MATMULS for n in ops(step_graphs)) == 3 * (4 * L + 1)


def test_positions_without_padding_are_one_row_for_the_batch(step_graphs: list[torch.fx.GraphModule]) -> None:
    """positions_for gives (1, T) without `valid`, so the forward gathers T rows of the position table and
    the backward scatters T rows into its gradient, not B T (nanoGPT's wpe(arange(T)) does the same)."""
    ids = torch.randint(0, V, (B, T))
    assert positions_for(ids).shape == (1, T) and positions_for(ids, 3).tolist() == [list(range(3, 3 + T))]
    gathers = [n for n in ops(step_graphs) if n.target in (torch.ops.aten.index.Tensor,
                                                            torch.ops.aten.index_put.default)]
    assert len(gathers) == 2, "expected the position table's gather and its backward"
    for node in gathers:
        (index,) = node.args[1]
        assert tuple(index.meta["val"].shape) == (1, T), node.format_node()


@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_stacked_projection_equals_the_three_projections(n_kv_heads: int) -> None:
    """Self-attention without a cache stacks q, k, v into one matmul; with a cache (decoding) it calls the
    three projections. The same outputs and gradients, to float rounding."""
    config = tformer.GPTConfig(vocab_size=V, d_model=32, n_heads=4, n_kv_heads=n_kv_heads, d_ff=64,
                               n_layers=1, max_len=T, positions={"kind": "rope"}, dropout=DROPOUT)
    attn = tformer.GPT(config).decoder.layers[0].mixer
    x = torch.randn(B, T, 32, requires_grad=True)
    positions = positions_for(x[..., 0])
    stacked = attn(x, causal=True, positions=positions)
    cache = KVCache(batch=B, n_kv_heads=n_kv_heads, max_len=T, head_dim=8)
    separate = attn(x, causal=True, positions=positions, cache=cache)
    torch.testing.assert_close(stacked, separate, atol=1e-6, rtol=0)
    grads = [torch.autograd.grad(out.sum(), [x, attn.k_proj.weight]) for out in (stacked, separate)]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
