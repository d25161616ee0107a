"""Hugging Face interop: bad directories and configs give one-line ValueErrors naming the path or value,
configs with no Hugging Face equivalent are refused on export, and writes are atomic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load, save_file

import tformer
from tformer.config import PositionConfig
from tformer.interop import from_hf, mapping_for, to_hf


def tiny_gpt(**kw: object) -> tformer.GPT:
    return tformer.GPT(tformer.GPTConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=16,
                                         **kw))


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A valid GPT-2 checkpoint directory, written by us."""
    path = tmp_path / "gpt2"
    to_hf(tiny_gpt(), path)
    return path


def edit_config(path: Path, **changes: object) -> None:
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | changes))


def one_line(e: pytest.ExceptionInfo) -> str:
    message = str(e.value)
    assert "\n" not in message
    return message


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a directory") as e:
        from_hf(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in one_line(e)


def test_missing_config(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="has no config.json") as e:
        from_hf(tmp_path)
    assert str(tmp_path) in one_line(e)


def test_bad_json(checkpoint: Path) -> None:
    (checkpoint / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        from_hf(checkpoint)


@pytest.mark.parametrize("model_type", ["t5", None])
def test_unsupported_model_type(checkpoint: Path, model_type: str | None) -> None:
    edit_config(checkpoint, model_type=model_type)
    with pytest.raises(ValueError, match=f"model_type={model_type!r} is not supported; "
                                         "supported: bert, gpt2, llama, marian, pegasus") as e:
        from_hf(checkpoint)
    one_line(e)


def test_missing_weights_file(checkpoint: Path) -> None:
    (checkpoint / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="has no weights; expected one of model.safetensors, .*pytorch_model.bin"):
        from_hf(checkpoint)


def test_missing_and_extra_weights(checkpoint: Path) -> None:
    # read into memory: safetensors < 0.8 maps the file, and writing over a mapped file in place faults (SIGBUS)
    weights = load((checkpoint / "model.safetensors").read_bytes())
    save_file({k: v for k, v in weights.items() if k != "transformer.h.1.ln_1.weight"},
              checkpoint / "model.safetensors")
    with pytest.raises(ValueError, match="has no weight 'transformer.h.1.ln_1.weight'"):
        from_hf(checkpoint)
    save_file(weights | {"transformer.h.2.ln_1.weight": torch.ones(16)}, checkpoint / "model.safetensors")
    with pytest.raises(ValueError, match="1 weights our model has no place for: transformer.h.2.ln_1.weight"):
        from_hf(checkpoint)


def test_weights_that_do_not_fit_the_config(checkpoint: Path) -> None:
    edit_config(checkpoint, n_embd=32)
    with pytest.raises(ValueError, match="the weights do not fit config.json .*size mismatch") as e:
        from_hf(checkpoint)
    one_line(e)


@pytest.mark.parametrize(("model_type", "changes", "match"), [
    ("gpt2", dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx=True"),
    ("gpt2", dict(activation_function="quick_gelu"), "activation 'quick_gelu' has no equivalent"),
    ("llama", dict(rope_parameters=dict(rope_type="yarn", rope_theta=1e4, factor=4.0)), "rope_type='yarn'"),
    ("llama", dict(attention_bias=True, mlp_bias=False), "mlp_bias=False != attention_bias=True"),
    ("marian", dict(encoder_ffn_dim=64, decoder_ffn_dim=32), "encoder_ffn_dim=64 != decoder_ffn_dim=32"),
    ("pegasus", dict(encoder_attention_heads=4, decoder_attention_heads=2), "pegasus config encoder_attention_heads"),
    ("pegasus", dict(tie_word_embeddings=False), "tie_word_embeddings=False"),
    ("bert", dict(tie_word_embeddings=False), "tie_word_embeddings=False"),
])
def test_hf_options_we_do_not_have(model_type: str, changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tformer.interop.MAPPINGS[model_type].config_from_hf(dict(model_type=model_type, **changes))


def test_export_picks_the_hf_type() -> None:
    assert mapping_for(tformer.preset("gpt-tiny")).MODEL_TYPE == "gpt2"
    assert mapping_for(tformer.preset("llama-tiny")).MODEL_TYPE == "llama"
    assert mapping_for(tformer.preset("bert-tiny")).MODEL_TYPE == "bert"
    split = tformer.preset("transformer-tiny", dict(positions=dict(sinusoid_layout="split")))
    assert mapping_for(split).MODEL_TYPE == "marian"
    assert mapping_for(tformer.preset("transformer-tiny")).MODEL_TYPE == "marian"  # interleaved: permuted basis
    assert mapping_for(tformer.preset("transformer-tiny", dict(norm=dict(placement="pre")))).MODEL_TYPE == "pegasus"


def test_export_refuses_configs_with_no_hf_equivalent(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"as gpt2: positions.kind='alibi' \(needs 'learned'\).*"
                                         r"as llama: positions.kind='alibi' \(needs 'rope'\)") as e:
        to_hf(tiny_gpt(positions=PositionConfig(kind="alibi")), tmp_path / "out")
    one_line(e)
    with pytest.raises(ValueError, match=r"as marian: norm.placement='pre' \(needs 'post'\); "
                                         r"as pegasus: norm.final=False \(needs True\)") as e:
        to_hf(tformer.build_model(tformer.preset("transformer-tiny", dict(norm=dict(placement="pre", final=False)))),
              tmp_path / "out")
    one_line(e)
    with pytest.raises(ValueError, match=r"as pegasus: tie_embeddings=False \(needs True\)"):
        to_hf(tformer.build_model(tformer.preset("transformer-tiny", dict(norm=dict(placement="pre"),
                                                                          tie_embeddings=False))), tmp_path / "out")
    with pytest.raises(ValueError, match="to_hf writes GPT, BertForPretraining, EncoderDecoder models, "
                                         "not BertClassifier"):
        to_hf(tformer.BertClassifier(tformer.preset("bert-tiny")), tmp_path / "out")
    with pytest.raises(ValueError, match="attention.kind=windowed is not exact attention"):
        to_hf(tformer.build_model(tformer.preset("gpt-tiny", dict(attention="windowed"))), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kw: object) -> None:
        raise OSError("disk full")

    path = tmp_path / "out"
    monkeypatch.setattr("tformer.interop.hf.save_file", fail)
    with pytest.raises(ValueError, match="cannot write .*out: disk full$"):
        to_hf(tiny_gpt(), path)
    assert list(tmp_path.iterdir()) == []  # neither the directory nor a temporary one is left

    monkeypatch.undo()
    to_hf(tiny_gpt(), path)
    (path / "tokenizer.json").write_text("{}")
    before = {f.name: f.read_bytes() for f in path.iterdir()}
    monkeypatch.setattr("tformer.interop.hf.save_file", fail)
    with pytest.raises(ValueError, match=r"out: disk full \(what was there is kept\)"):
        to_hf(tiny_gpt(), path)
    assert {f.name: f.read_bytes() for f in path.iterdir()} == before  # the old checkpoint is untouched
    assert sorted(f.name for f in tmp_path.iterdir()) == ["out"]


def test_overwrite_keeps_other_files(tmp_path: Path) -> None:
    path = tmp_path / "out"
    to_hf(tiny_gpt(), path)
    (path / "tokenizer.json").write_text("{}")
    model = tiny_gpt()
    to_hf(model, path)
    assert sorted(f.name for f in path.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    back, _ = from_hf(path)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), back.state_dict().values(),
                                                  strict=True))
    with pytest.raises(ValueError, match="is a file"):
        to_hf(model, path / "tokenizer.json")


def test_relu2_has_no_hugging_face_or_ctranslate2_equivalent(tmp_path: Path) -> None:
    from tformer.interop.ct2 import unsupported

    model = tiny_gpt(activation="relu2")
    with pytest.raises(ValueError, match=r"activation='relu2' \(needs 'relu' or "):
        to_hf(model, tmp_path / "hf")
    assert unsupported(model) == ["activation=relu2 (CTranslate2 has relu, gelu, gelu_tanh, silu, swiglu, geglu)"]
    assert not (tmp_path / "hf").exists()
