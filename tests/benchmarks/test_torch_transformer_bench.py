"""benchmarks/torch_transformer.py (train_speed.py's nn.Transformer contender): our model's sizes but
nn.Transformer's final norms, causal decoding that ignores source padding, tformer's greedy without a cache."""

import pytest
import torch

import tformer
from benchmarks import torch_transformer as baseline
from tformer.decoding import greedy

D = 32


def tiny_config(**overrides: object) -> tformer.Seq2SeqConfig:
    return tformer.Seq2SeqConfig(vocab_size=40, d_model=D, n_heads=4, d_ff=64, n_layers=2, n_decoder_layers=1,
                                 max_len=32, **overrides)


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_same_sizes_as_ours_but_the_final_norms(placement: str) -> None:
    config = tiny_config(norm=tformer.config.NormConfig(placement=placement))
    ours, theirs = tformer.build_model(config), baseline.TorchBaseline(config)
    extra = 0 if config.norm.final else 2 * 2 * D  # nn.Transformer's final encoder and decoder LayerNorms
    assert baseline.n_parameters(theirs) - baseline.n_parameters(ours) == extra
    assert theirs.lm_head.weight is theirs.tokens.weight


def test_decode_is_causal_ignores_source_padding_and_greedy_runs() -> None:
    model = baseline.TorchBaseline(tiny_config()).eval()
    src, tgt = torch.randint(3, 40, (2, 7)), torch.randint(3, 40, (2, 6))
    src[1, 4:] = 0
    with torch.no_grad():  # the training path, not the nested-tensor fast path of inference mode
        logits = model(src, tgt)
        changed = tgt.clone()
        changed[:, 4:] = 5
        assert torch.allclose(model(src, changed)[:, :4], logits[:, :4], atol=1e-5)
        alone = model(src[1:, :4], tgt[1:])
        assert (alone - logits[1:]).abs().max() <= 1e-5
    assert greedy(model, src, use_cache=True) == greedy(model, src, use_cache=False)  # no cache: same path
    with pytest.raises(ValueError, match="no KV cache"):
        model.decode(tgt, model.encode(src), src != 0, offset=3)


def test_unsupported_parts_are_named() -> None:
    config = tiny_config(activation="swiglu", positions=tformer.config.PositionConfig(kind="rope"))
    with pytest.raises(ValueError, match="activation='swiglu'.*positions.kind='rope'"):
        baseline.TorchBaseline(config)

