"""GPT-2 (`GPT2LMHeadModel`) <-> our `GPT` with learned positions, pre-LN LayerNorm and biases.

Two differences in the weights: GPT-2's projections are `Conv1D`, y = x W + b with W (in, out), the
transpose of nn.Linear's (out, in); and its attention computes q, k, v with one fused `c_attn`, which we
split into q_proj, k_proj, v_proj.

d width.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tformer.config import DropoutConfig, GPTConfig, InitConfig, NormConfig, PositionConfig
from tformer.interop.common import ACTIVATIONS_TO_HF, Weights, activation_from_hf, first_id, linear, require, unmet

MODEL_TYPE = "gpt2"
ARCHITECTURE = "GPT2LMHeadModel"
FAMILY = "gpt"
# Buffers of old checkpoints (the causal mask), not weights.
IGNORED = (r"transformer\.h\.\d+\.attn\.(masked_)?bias",)


def mismatches(cfg: GPTConfig) -> list[str]:
    return unmet(cfg, {
        "positions.kind": ("learned",), "norm.kind": ("layernorm",), "norm.placement": ("pre",),
        "norm.final": (True,), "activation": tuple(ACTIVATIONS_TO_HF), "bias": (True,),
        "scale_embeddings": (False,), "n_kv_heads": (cfg.n_heads,), "head_dim": (cfg.d_model // cfg.n_heads,),
    })


def config_from_hf(d: dict) -> GPTConfig:
    require(d, "scale_attn_weights", (True,), True)
    require(d, "scale_attn_by_inverse_layer_idx", (False,), False)
    require(d, "add_cross_attention", (False,), False)
    d_model = d.get("n_embd", 768)
    return GPTConfig(
        vocab_size=d.get("vocab_size", 50257), d_model=d_model, n_heads=d.get("n_head", 12),
        d_ff=d.get("n_inner") or 4 * d_model, n_layers=d.get("n_layer", 12), max_len=d.get("n_positions", 1024),
        activation=activation_from_hf(d.get("activation_function", "gelu_new")), bias=True,
        tie_embeddings=d.get("tie_word_embeddings", True),
        bos_id=first_id(d.get("bos_token_id")), eos_id=first_id(d.get("eos_token_id")),
        norm=NormConfig(kind="layernorm", eps=d.get("layer_norm_epsilon", 1e-5), placement="pre", final=True),
        positions=PositionConfig(kind="learned"),
        dropout=DropoutConfig(embed=d.get("embd_pdrop", 0.1), attention=d.get("attn_pdrop", 0.1),
                              residual=d.get("resid_pdrop", 0.1), activation=0.0),
        init=InitConfig(kind="normal", std=d.get("initializer_range", 0.02), scaled_residual=True),
    )


def config_to_hf(cfg: GPTConfig) -> dict:
    # No pad_token_id: our GPT never reads pad_id (padding comes in as `valid`), and writing our placeholder
    # would make Hugging Face treat that token as padding.
    return {
        "model_type": MODEL_TYPE, "architectures": [ARCHITECTURE], "vocab_size": cfg.vocab_size,
        "n_embd": cfg.d_model, "n_head": cfg.n_heads, "n_inner": cfg.d_ff, "n_layer": cfg.n_layers,
        "n_positions": cfg.max_len, "activation_function": ACTIVATIONS_TO_HF[cfg.activation],
        "layer_norm_epsilon": cfg.norm.eps, "tie_word_embeddings": cfg.tie_embeddings,
        "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id,
        "embd_pdrop": cfg.dropout.embed, "attn_pdrop": cfg.dropout.attention, "resid_pdrop": cfg.dropout.residual,
        "initializer_range": cfg.init.std, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
    }


def _pairs(cfg: GPTConfig) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(our name, GPT-2 name) pairs: those copied as they are, and the Conv1D weights, transposed."""
    plain = [("embed.tokens.weight", "transformer.wte.weight"),
             ("embed.positions.weight", "transformer.wpe.weight"),
             *linear("decoder.final_norm", "transformer.ln_f")]
    conv = []
    for i in range(cfg.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"transformer.h.{i}"
        plain += linear(f"{ours}.mixer_norm", f"{theirs}.ln_1") + linear(f"{ours}.mlp_norm", f"{theirs}.ln_2")
        for mine, conv1d in (("mixer.out_proj", "attn.c_proj"), ("mlp.fc_in", "mlp.c_fc"),
                             ("mlp.fc_out", "mlp.c_proj")):
            conv.append((f"{ours}.{mine}.weight", f"{theirs}.{conv1d}.weight"))
            plain.append((f"{ours}.{mine}.bias", f"{theirs}.{conv1d}.bias"))
    if not cfg.tie_embeddings:
        plain.append(("lm_head.weight", "lm_head.weight"))
    return plain, conv


def state_from_hf(sd: dict[str, Tensor], cfg: GPTConfig) -> dict[str, Tensor]:
    # The original checkpoints name the body without the "transformer." prefix.
    sd = {k if k.startswith(("transformer.", "lm_head.")) else f"transformer.{k}": v for k, v in sd.items()}
    w = Weights(sd, ignore=IGNORED + (("lm_head.weight",) if cfg.tie_embeddings else ()))
    plain, conv = _pairs(cfg)
    out = {ours: w[theirs] for ours, theirs in plain}
    out |= {ours: w[theirs].T for ours, theirs in conv}
    for i in range(cfg.n_layers):
        qkv_w = w[f"transformer.h.{i}.attn.c_attn.weight"].T  # (3d, d)
        qkv_b = w[f"transformer.h.{i}.attn.c_attn.bias"]  # (3d,)
        for name, weight, bias in zip(("q_proj", "k_proj", "v_proj"), qkv_w.chunk(3), qkv_b.chunk(3), strict=True):
            out[f"decoder.layers.{i}.mixer.{name}.weight"] = weight  # (d, d)
            out[f"decoder.layers.{i}.mixer.{name}.bias"] = bias
    if cfg.tie_embeddings:
        out["lm_head.weight"] = out["embed.tokens.weight"]
    w.check_all_used()
    return out


def state_to_hf(sd: dict[str, Tensor], cfg: GPTConfig) -> dict[str, Tensor]:
    plain, conv = _pairs(cfg)
    out = {theirs: sd[ours] for ours, theirs in plain}
    out |= {theirs: sd[ours].T.contiguous() for ours, theirs in conv}
    for i in range(cfg.n_layers):
        attn = f"decoder.layers.{i}.mixer"
        qkv = [sd[f"{attn}.{p}.weight"] for p in ("q_proj", "k_proj", "v_proj")]
        out[f"transformer.h.{i}.attn.c_attn.weight"] = torch.cat(qkv).T.contiguous()  # (d, 3d)
        out[f"transformer.h.{i}.attn.c_attn.bias"] = torch.cat([sd[f"{attn}.{p}.bias"]
                                                                for p in ("q_proj", "k_proj", "v_proj")])
    return out
