"""`tformer convert` both ways on a tiny random Llama (grouped-query attention) built by `transformers`."""

import torch
import transformers

from tformer.cli import main
from tformer.training.checkpoint import load_model


def test_convert_from_and_to_hugging_face(tmp_path, capsys) -> None:  # noqa: ANN001
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    reference = transformers.LlamaForCausalLM(config).eval()
    reference.save_pretrained(tmp_path / "hf")
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ours")]) == 0
    ours, ours_config = load_model(tmp_path / "ours")
    assert ours_config.n_kv_heads == 2 and ours_config.positions.kind == "rope"
    ids = torch.randint(0, 64, (2, 9))
    with torch.no_grad():
        expected = reference(input_ids=ids).logits
        assert (ours(ids) - expected).abs().max() <= 1e-4
    assert main(["convert", "--to-hf", str(tmp_path / "ours"), "--out", str(tmp_path / "back")]) == 0
    back = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        assert (back(input_ids=ids).logits - expected).abs().max() <= 1e-4
    assert "exported" in capsys.readouterr().out


def test_convert_reports_a_missing_directory(tmp_path, capsys) -> None:  # noqa: ANN001
    assert main(["convert", "--from-hf", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tformer: error: ") and "missing" in err
    assert not (tmp_path / "x").exists()
