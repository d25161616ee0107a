"""Presets: the paper's parameter counts, and the calculators."""

import pytest

import tformer
from tformer.models.calc import forward_flops_per_token, param_count, train_flops_per_token
from tformer.models.presets import PRESETS


def test_paper_parameter_counts() -> None:
    # Vaswani et al. 2017, table 3: base 65M, big 213M (37,000 shared tokens, tied embeddings)
    base = param_count(tformer.preset("transformer-base"))
    big = param_count(tformer.preset("transformer-big"))
    print(f"transformer-base {base / 1e6:.1f}M, transformer-big {big / 1e6:.1f}M")
    assert abs(base - 65e6) / 65e6 < 0.04
    assert abs(big - 213e6) / 213e6 < 0.02


def test_reference_sizes() -> None:
    assert param_count(tformer.preset("gpt2-small")) == 124_439_808  # GPT2LMHeadModel, tied
    assert param_count(tformer.preset("bert-base")) == 110_106_428  # BertForPreTraining


@pytest.mark.parametrize("name", [n for n in PRESETS if "tiny" in n])
def test_tiny_presets_build_and_count(name: str) -> None:
    config = tformer.preset(name)
    model = tformer.build_model(config)
    assert param_count(config) == sum(p.numel() for p in model.parameters())


def test_paper_sizes_of_the_presets() -> None:
    big = tformer.preset("transformer-big")
    sizes = (big.d_model, big.d_ff, big.n_heads, big.head_dim, big.dropout.residual)
    assert sizes == (1024, 4096, 16, 64, 0.3)
    base = tformer.preset("transformer-base")
    sizes = (base.d_model, base.d_ff, base.n_heads, base.n_layers, base.n_decoder_layers)
    assert sizes == (512, 2048, 8, 6, 6)


def test_flops_close_to_six_n() -> None:
    config = tformer.preset("gpt2-small")
    n = param_count(config, exclude_embeddings=True)
    head = config.vocab_size * config.d_model
    attention = 12 * config.n_layers * 1024 * config.d_model  # 3 x 4 n h k per layer
    expected = 6 * (n + head) + attention  # n also counts biases and norms, which are no matmuls
    assert abs(train_flops_per_token(config, 1024) - expected) / expected < 1e-3
    assert forward_flops_per_token(config, 2048) > forward_flops_per_token(config, 1024)


def test_overrides_and_unknown_preset() -> None:
    config = tformer.preset("gpt-tiny", {"n_layers": 3, "dropout": {"embed": 0.0}})
    assert config.n_layers == 3 and config.dropout.embed == 0.0 and config.dropout.residual == 0.1
    with pytest.raises(ValueError, match="unknown preset 'gpt-9'"):
        tformer.preset("gpt-9")
    with pytest.raises(ValueError, match="unknown config key 'dropout.embd'"):
        tformer.preset("gpt-tiny", {"dropout": {"embd": 0.0}})

