"""`models.calc.model_forward_flops` and `model_summary` against a count by hand, for each family: 2 FLOPs
per weight of every linear layer a token goes through, 4 * T * h * k per attention layer (Q K^T and the
weighted sum over T keys), training = 3 x forward."""

import pytest

import tformer
from tformer.models.calc import model_forward_flops, model_summary

L, D, FF, V, T, HEADS = 2, 16, 32, 50, 16, 2
SIZES = {"d_model": D, "n_heads": HEADS, "d_ff": FF, "n_layers": L, "max_len": T, "vocab_size": V}
ATTENTION = 4 * T * D  # per attention layer: h * k = d


def test_gpt_by_hand() -> None:
    model = tformer.build_model(tformer.preset("gpt-tiny", SIZES))
    linears = L * (4 * D * D + 2 * D * FF) + D * V  # q, k, v, out; the MLP's two; the output projection
    assert model_forward_flops(model, T) == 2 * linears + L * ATTENTION == 11_840


def test_encoder_decoder_by_hand() -> None:
    model = tformer.build_model(tformer.preset("transformer-tiny", SIZES))
    encoder = L * (4 * D * D + 2 * D * FF)
    decoder = L * (8 * D * D + 2 * D * FF)  # self- and cross-attention
    assert model_forward_flops(model, T) == 2 * (encoder + decoder + D * V) + 3 * L * ATTENTION == 28_224


def test_bert_classifier_by_hand_and_its_summary() -> None:
    model = tformer.BertClassifier(tformer.preset("bert-tiny", {**SIZES, "n_labels": 3}))
    linears = L * (4 * D * D + 2 * D * FF) + D * D + D * 3  # the encoder, the pooler, the classifier
    assert model_forward_flops(model, T) == 2 * linears + L * ATTENTION == 10_848
    total = sum(p.numel() for p in model.parameters())
    embeddings = (V + T + 2) * D  # tokens, positions, segment types
    line = model_summary(model, seq_len=T)
    assert line == (f"model: {total / 1e3:.3g}k parameters ({(total - embeddings) / 1e3:.3g}k without embeddings), "
                    f"{3 * 10_848 / 1e3:.3g}k training FLOPs per token at context {T}")


@pytest.mark.parametrize("name", ["gpt-tiny", "transformer-tiny"])
def test_tied_weights_count_once(name: str) -> None:
    model = tformer.build_model(tformer.preset(name, SIZES))
    unique = sum(p.numel() for p in model.parameters())  # parameters() yields a shared tensor once
    assert f"model: {unique / 1e3:.3g}k parameters" in model_summary(model, seq_len=T)
