"""`models.calc.model_forward_flops` and `model_summary` against a count by hand, for each family: 2 FLOPs
per weight of every linear layer a token goes through, 4 * T * h * k per attention layer (Q K^T and the
weighted sum over T keys), training = 3 x forward."""

import pytest
import torch

import tformer
from tformer.errors import UserError
from tformer.models.calc import model_forward_flops, model_summary, weight_bytes

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


def test_weight_bytes_counts_the_built_model() -> None:
    """Parameters and buffers, a tied tensor once, 4 bytes each in float32: what building allocates."""
    for name in ("gpt-tiny", "transformer-tiny", "bert-tiny", "rnn-small"):
        config = tformer.preset(name, {"vocab_size": V})
        model = tformer.build_model(config)
        tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}.values()
        assert weight_bytes(config) == sum(t.numel() * t.element_size() for t in tensors)


def test_a_model_larger_than_free_memory_is_refused_before_it_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tformer.data.device.free_memory", lambda device: 2**30)
    config = tformer.preset("gpt-tiny", {**SIZES, "d_ff": 10_000_000})
    with pytest.raises(UserError, match=r"^the model needs 2\.5 GiB for its weights \(vocab_size=50, d_model=16, "
                                        r"d_ff=10000000, n_layers=2, max_len=16\), more than the 1\.0 GiB this "
                                        r"machine has free$"):
        tformer.build_model(config)
    tformer.build_model(tformer.preset("gpt-tiny", SIZES))  # a model that fits is built


def test_checking_the_size_leaves_the_seeded_weights_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimate builds on the meta device, which draws no random numbers."""
    torch.manual_seed(0)
    checked = tformer.build_model(tformer.preset("gpt-tiny", SIZES))
    monkeypatch.setattr("tformer.models.calc.check_fits", lambda config, device=None: None)
    torch.manual_seed(0)
    unchecked = tformer.build_model(tformer.preset("gpt-tiny", SIZES))
    assert all(torch.equal(a, b) for a, b in zip(checked.state_dict().values(), unchecked.state_dict().values(),
                                                 strict=True))
