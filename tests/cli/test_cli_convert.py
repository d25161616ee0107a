"""`tformer convert` both ways on a tiny random Llama (grouped-query attention) built by `transformers`."""

import pytest
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


def _byte_level_tokenizer_json(path) -> int:  # noqa: ANN001
    """Train a small byte-level BPE like GPT-2's, save it as `path`, return the id of <|endoftext|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(["In the beginning God created the heavens and the earth."] * 4, trainer)
    tokenizer.save(str(path))
    return tokenizer.token_to_id("<|endoftext|>")


def test_generate_and_score_an_imported_gpt2(tmp_path, capsys) -> None:  # noqa: ANN001
    (tmp_path / "hf").mkdir()
    eot = _byte_level_tokenizer_json(tmp_path / "hf" / "tokenizer.json")
    from tokenizers import Tokenizer

    backend = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=backend.get_vocab_size(), n_embd=32, n_head=4, n_layer=2,
                                     n_positions=64, bos_token_id=eot, eos_token_id=eot)
    reference = transformers.GPT2LMHeadModel(config).eval()
    reference.save_pretrained(tmp_path / "hf")
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ours")]) == 0
    capsys.readouterr()

    prompt = "In the beginning"
    assert main(["generate", "--checkpoint", str(tmp_path / "ours"), "--prompt", prompt, "--temperature", "0",
                 "--max-new-tokens", "12", "--no-stop"]) == 0
    ids = torch.tensor([[eot] + backend.encode(prompt, add_special_tokens=False).ids])
    with torch.no_grad():
        new = reference.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                                 eos_token_id=None, pad_token_id=eot)[0, ids.shape[1]:].tolist()
    assert capsys.readouterr().out == prompt + backend.decode(new, skip_special_tokens=True) + "\n"

    (tmp_path / "text.txt").write_text(prompt + "\n", encoding="utf-8")
    assert main(["score", "--checkpoint", str(tmp_path / "ours"), str(tmp_path / "text.txt")]) == 0
    row = capsys.readouterr().out.splitlines()[1].split("\t")
    with torch.no_grad():
        log_probs = reference(ids).logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None]).sum()
    assert float(row[1]) == pytest.approx(log_probs.item(), abs=1e-3)
