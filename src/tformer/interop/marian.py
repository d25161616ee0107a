"""Marian (`MarianMTModel`, the OPUS-MT translation models) <-> our `EncoderDecoder`.

Marian is the paper's model with a few choices of its own, all expressible in our config: post-LN, no
final norm, sinusoidal positions in the "split" layout (sin half | cos half), token embeddings scaled by
sqrt(d) (`scale_embedding`), one embedding matrix shared by source, target and output (unless
`share_encoder_decoder_embeddings` is off), and `final_logits_bias` added to the logits, our
`output_bias`. Decoding starts from `decoder_start_token_id`, which is the pad id in OPUS-MT.

Our default, the paper's "interleaved" sinusoids (sin on even dims, cos on odd), exports exactly too: the
two tables differ only in the order of the d_model dimensions, and a model computes the same function when
every weight touching the residual stream has that axis reordered alike (`to_split_basis`).

Pegasus (pegasus.py) is this model pre-LN, with a LayerNorm after each stack: it reuses this module's
requirements, config and weight mapping (which names those final norms when a config has them).

V target vocabulary, d model width.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tformer.config import DropoutConfig, InitConfig, NormConfig, PositionConfig, Seq2SeqConfig
from tformer.errors import UserError
from tformer.interop.common import ACTIVATIONS_TO_HF, Weights, activation_from_hf, first_id, linear, unmet

MODEL_TYPE = "marian"
ARCHITECTURE = "MarianMTModel"
FAMILY = "seq2seq"
# The sinusoid tables (recomputed, not weights), and copies of the shared embedding.
IGNORED = (r"model\.(encoder|decoder)\.embed_positions\.weight",)
SHARED_COPIES = (r"model\.(encoder|decoder)\.embed_tokens\.weight",)
LAYER_NORM_EPS = 1e-5  # fixed in Marian (torch's default)


def requirements(cfg: Seq2SeqConfig) -> dict[str, tuple]:
    """The config values Marian can express, by dotted name (`unmet`)."""
    return {
        "positions.kind": ("sinusoidal",),  # either layout: to_split_basis maps interleaved to split
        "norm.kind": ("layernorm",), "norm.placement": ("post",), "norm.final": (False,),
        "norm.eps": (LAYER_NORM_EPS,), "activation": tuple(ACTIVATIONS_TO_HF), "bias": (True,),
        "n_kv_heads": (cfg.n_heads,), "head_dim": (cfg.d_model // cfg.n_heads,),
    }


def mismatches(cfg: Seq2SeqConfig) -> list[str]:
    return unmet(cfg, requirements(cfg))


def config_from_hf(d: dict) -> Seq2SeqConfig:
    for ours, encoder, decoder in (("d_ff", "encoder_ffn_dim", "decoder_ffn_dim"),
                                   ("n_heads", "encoder_attention_heads", "decoder_attention_heads")):
        if d.get(encoder) != d.get(decoder):
            raise UserError(f"{d.get('model_type', MODEL_TYPE)} config {encoder}={d.get(encoder)} != "
                             f"{decoder}={d.get(decoder)}; our encoder and decoder share one {ours}")
    shared = d.get("share_encoder_decoder_embeddings", True)
    vocab = d.get("vocab_size", 58101)
    pad = d.get("pad_token_id", 58100)
    start = d.get("decoder_start_token_id", pad)
    bos = d.get("bos_token_id")
    dropout = d.get("dropout", 0.1)
    return Seq2SeqConfig(
        vocab_size=vocab if shared else d.get("decoder_vocab_size") or vocab,
        src_vocab_size=None if shared else vocab, d_model=d.get("d_model", 1024),
        n_heads=d.get("encoder_attention_heads", 16), d_ff=d.get("encoder_ffn_dim", 4096),
        n_layers=d.get("encoder_layers", 12), n_decoder_layers=d.get("decoder_layers", 12),
        max_len=d.get("max_position_embeddings", 1024),
        activation=activation_from_hf(d.get("activation_function", "gelu")), bias=True,
        scale_embeddings=d.get("scale_embedding", False), tie_embeddings=d.get("tie_word_embeddings", True),
        pad_id=pad, bos_id=start if bos is None else bos, eos_id=first_id(d.get("eos_token_id", 0)),
        decoder_start_id=start, output_bias=True,
        norm=NormConfig(kind="layernorm", eps=LAYER_NORM_EPS, placement="post", final=False),
        positions=PositionConfig(kind="sinusoidal", sinusoid_layout="split"),
        dropout=DropoutConfig(embed=dropout, attention=d.get("attention_dropout", 0.0), residual=dropout,
                              activation=d.get("activation_dropout", 0.0)),
        init=InitConfig(kind="normal", std=d.get("init_std", 0.02)),
    )


def config_to_hf(cfg: Seq2SeqConfig) -> dict:
    return {
        "model_type": MODEL_TYPE, "architectures": [ARCHITECTURE], "is_encoder_decoder": True,
        "vocab_size": cfg.vocab_size if cfg.shared_vocab else cfg.src_vocab_size,
        "decoder_vocab_size": cfg.vocab_size, "share_encoder_decoder_embeddings": cfg.shared_vocab,
        "tie_word_embeddings": cfg.tie_embeddings, "d_model": cfg.d_model,
        "encoder_layers": cfg.n_layers, "decoder_layers": cfg.n_decoder_layers,
        "encoder_attention_heads": cfg.n_heads, "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.d_ff, "decoder_ffn_dim": cfg.d_ff, "max_position_embeddings": cfg.max_len,
        "activation_function": ACTIVATIONS_TO_HF[cfg.activation], "scale_embedding": cfg.scale_embeddings,
        "pad_token_id": cfg.pad_id, "bos_token_id": cfg.bos_id, "eos_token_id": cfg.eos_id,
        "forced_eos_token_id": cfg.eos_id, "decoder_start_token_id": cfg.decoder_start_id,
        "dropout": cfg.dropout.residual, "attention_dropout": cfg.dropout.attention,
        "activation_dropout": cfg.dropout.activation, "init_std": cfg.init.std,
    }


def _pairs(cfg: Seq2SeqConfig) -> list[tuple[str, str]]:
    """(our name, Marian name) for every weight stored under its own name (the embeddings aside)."""
    pairs = []
    for side, n_layers in (("encoder", cfg.n_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n_layers):
            ours, theirs = f"{side}.layers.{i}", f"model.{side}.layers.{i}"
            parts = [("mixer", "self_attn"), ("mixer_norm", "self_attn_layer_norm"), ("mlp.fc_in", "fc1"),
                     ("mlp.fc_out", "fc2"), ("mlp_norm", "final_layer_norm")]
            if side == "decoder":
                parts += [("cross_attn", "encoder_attn"), ("cross_norm", "encoder_attn_layer_norm")]
            for mine, hf in parts:
                if mine in ("mixer", "cross_attn"):
                    for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                        pairs += linear(f"{ours}.{mine}.{proj}", f"{theirs}.{hf}.{proj}")
                else:
                    pairs += linear(f"{ours}.{mine}", f"{theirs}.{hf}")
        if cfg.norm.final:  # pre-LN's norm after the last layer (Pegasus, mBART)
            pairs += linear(f"{side}.final_norm", f"model.{side}.layer_norm")
    if cfg.shared_vocab:
        pairs.append(("tgt_embed.tokens.weight", "model.shared.weight"))
    else:
        pairs += [("src_embed.tokens.weight", "model.encoder.embed_tokens.weight"),
                  ("tgt_embed.tokens.weight", "model.decoder.embed_tokens.weight")]
    if not cfg.tie_embeddings:
        pairs.append(("lm_head.weight", "lm_head.weight"))
    return pairs


def state_from_hf(sd: dict[str, Tensor], cfg: Seq2SeqConfig) -> dict[str, Tensor]:
    shared = "model.shared.weight"
    if cfg.shared_vocab and shared not in sd and "model.encoder.embed_tokens.weight" in sd:
        sd = {**sd, shared: sd["model.encoder.embed_tokens.weight"]}  # a checkpoint keeping only the copies
    ignore = IGNORED + (SHARED_COPIES if cfg.shared_vocab else ())
    if cfg.tie_embeddings:
        ignore += ("lm_head.weight",)
    w = Weights(sd, ignore=ignore)
    out = {ours: w[theirs] for ours, theirs in _pairs(cfg)}
    if cfg.shared_vocab:
        out["src_embed.tokens.weight"] = out["tgt_embed.tokens.weight"]
    if cfg.tie_embeddings:
        out["lm_head.weight"] = out["tgt_embed.tokens.weight"]
    # Marian lets final_logits_bias be absent (then zeros).
    bias = w["final_logits_bias"] if "final_logits_bias" in w else torch.zeros(1, cfg.vocab_size)
    out["lm_head.bias"] = bias[0]  # (1, V) -> (V,)
    w.check_all_used()
    return out


# The axis that lies along the residual stream (d_model), by the end of our weight's name: the columns of
# what reads from it (embeddings and the output layer, q/k/v, fc_in), the rows of what writes to it
# (out_proj, fc_out) with their biases, and every norm. Attention's head dims and fc_in's rows stay.
RESIDUAL_AXIS = {"tokens.weight": 1, "lm_head.weight": 1, "q_proj.weight": 1, "k_proj.weight": 1,
                 "v_proj.weight": 1, "fc_in.weight": 1, "out_proj.weight": 0, "out_proj.bias": 0,
                 "fc_out.weight": 0, "fc_out.bias": 0, "norm.weight": 0, "norm.bias": 0}


def to_split_basis(sd: dict[str, Tensor], d_model: int) -> dict[str, Tensor]:
    """Our weights in the basis where the interleaved sinusoid table is the split one: our dim 2i becomes
    dim i, our dim 2i+1 dim ceil(d/2) + i. A permutation of the residual stream commutes with every
    LayerNorm and is undone by the next weight that reads the stream, so the model computes the same
    logits, now with Marian's (split) positions."""
    order = torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])  # (d,): new dim j = old order[j]
    out = {}
    for name, w in sd.items():
        axis = next((a for end, a in RESIDUAL_AXIS.items() if name.endswith(end)), None)
        out[name] = w if axis is None else w.index_select(axis, order)  # (.., d, ..) reordered along `axis`
    return out


def state_to_hf(sd: dict[str, Tensor], cfg: Seq2SeqConfig) -> dict[str, Tensor]:
    if cfg.positions.sinusoid_layout == "interleaved":
        sd = to_split_basis(sd, cfg.d_model)
    out = {theirs: sd[ours] for ours, theirs in _pairs(cfg)}
    bias = sd["lm_head.bias"] if cfg.output_bias else torch.zeros(cfg.vocab_size)
    out["final_logits_bias"] = bias[None]  # (1, V)
    return out
