"""Builders that turn a config into modules, and the pieces every family shares: the embedding sum and
a stack of layers. Every variant (norm, positions, activation, attention kind or state-space mixer) is
chosen here, once.

B batch, T length, d width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from tformer.config import AttentionConfig, TransformerConfig
from tformer.nn.attention import Attention
from tformer.nn.kernels import ExactAttention, Kernel, build_kernel
from tformer.nn.kv_cache import LayerCache, StaticKV
from tformer.nn.layers import DecoderLayer, Layer
from tformer.nn.mlp import build_mlp
from tformer.nn.norms import build_norm
from tformer.nn.positions import ALiBi, LearnedPositions, Rotary, SinusoidalPositions
from tformer.nn.ssm import SSMMixer


def build_absolute_positions(config: TransformerConfig) -> nn.Module | None:
    kind, n, d = config.positions.kind, config.max_len, config.d_model
    if kind == "sinusoidal":
        return SinusoidalPositions(max_len=n, d_model=d, layout=config.positions.sinusoid_layout)
    if kind == "learned":
        return LearnedPositions(max_len=n, d_model=d)
    return None


def build_attention(config: TransformerConfig, *, kernel: Kernel, cross: bool = False) -> Attention:
    rotary = alibi = None
    if not cross and config.positions.kind == "rope":
        rotary = Rotary(max_len=config.max_len, head_dim=config.head_dim, theta=config.positions.rope_theta)
    if not cross and config.positions.kind == "alibi":
        alibi = ALiBi(n_heads=config.n_heads)
    return Attention(
        d_model=config.d_model, n_heads=config.n_heads, n_kv_heads=config.n_kv_heads,
        head_dim=config.head_dim, bias=config.bias, dropout=config.dropout.attention,
        kernel=kernel, rotary=rotary, alibi=alibi,
    )


def build_mixer(config: TransformerConfig, *, causal: bool) -> nn.Module:
    """What a layer's self-attention slot holds: an `Attention` around the configured kernel, or the
    state-space mixer. Low-rank attention cannot be causal: an encoder-decoder uses it in the encoder and
    keeps exact attention in the decoder (a GPT config refuses it)."""
    a = config.attention
    if a.kind == "ssm":
        return SSMMixer(d_model=config.d_model, state=a.state, expand=a.expand, conv=a.conv, chunk=a.chunk,
                        bidirectional=not causal)
    if causal and a.kind == "lowrank":
        a = AttentionConfig(kind="sdpa")
    return build_attention(config, kernel=build_kernel(a, max_len=config.max_len))


def exact_kernel(config: TransformerConfig) -> Kernel:
    """Cross-attention is always exact: the reference if the model asks for it, else the fused kernel."""
    return ExactAttention(fused=config.attention.kind != "eager")


def build_layer(config: TransformerConfig, *, causal: bool, cross: bool = False) -> nn.Module:
    def norm() -> nn.Module:
        return build_norm(config.norm, config.d_model, bias=config.bias)

    mlp = build_mlp(d_model=config.d_model, d_ff=config.d_ff, activation=config.activation,
                    bias=config.bias, dropout=config.dropout.activation)
    parts = dict(self_attn=build_mixer(config, causal=causal), mlp=mlp, attn_norm=norm(), mlp_norm=norm(),
                 dropout=config.dropout.residual, placement=config.norm.placement)
    if cross:
        cross_attn = build_attention(config, kernel=exact_kernel(config), cross=True)
        return DecoderLayer(cross_attn=cross_attn, cross_norm=norm(), **parts)
    return Layer(**parts)


class Embeddings(nn.Module):
    """tokens * scale + positions (+ segments), then an optional norm, then dropout."""

    def __init__(self, *, tokens: nn.Embedding, positions: nn.Module | None, scale: float,
                 dropout: float, segments: nn.Embedding | None = None, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.tokens, self.positions, self.segments = tokens, positions, segments
        self.scale = scale
        self.norm = norm if norm is not None else nn.Identity()
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor, positions: Tensor, segments: Tensor | None = None) -> Tensor:
        """ids, positions, segments (B, T) -> (B, T, d)."""
        vocab = self.tokens.num_embeddings
        checked = not torch.compiler.is_compiling()  # data-dependent checks would split a compiled graph
        if checked and ids.numel() and (int(ids.max()) >= vocab or int(ids.min()) < 0):
            bad = int(ids.max()) if int(ids.max()) >= vocab else int(ids.min())
            raise ValueError(f"token id {bad} is out of range; the vocabulary has ids 0..{vocab - 1}")
        x = self.tokens(ids) * self.scale  # (B, T, d)
        if self.positions is not None:
            if checked and int(positions.max()) >= self.positions.max_len:
                raise ValueError(f"position {int(positions.max())} is beyond the position table "
                                 f"(max_len={self.positions.max_len})")
            x = x + self.positions(positions)
        if self.segments is not None:
            x = x + self.segments(torch.zeros_like(ids) if segments is None else segments)
        return self.dropout(self.norm(x))


def build_embeddings(config: TransformerConfig, tokens: nn.Embedding, **extra: nn.Module) -> Embeddings:
    scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0
    return Embeddings(tokens=tokens, positions=build_absolute_positions(config), scale=scale,
                      dropout=config.dropout.embed, **extra)


class Stack(nn.Module):
    """L layers and, for pre-LN, a final norm (nn.Identity when there is none)."""

    def __init__(self, config: TransformerConfig, *, n_layers: int, causal: bool, cross: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(build_layer(config, causal=causal, cross=cross) for _ in range(n_layers))
        self.final_norm = build_norm(config.norm, config.d_model, bias=config.bias) if config.norm.final \
            else nn.Identity()
        self.max_len = config.max_len

    def forward(self, x: Tensor, *args: Tensor, caches: list[LayerCache] | None = None, **kw: object) -> Tensor:
        if x.shape[1] > self.max_len:
            raise ValueError(f"sequence length {x.shape[1]} is longer than the context max_len={self.max_len}")
        for i, layer in enumerate(self.layers):
            x = layer(x, *args, cache=None if caches is None else caches[i], **kw)
        return self.final_norm(x)

    def new_caches(self, *, batch: int, max_len: int, dtype: torch.dtype = torch.float32,
                   device: torch.device | str | None = None) -> list[LayerCache]:
        """One cache per layer, of the kind its mixer keeps (a preallocated KV cache, a recurrent state);
        cross-attention layers also get a slot for the encoder K/V."""
        caches = []
        for layer in self.layers:
            state = layer.self_attn.new_cache(batch=batch, max_len=max_len, dtype=dtype, device=device)
            caches.append(LayerCache(state, StaticKV() if isinstance(layer, DecoderLayer) else None))
        return caches


def positions_for(ids: Tensor, offset: int = 0, *, valid: Tensor | None = None) -> Tensor:
    """(B, T) positions of the T newest tokens. Without `valid`: offset..offset+T-1 in every row. With
    `valid` (B, S), True at the real tokens among all S = offset + T so far: each token's count of real
    tokens before it, so every row counts from its own first real token and a real token gets the same
    position however the batch is padded (left, as ragged generation pads, or right)."""
    if valid is None:
        return torch.arange(offset, offset + ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
    if valid.shape[-1] < ids.shape[1]:
        raise ValueError(f"valid covers {valid.shape[-1]} positions but there are {ids.shape[1]} new tokens; "
                         "it must cover every token so far (cached and new)")
    counted = (valid.long().cumsum(-1) - 1).clamp(min=0)  # (B, S); padding before the first real token: 0
    return counted[:, valid.shape[1] - ids.shape[1]:]  # (B, T): the newest T
