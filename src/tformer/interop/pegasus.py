"""Pegasus (`PegasusForConditionalGeneration`) <-> our pre-LN `EncoderDecoder`.

Pegasus (Zhang et al. 2020, https://arxiv.org/abs/1912.08777) is, in `transformers`, Marian's model made
pre-LN: each sub-layer reads `norm(x)` (`self_attn_layer_norm`, `encoder_attn_layer_norm`,
`final_layer_norm` before the feed-forward) and each stack ends in a `layer_norm`, our `norm.final`. The
rest is Marian's: the BART-family names, LayerNorm eps 1e-5, frozen sinusoids in the split layout from
position 0, embeddings scaled by sqrt(d) with `scale_embedding`, `final_logits_bias` (our `output_bias`, zero
without one). So this module is marian.py with the norm changed; interleaved sinusoids export exactly
through the same basis permutation (`marian.to_split_basis`), which commutes with the final norms too.
Unlike Marian, Pegasus expects its sinusoid tables among the weights (they are frozen: we write them, and
recompute them on import).

Pegasus has one embedding matrix for source, target and output (`model.shared`; untying the output also
unties the encoder's and decoder's copies, which our shared vocabulary cannot follow), so we export only
configs with a shared vocabulary and tied embeddings. The old checkpoints' flags (`normalize_before`,
`add_final_layer_norm`, `normalize_embedding`, `static_position_embeddings`) are read by no current code
and not written.
"""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor

from tformer.config import NormConfig, Seq2SeqConfig
from tformer.interop import marian
from tformer.interop.common import require, unmet
from tformer.nn.positions import sinusoid_table

MODEL_TYPE = "pegasus"
ARCHITECTURE = "PegasusForConditionalGeneration"
FAMILY = "seq2seq"
# PegasusConfig's defaults where they differ from MarianConfig's (the others agree), for keys a config omits.
DEFAULTS = {"vocab_size": 50265, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0}
# Marian's options for separate vocabularies, which Pegasus does not have.
MARIAN_ONLY = ("decoder_vocab_size", "share_encoder_decoder_embeddings")
PRE_LN = NormConfig(kind="layernorm", eps=marian.LAYER_NORM_EPS, placement="pre", final=True)


def mismatches(cfg: Seq2SeqConfig) -> list[str]:
    return unmet(cfg, {**marian.requirements(cfg), "norm.placement": ("pre",), "norm.final": (True,),
                       "shared_vocab": (True,), "tie_embeddings": (True,)})


def config_from_hf(d: dict) -> Seq2SeqConfig:
    require(d, "tie_word_embeddings", (True,), True)
    config = marian.config_from_hf({**DEFAULTS, **{k: v for k, v in d.items() if k not in MARIAN_ONLY}})
    return replace(config, norm=PRE_LN)


def config_to_hf(cfg: Seq2SeqConfig) -> dict:
    d = {k: v for k, v in marian.config_to_hf(cfg).items() if k not in MARIAN_ONLY}
    return {**d, "model_type": MODEL_TYPE, "architectures": [ARCHITECTURE]}


# The weights are named as in Marian, plus model.{encoder,decoder}.layer_norm for our final norms.
state_from_hf = marian.state_from_hf


def state_to_hf(sd: dict[str, Tensor], cfg: Seq2SeqConfig) -> dict[str, Tensor]:
    out = marian.state_to_hf(sd, cfg)
    table = sinusoid_table(cfg.max_len, cfg.d_model, layout="split").to(out["model.shared.weight"].dtype)  # (n, d)
    for side in ("encoder", "decoder"):  # one copy each: safetensors stores no shared tensors
        out[f"model.{side}.embed_positions.weight"] = table.clone()
    return out
