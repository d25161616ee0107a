"""Llama (`LlamaForCausalLM`) <-> our `GPT` with RoPE, pre-LN RMSNorm and a gated feed-forward (SwiGLU).

Names aside, the weights match as they are: our RoPE uses the same "rotate half" layout, so q_proj and
k_proj need no permutation, and grouped-query attention (n_kv_heads < n_heads) has the same head order.
Only the default RoPE is supported (no rope_scaling such as "linear", "dynamic", "yarn", "llama3").
"""

from __future__ import annotations

from torch import Tensor

from tformer.config import DropoutConfig, GPTConfig, InitConfig, NormConfig, PositionConfig
from tformer.errors import UserError
from tformer.interop.common import Weights, activation_from_hf, first_id, linear, require, unmet

MODEL_TYPE = "llama"
ARCHITECTURE = "LlamaForCausalLM"
FAMILY = "gpt"
# Gated feed-forward: Hugging Face names the gate's activation, we name the gated unit.
GATED_FROM_HF = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu"}
GATED_TO_HF = {"swiglu": "silu", "geglu": "gelu"}
IGNORED = (r"model\.(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq",)  # a buffer in old checkpoints


def mismatches(cfg: GPTConfig) -> list[str]:
    return unmet(cfg, {
        "positions.kind": ("rope",), "norm.kind": ("rmsnorm",), "norm.placement": ("pre",),
        "norm.final": (True,), "activation": tuple(GATED_TO_HF), "scale_embeddings": (False,),
    })


def _rope(d: dict) -> float:
    """The RoPE base, from `rope_parameters` (transformers 5) or `rope_theta` / `rope_scaling` (before)."""
    rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise UserError(f"llama config rope_type={kind!r} has no equivalent here; supported: 'default'")
    return float(rope.get("rope_theta", d.get("rope_theta", 10000.0)))


def config_from_hf(d: dict) -> GPTConfig:
    require(d, "pretraining_tp", (1, None), 1)
    bias = d.get("attention_bias", False)
    if d.get("mlp_bias", False) != bias:
        raise UserError(f"llama config mlp_bias={d.get('mlp_bias', False)} != attention_bias={bias}; "
                         "our one `bias` covers every projection")
    d_model, n_heads = d.get("hidden_size", 4096), d.get("num_attention_heads", 32)
    return GPTConfig(
        vocab_size=d.get("vocab_size", 32000), d_model=d_model, n_heads=n_heads,
        n_kv_heads=d.get("num_key_value_heads") or n_heads, head_dim=d.get("head_dim") or d_model // n_heads,
        d_ff=d.get("intermediate_size", 11008), n_layers=d.get("num_hidden_layers", 32),
        max_len=d.get("max_position_embeddings", 2048),
        activation=activation_from_hf(d.get("hidden_act", "silu"), GATED_FROM_HF), bias=bias,
        tie_embeddings=d.get("tie_word_embeddings", False),
        bos_id=first_id(d.get("bos_token_id")), eos_id=first_id(d.get("eos_token_id")),
        norm=NormConfig(kind="rmsnorm", eps=d.get("rms_norm_eps", 1e-6), placement="pre", final=True),
        positions=PositionConfig(kind="rope", rope_theta=_rope(d)),
        dropout=DropoutConfig(embed=0.0, attention=d.get("attention_dropout", 0.0), residual=0.0, activation=0.0),
        init=InitConfig(kind="normal", std=d.get("initializer_range", 0.02)),
    )


def config_to_hf(cfg: GPTConfig) -> dict:
    # No pad_token_id, as for GPT-2: our GPT never reads pad_id. Llama has no embedding, residual or
    # activation dropout; those rates (training only) are not written.
    theta = cfg.positions.rope_theta
    return {
        "model_type": MODEL_TYPE, "architectures": [ARCHITECTURE], "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model, "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim, "intermediate_size": cfg.d_ff, "num_hidden_layers": cfg.n_layers,
        "max_position_embeddings": cfg.max_len, "hidden_act": GATED_TO_HF[cfg.activation],
        "rms_norm_eps": cfg.norm.eps, "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "attention_bias": cfg.bias, "mlp_bias": cfg.bias, "tie_word_embeddings": cfg.tie_embeddings,
        "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id, "attention_dropout": cfg.dropout.attention,
        "initializer_range": cfg.init.std, "pretraining_tp": 1,
    }


def _pairs(cfg: GPTConfig) -> list[tuple[str, str]]:
    """(our name, Llama name) for every stored weight."""
    pairs = [("embed.tokens.weight", "model.embed_tokens.weight"), ("decoder.final_norm.weight", "model.norm.weight")]
    for i in range(cfg.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"model.layers.{i}"
        pairs += [(f"{ours}.mixer_norm.weight", f"{theirs}.input_layernorm.weight"),
                  (f"{ours}.mlp_norm.weight", f"{theirs}.post_attention_layernorm.weight")]
        for mine, hf in (("mixer.q_proj", "self_attn.q_proj"), ("mixer.k_proj", "self_attn.k_proj"),
                         ("mixer.v_proj", "self_attn.v_proj"), ("mixer.out_proj", "self_attn.o_proj"),
                         ("mlp.gate_proj", "mlp.gate_proj"), ("mlp.up_proj", "mlp.up_proj"),
                         ("mlp.down_proj", "mlp.down_proj")):
            pairs += linear(f"{ours}.{mine}", f"{theirs}.{hf}", bias=cfg.bias)
    if not cfg.tie_embeddings:
        pairs.append(("lm_head.weight", "lm_head.weight"))
    return pairs


def state_from_hf(sd: dict[str, Tensor], cfg: GPTConfig) -> dict[str, Tensor]:
    w = Weights(sd, ignore=IGNORED + (("lm_head.weight",) if cfg.tie_embeddings else ()))
    out = {ours: w[theirs] for ours, theirs in _pairs(cfg)}
    if cfg.tie_embeddings:
        out["lm_head.weight"] = out["embed.tokens.weight"]
    w.check_all_used()
    return out


def state_to_hf(sd: dict[str, Tensor], cfg: GPTConfig) -> dict[str, Tensor]:
    return {theirs: sd[ours] for ours, theirs in _pairs(cfg)}
