"""The two layers of the paper (sec. 3.1), each sub-layer wrapped in dropout, a residual connection and a
norm. Post-LN (the paper): x = norm(x + dropout(f(x))). Pre-LN (GPT-2 and later): x = x + dropout(f(norm(x))).
The placement is chosen once, at construction.

`EncoderLayer` is the encoder / BERT / GPT block: a mixer then an MLP. The mixer is self-attention (with a
causal mask, the decoder-only layer) or a state-space mixer; it mixes positions, the MLP works on each alone.
`DecoderLayer` adds cross-attention over the encoder output between the two.

State-dict keys: `mixer.*`, `mixer_norm.*`, `cross_attn.*`, `cross_norm.*`, `mlp.*`, `mlp_norm.*` (the
checkpoint loader renames the older names of these, `tformer.checkpoints.RENAMED`).

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


class EncoderLayer(nn.Module):
    def __init__(self, *, mixer: nn.Module, mlp: nn.Module, mixer_norm: nn.Module, mlp_norm: nn.Module,
                 dropout: float, placement: str) -> None:
        super().__init__()
        self.mixer, self.mixer_norm = mixer, mixer_norm
        self.mlp, self.mlp_norm = mlp, mlp_norm
        self.dropout = nn.Dropout(dropout)
        self.residual = RESIDUALS[placement]

    def forward(self, x: Tensor, *, mask: Tensor | None = None, causal: bool = False,
                positions: Tensor | None = None, cache: LayerCache | None = None) -> Tensor:
        def mix(h: Tensor) -> Tensor:
            state = None if cache is None else cache.mixer_state
            return self.mixer(h, mask=mask, causal=causal, positions=positions, cache=state)

        x = self.residual(x, self.mixer_norm, mix, self.dropout)  # (B, T, d)
        return self.residual(x, self.mlp_norm, self.mlp, self.dropout)


class DecoderLayer(nn.Module):
    def __init__(self, *, mixer: nn.Module, cross_attn: nn.Module, mlp: nn.Module, mixer_norm: nn.Module,
                 cross_norm: nn.Module, mlp_norm: nn.Module, dropout: float, placement: str) -> None:
        super().__init__()
        self.mixer, self.mixer_norm = mixer, mixer_norm
        self.cross_attn, self.cross_norm = cross_attn, cross_norm
        self.mlp, self.mlp_norm = mlp, mlp_norm
        self.dropout = nn.Dropout(dropout)
        self.residual = RESIDUALS[placement]

    def forward(self, x: Tensor, memory: Tensor, *, mask: Tensor | None = None,
                memory_mask: Tensor | None = None, positions: Tensor | None = None,
                cache: LayerCache | None = None) -> Tensor:
        """x (B, T, d) target so far; memory (B, S, d) encoder output; mask (B|1, 1, T|1, S_self) padding
        on the decoder's own keys (causality is always added); memory_mask (B, 1, 1, S) on the source's padding."""
        def mix(h: Tensor) -> Tensor:
            state = None if cache is None else cache.mixer_state
            return self.mixer(h, mask=mask, causal=True, positions=positions, cache=state)

        def cross(h: Tensor) -> Tensor:
            kv = None if cache is None else cache.cross_kv
            return self.cross_attn(h, memory, mask=memory_mask, cache=kv)

        x = self.residual(x, self.mixer_norm, mix, self.dropout)  # (B, T, d)
        x = self.residual(x, self.cross_norm, cross, self.dropout)
        return self.residual(x, self.mlp_norm, self.mlp, self.dropout)
