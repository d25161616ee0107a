"""BERT (`BertForPreTraining`: masked-LM and next-sentence heads) <-> our `BertForPretraining`.

The layers match one to one; only the names differ. The masked-LM output matrix is the token embedding
(tied, in both), so only its bias is stored: `cls.predictions.bias`.
"""

from __future__ import annotations

from torch import Tensor

from tformer.config import BertConfig, DropoutConfig, InitConfig, NormConfig, PositionConfig
from tformer.interop.common import ACTIVATIONS_TO_HF, Weights, activation_from_hf, linear, require, unmet

MODEL_TYPE = "bert"
ARCHITECTURE = "BertForPreTraining"
FAMILY = "bert"
# A buffer, and copies of tied weights that some checkpoints store.
IGNORED = (r"bert\.embeddings\.position_ids", r"cls\.predictions\.decoder\.(weight|bias)")


def mismatches(cfg: BertConfig) -> list[str]:
    return unmet(cfg, {
        "positions.kind": ("learned",), "norm.kind": ("layernorm",), "norm.placement": ("post",),
        "norm.final": (False,), "activation": tuple(ACTIVATIONS_TO_HF), "bias": (True,),
        "scale_embeddings": (False,), "n_kv_heads": (cfg.n_heads,), "head_dim": (cfg.d_model // cfg.n_heads,),
    })


def config_from_hf(d: dict) -> BertConfig:
    require(d, "position_embedding_type", ("absolute",), "absolute")
    require(d, "is_decoder", (False,), False)
    require(d, "tie_word_embeddings", (True,), True)  # our masked-LM head is always tied
    hidden_dropout = d.get("hidden_dropout_prob", 0.1)
    classifier_dropout = d.get("classifier_dropout")
    return BertConfig(
        vocab_size=d.get("vocab_size", 30522), d_model=d.get("hidden_size", 768),
        n_heads=d.get("num_attention_heads", 12), d_ff=d.get("intermediate_size", 3072),
        n_layers=d.get("num_hidden_layers", 12), max_len=d.get("max_position_embeddings", 512),
        activation=activation_from_hf(d.get("hidden_act", "gelu")), bias=True,
        pad_id=d.get("pad_token_id") or 0, type_vocab_size=d.get("type_vocab_size", 2),
        n_labels=len(d["id2label"]) if d.get("id2label") else 2, label_names=names_from_hf(d.get("id2label")),
        classifier_dropout=hidden_dropout if classifier_dropout is None else classifier_dropout,
        norm=NormConfig(kind="layernorm", eps=d.get("layer_norm_eps", 1e-12), placement="post", final=False),
        positions=PositionConfig(kind="learned"),
        dropout=DropoutConfig(embed=hidden_dropout, attention=d.get("attention_probs_dropout_prob", 0.1),
                              residual=hidden_dropout, activation=0.0),
        init=InitConfig(kind="normal", std=d.get("initializer_range", 0.02)),
    )


def config_to_hf(cfg: BertConfig) -> dict:
    return {
        "model_type": MODEL_TYPE, "architectures": [ARCHITECTURE], "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model, "num_attention_heads": cfg.n_heads, "intermediate_size": cfg.d_ff,
        "num_hidden_layers": cfg.n_layers, "max_position_embeddings": cfg.max_len,
        "hidden_act": ACTIVATIONS_TO_HF[cfg.activation], "layer_norm_eps": cfg.norm.eps,
        "pad_token_id": cfg.pad_id, "type_vocab_size": cfg.type_vocab_size,
        "id2label": {str(i): name for i, name in enumerate(label_names(cfg))},
        "hidden_dropout_prob": cfg.dropout.residual, "attention_probs_dropout_prob": cfg.dropout.attention,
        "classifier_dropout": cfg.classifier_dropout, "initializer_range": cfg.init.std,
        "position_embedding_type": "absolute", "tie_word_embeddings": True,
    }


def _pairs(cfg: BertConfig) -> list[tuple[str, str]]:
    """(our name, Hugging Face name) for every stored weight."""
    pairs = [("bert.embed.tokens.weight", "bert.embeddings.word_embeddings.weight"),
             ("bert.embed.positions.weight", "bert.embeddings.position_embeddings.weight"),
             ("bert.embed.segments.weight", "bert.embeddings.token_type_embeddings.weight"),
             *linear("bert.embed.norm", "bert.embeddings.LayerNorm"),
             *linear("bert.pooler", "bert.pooler.dense"),
             *linear("mlm_head.transform", "cls.predictions.transform.dense"),
             *linear("mlm_head.norm", "cls.predictions.transform.LayerNorm"),
             ("mlm_head.decoder.bias", "cls.predictions.bias"),
             *linear("nsp_head", "cls.seq_relationship")]
    for i in range(cfg.n_layers):
        ours, theirs = f"bert.encoder.layers.{i}", f"bert.encoder.layer.{i}"
        for mine, hf in (("mixer.q_proj", "attention.self.query"), ("mixer.k_proj", "attention.self.key"),
                         ("mixer.v_proj", "attention.self.value"), ("mixer.out_proj", "attention.output.dense"),
                         ("mixer_norm", "attention.output.LayerNorm"), ("mlp.fc_in", "intermediate.dense"),
                         ("mlp.fc_out", "output.dense"), ("mlp_norm", "output.LayerNorm")):
            pairs += linear(f"{ours}.{mine}", f"{theirs}.{hf}")
    return pairs


def state_from_hf(sd: dict[str, Tensor], cfg: BertConfig) -> dict[str, Tensor]:
    # The original TensorFlow-converted checkpoints call LayerNorm's weight and bias gamma and beta.
    sd = {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
          for k, v in sd.items()}
    if "cls.predictions.bias" not in sd and "cls.predictions.decoder.bias" in sd:
        sd["cls.predictions.bias"] = sd.pop("cls.predictions.decoder.bias")
    w = Weights(sd, ignore=IGNORED)
    out = {ours: w[theirs] for ours, theirs in _pairs(cfg)}
    out["mlm_head.decoder.weight"] = out["bert.embed.tokens.weight"]
    w.check_all_used()
    return out


def state_to_hf(sd: dict[str, Tensor], cfg: BertConfig) -> dict[str, Tensor]:
    return {theirs: sd[ours] for ours, theirs in _pairs(cfg)}


def label_names(cfg: BertConfig) -> list[str]:
    return list(cfg.label_names) or [f"LABEL_{i}" for i in range(cfg.n_labels)]


def names_from_hf(id2label: dict | None) -> list[str]:
    """Class names from config.json's id2label, unless they are the default LABEL_i."""
    if not id2label:
        return []
    names = [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(len(id2label))]
    return [] if names == [f"LABEL_{i}" for i in range(len(names))] else names
