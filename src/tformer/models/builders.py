"""Builders that turn a config into modules. Every variant (attention kind or state-space mixer, position
scheme, norm kind and placement, gated or plain feed-forward) is chosen here, once; the modules of
`tformer.nn` take plain arguments and never read a config.

    build_stack(config, n_layers=, causal=, cross=)   L layers sharing one RoPE / ALiBi table, final norm
      build_layer                                     mixer (build_mixer) + feed-forward (build_mlp) + norms
    build_embeddings(config, tokens)                  tokens * scale + absolute positions
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from torch import nn

from tformer.config import AttentionConfig, NormConfig, TransformerConfig
from tformer.errors import UserError
from tformer.models.stacks import Stack
from tformer.nn.attention import Attention
from tformer.nn.embeddings import Embeddings
from tformer.nn.kernels import (
    ExactAttention,
    Kernel,
    LinearAttention,
    LowRankAttention,
    LSHAttention,
    SparseAttention,
    WindowedAttention,
)
from tformer.nn.layers import DecoderLayer, EncoderLayer
from tformer.nn.mlp import GATED, FeedForward, GatedFeedForward
from tformer.nn.positions import ALiBi, LearnedPositions, Rotary, SinusoidalPositions
from tformer.nn.ssm import SSMMixer

# The attention kernels by `attention.kind` (all but "ssm", which replaces the whole attention module).
KERNELS: dict[str, Callable[[AttentionConfig, int], Kernel]] = {
    "sdpa": lambda c, n: ExactAttention(fused=True),
    "eager": lambda c, n: ExactAttention(fused=False),
    "windowed": lambda c, n: WindowedAttention(window=c.window),
    "sparse": lambda c, n: SparseAttention(pattern=c.pattern, block=c.block, summary=c.summary),
    "lowrank": lambda c, n: LowRankAttention(rank=c.rank, max_len=n),
    "linear": lambda c, n: LinearAttention(chunk=c.chunk),
    "lsh": lambda c, n: LSHAttention(buckets=c.buckets, rounds=c.rounds, chunk=c.chunk, seed=c.seed),
}


def build_kernel(config: AttentionConfig, *, max_len: int) -> Kernel:
    """The kernel for `config.kind` (every kind but "ssm", which is not attention)."""
    if config.kind not in KERNELS:
        raise UserError(f"attention.kind={config.kind!r} is not an attention kernel; "
                         f"choose one of {', '.join(KERNELS)}")
    return KERNELS[config.kind](config, max_len)


def exact_kernel(config: TransformerConfig) -> Kernel:
    """Cross-attention is always exact: the reference if the model asks for it, else the fused kernel."""
    return ExactAttention(fused=config.attention.kind != "eager")


def build_norm(config: NormConfig, d_model: int, *, bias: bool = True) -> nn.Module:
    """LayerNorm (biased variance, as the notes define it) or RMSNorm (Zhang & Sennrich 2019,
    https://arxiv.org/abs/1910.07467)."""
    if config.kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=config.eps)
    return nn.LayerNorm(d_model, eps=config.eps, bias=bias)


def build_mlp(config: TransformerConfig) -> nn.Module:
    """The feed-forward: gated (GLU variants, as Llama) for a gated activation, else the paper's."""
    cls = GatedFeedForward if config.activation in GATED else FeedForward
    return cls(d_model=config.d_model, d_ff=config.d_ff, activation=config.activation, bias=config.bias,
               dropout=config.dropout.activation)


def build_absolute_positions(config: TransformerConfig) -> nn.Module | None:
    """The positions added to the token embeddings (sinusoids or learned); None for RoPE, ALiBi or none."""
    kind, n, d = config.positions.kind, config.max_len, config.d_model
    if kind == "sinusoidal":
        return SinusoidalPositions(max_len=n, d_model=d, layout=config.positions.sinusoid_layout)
    if kind == "learned":
        return LearnedPositions(max_len=n, d_model=d)
    return None


def build_embeddings(config: TransformerConfig, tokens: nn.Embedding, **extra: nn.Module) -> Embeddings:
    scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0
    return Embeddings(tokens=tokens, positions=build_absolute_positions(config), scale=scale,
                      dropout=config.dropout.embed, **extra)


class AttentionPositions(NamedTuple):
    """The positions attention applies inside: RoPE's cos/sin tables, ALiBi's slopes (None when the config
    uses neither). Parameter-free, non-persistent buffers, so one per stack serves all its layers."""

    rotary: Rotary | None
    alibi: ALiBi | None


def build_attention_positions(config: TransformerConfig) -> AttentionPositions:
    kind = config.positions.kind
    rotary = Rotary(max_len=config.max_len, head_dim=config.head_dim, theta=config.positions.rope_theta) \
        if kind == "rope" else None
    return AttentionPositions(rotary, ALiBi(n_heads=config.n_heads) if kind == "alibi" else None)


def build_attention(config: TransformerConfig, *, kernel: Kernel, rotary: Rotary | None = None,
                    alibi: ALiBi | None = None) -> Attention:
    """An `Attention` around `kernel`; cross-attention passes no positions."""
    return Attention(
        d_model=config.d_model, n_heads=config.n_heads, n_kv_heads=config.n_kv_heads,
        head_dim=config.head_dim, bias=config.bias, dropout=config.dropout.attention,
        kernel=kernel, rotary=rotary, alibi=alibi,
    )


def build_mixer(config: TransformerConfig, *, causal: bool, positions: AttentionPositions | None = None) -> nn.Module:
    """What a layer's mixer slot holds: an `Attention` around the configured kernel, or the
    state-space mixer. Low-rank attention cannot be causal: an encoder-decoder uses it in the encoder and
    keeps exact attention in the decoder (a GPT config refuses it). `positions`: the stack's shared
    tables; None builds them for this mixer alone (one layer on its own, as benchmarks/complexity.py)."""
    a = config.attention
    if a.kind == "ssm":
        return SSMMixer(d_model=config.d_model, state=a.state, expand=a.expand, conv=a.conv, chunk=a.chunk,
                        bidirectional=not causal)
    if causal and a.kind == "lowrank":
        a = AttentionConfig(kind="sdpa")
    rotary, alibi = positions if positions is not None else build_attention_positions(config)
    return build_attention(config, kernel=build_kernel(a, max_len=config.max_len), rotary=rotary, alibi=alibi)


def build_layer(config: TransformerConfig, *, causal: bool, positions: AttentionPositions,
                cross: bool = False) -> nn.Module:
    """An encoder / BERT / GPT layer (`EncoderLayer`), or with `cross` a `DecoderLayer` (cross-attention is
    exact, without positions)."""
    def norm() -> nn.Module:
        return build_norm(config.norm, config.d_model, bias=config.bias)

    mlp = build_mlp(config)  # before the mixer: the order of construction fixes what a seed gives each module
    parts = dict(mixer=build_mixer(config, causal=causal, positions=positions), mlp=mlp, mixer_norm=norm(),
                 mlp_norm=norm(), dropout=config.dropout.residual, placement=config.norm.placement)
    if cross:
        cross_attn = build_attention(config, kernel=exact_kernel(config))
        return DecoderLayer(cross_attn=cross_attn, cross_norm=norm(), **parts)
    return EncoderLayer(**parts)


def build_stack(config: TransformerConfig, *, n_layers: int, causal: bool, cross: bool = False) -> Stack:
    """`n_layers` layers whose attention shares one RoPE / ALiBi table, and the final norm of pre-LN
    (nn.Identity when `norm.final` is off)."""
    positions = build_attention_positions(config)
    layers = [build_layer(config, causal=causal, positions=positions, cross=cross) for _ in range(n_layers)]
    final_norm = build_norm(config.norm, config.d_model, bias=config.bias) if config.norm.final else nn.Identity()
    return Stack(layers=layers, final_norm=final_norm, max_len=config.max_len)
