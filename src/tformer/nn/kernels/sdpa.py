"""The fast path: PyTorch's fused `scaled_dot_product_attention` (flash / memory-efficient kernels, memory
linear in sequence length). Never returns weights; use `eager` for those. Shapes: see `tformer.nn.kernels`."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float,
    bias: Tensor | None = None,
    dropout: float = 0.0,
) -> tuple[Tensor, None]:
    attn_mask = mask
    if bias is not None:  # fold the boolean mask into the additive bias
        attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
    if causal and attn_mask is not None:
        raise ValueError("sdpa_attention: pass causality inside `mask` when a mask or bias is given")
    out = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=attn_mask,
        dropout_p=dropout,
        is_causal=causal,
        scale=scale,
        enable_gqa=k.shape[1] != q.shape[1],
    )  # (B, H, T, D)
    return out, None
