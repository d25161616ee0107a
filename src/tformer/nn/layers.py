"""The two layers of the paper (sec. 3.1), each sub-layer wrapped in dropout, a residual connection and a
norm. Post-LN (the paper): x = norm(x + dropout(f(x))). Pre-LN (GPT-2 and later): x = x + dropout(f(norm(x))).
The placement is chosen once, at construction.

`Layer` is self-attention + feed-forward: the encoder layer, and with a causal mask the decoder-only (GPT)
layer. `DecoderLayer` adds cross-attention over the encoder output between the two.

B batch, T target length, S source length, d width.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from tformer.nn.kv_cache import LayerCache


def post_norm(x: Tensor, norm: nn.Module, f: Callable[[Tensor], Tensor], drop: nn.Module) -> Tensor:
    return norm(x + drop(f(x)))


def pre_norm(x: Tensor, norm: nn.Module, f: Callable[[Tensor], Tensor], drop: nn.Module) -> Tensor:
    return x + drop(f(norm(x)))


RESIDUALS = {"post": post_norm, "pre": pre_norm}


class Layer(nn.Module):
    def __init__(self, *, self_attn: nn.Module, mlp: nn.Module, attn_norm: nn.Module, mlp_norm: nn.Module,
                 dropout: float, placement: str) -> None:
        super().__init__()
        self.self_attn, self.attn_norm = self_attn, attn_norm
        self.mlp, self.mlp_norm = mlp, mlp_norm
        self.dropout = nn.Dropout(dropout)
        self.residual = RESIDUALS[placement]

    def forward(self, x: Tensor, *, mask: Tensor | None = None, causal: bool = False,
                positions: Tensor | None = None, cache: LayerCache | None = None) -> Tensor:
        def attend(h: Tensor) -> Tensor:
            kv = None if cache is None else cache.self_kv
            return self.self_attn(h, mask=mask, causal=causal, positions=positions, cache=kv)

        x = self.residual(x, self.attn_norm, attend, self.dropout)  # (B, T, d)
        return self.residual(x, self.mlp_norm, self.mlp, self.dropout)


class DecoderLayer(nn.Module):
    def __init__(self, *, self_attn: nn.Module, cross_attn: nn.Module, mlp: nn.Module, attn_norm: nn.Module,
                 cross_norm: nn.Module, mlp_norm: nn.Module, dropout: float, placement: str) -> None:
        super().__init__()
        self.self_attn, self.attn_norm = self_attn, attn_norm
        self.cross_attn, self.cross_norm = cross_attn, cross_norm
        self.mlp, self.mlp_norm = mlp, mlp_norm
        self.dropout = nn.Dropout(dropout)
        self.residual = RESIDUALS[placement]

    def forward(self, x: Tensor, memory: Tensor, *, mask: Tensor | None = None,
                memory_mask: Tensor | None = None, positions: Tensor | None = None,
                cache: LayerCache | None = None) -> Tensor:
        """x (B, T, d) target so far; memory (B, S, d) encoder output; mask (B|1, 1, T|1, S_self) padding
        on the decoder's own keys (causality is always added); memory_mask (B, 1, 1, S) on the source's padding."""
        def attend(h: Tensor) -> Tensor:
            kv = None if cache is None else cache.self_kv
            return self.self_attn(h, mask=mask, causal=True, positions=positions, cache=kv)

        def cross(h: Tensor) -> Tensor:
            kv = None if cache is None else cache.cross_kv
            return self.cross_attn(h, memory, mask=memory_mask, cache=kv)

        x = self.residual(x, self.attn_norm, attend, self.dropout)  # (B, T, d)
        x = self.residual(x, self.cross_norm, cross, self.dropout)
        return self.residual(x, self.mlp_norm, self.mlp, self.dropout)
