"""Bad input raises ValueError naming the value and the limit."""

import pytest
import torch

import tformer
from tformer.config import from_dict


def test_width_not_divisible_by_heads() -> None:
    with pytest.raises(ValueError, match="d_model=100 is not divisible by n_heads=8"):
        tformer.GPTConfig(d_model=100, n_heads=8)


def test_heads_not_divisible_by_kv_heads() -> None:
    with pytest.raises(ValueError, match="n_heads=8 is not divisible by n_kv_heads=3"):
        tformer.GPTConfig(n_heads=8, n_kv_heads=3)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("activation", "tanh", "activation='tanh' is not allowed"),
    ("n_layers", 0, "n_layers=0 must be a positive integer"),
    ("dropout", {"residual": 1.5}, r"dropout.residual=1.5 must be in \[0, 1\)"),
    ("norm", {"placement": "middle"}, "norm.placement='middle' is not allowed"),
    ("positions", {"kind": "xpos"}, "positions.kind='xpos' is not allowed"),
    ("d_model", "512", "config key 'd_model'='512' has the wrong type"),
    ("bias", 1, "config key 'bias'=1 has the wrong type"),
    ("heads", 8, "unknown config key 'heads'"),
])
def test_bad_config_values(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        from_dict(tformer.GPTConfig, {field: value})


def test_token_id_out_of_vocabulary() -> None:
    model = tformer.build_model(tformer.preset("gpt-tiny"))
    with pytest.raises(ValueError, match="token id 1000 is out of range; the vocabulary has ids 0..999"):
        model(torch.tensor([[1, 2, 1000]]))


def test_sequence_longer_than_position_table() -> None:
    model = tformer.build_model(tformer.preset("gpt-tiny", {"max_len": 8}))
    with pytest.raises(ValueError, match="position 8 is beyond the position table"):
        model(torch.ones(1, 9, dtype=torch.long))


def test_a_negative_id_is_named_in_training_mode_on_the_cpu() -> None:
    model = tformer.build_model(tformer.preset("gpt-tiny")).train()
    with pytest.raises(ValueError, match="token id -3 is out of range; the vocabulary has ids 0..999"):
        model(torch.tensor([[1, -3, 2]]))


def test_bad_ids_and_positions_are_named_on_every_device_here() -> None:
    """On the CPU, and on a GPU where there is one (benchmarks/gpu_check.sh runs this file there): the extremes
    are read in one transfer, and evaluation names the bad value rather than failing in the lookup."""
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        model = tformer.build_model(tformer.preset("gpt-tiny", {"max_len": 8})).to(device).eval()
        with pytest.raises(ValueError, match="token id 1000 is out of range; the vocabulary has ids 0..999"):
            model(torch.tensor([[1, 2, 1000]], device=device))
        with pytest.raises(ValueError, match="position 8 is beyond the position table"):
            model(torch.ones(1, 9, dtype=torch.long, device=device))
        assert model(torch.tensor([[1, 999]], device=device)).shape == (1, 2, 1000)


def test_ids_are_checked_where_it_costs_no_sync() -> None:
    """On the CPU always; on another device (here `meta`, standing in for a GPU, where a check is a sync)
    only outside training: evaluation and decoding."""
    embed = tformer.build_model(tformer.preset("gpt-tiny")).embed
    cpu, elsewhere = torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long, device="meta")
    assert embed.train()._checks(cpu) and not embed._checks(elsewhere)
    assert embed.eval()._checks(cpu) and embed._checks(elsewhere)


def test_sequence_longer_than_context_without_a_table() -> None:
    model = tformer.build_model(tformer.preset("llama-tiny", {"max_len": 8}))
    with pytest.raises(ValueError, match="sequence length 9 is longer than the context max_len=8"):
        model(torch.ones(1, 9, dtype=torch.long))


def test_seq2seq_special_ids_in_vocabulary() -> None:
    with pytest.raises(ValueError, match=r"eos_id=50 must be in \[0, vocab_size=50\)"):
        tformer.Seq2SeqConfig(vocab_size=50, eos_id=50)
