"""Hugging Face interop, against `transformers` itself: tiny random models of each supported type
(GPT-2, BERT with its pre-training heads, Marian, Pegasus, Llama with grouped-query attention) read with
`from_hf` give the same logits on a right-padded batch; and our models written with `to_hf` load in
`transformers`, give its logits, and come back through `save_pretrained` + `from_hf` with identical tensors.

B batch, T length, V vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import transformers
from torch import Tensor, nn

import tformer
from tformer.config import InitConfig, NormConfig, PositionConfig, TransformerConfig, to_dict
from tformer.interop import from_hf, mapping_for, to_hf

V, D, H, FF, N = 96, 32, 4, 64, 32  # vocabulary, width, heads, feed-forward width, max length
LENGTHS = (7, 5, 2)  # right padding: rows of 7, 5 and 2 real tokens
TOLERANCE = 1e-4


def padded(*, vocab: int, pad: int, lengths: tuple[int, ...] = LENGTHS) -> tuple[Tensor, Tensor]:
    """Random ids (B, T), right-padded with `pad`, and validity (B, T); real tokens avoid 0..2 and pad."""
    valid = torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]  # (B, T)
    ids = torch.randint(3, vocab - 1, valid.shape)
    ids = torch.where(ids >= pad, ids + 1, ids) if pad >= 3 else ids
    return ids.masked_fill(~valid, pad), valid


@torch.no_grad()
def perturb(model: nn.Module) -> nn.Module:
    """Move every trainable weight off its initial value (norms off 1, biases off 0), so that a misplaced
    norm or bias shows in the logits. Frozen tables (Marian's sinusoids) stay."""
    for p in model.parameters():
        if p.requires_grad:
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def lm_batch(cfg: TransformerConfig) -> dict:
    ids, valid = padded(vocab=cfg.vocab_size, pad=cfg.pad_id)
    return dict(ids=ids, valid=valid)


def lm_hf(model: nn.Module, b: dict) -> list[Tensor]:
    return [model(input_ids=b["ids"], attention_mask=b["valid"].long()).logits[b["valid"]]]


def lm_ours(model: nn.Module, b: dict) -> list[Tensor]:
    return [model(b["ids"], valid=b["valid"])[b["valid"]]]


def bert_batch(cfg: TransformerConfig) -> dict:
    ids, valid = padded(vocab=cfg.vocab_size, pad=cfg.pad_id)
    segments = (torch.arange(ids.shape[1])[None] >= torch.tensor(LENGTHS)[:, None] // 2) & valid  # (B, T)
    return dict(ids=ids, valid=valid, segments=segments.long())


def bert_hf(model: nn.Module, b: dict) -> list[Tensor]:
    out = model(input_ids=b["ids"], attention_mask=b["valid"].long(), token_type_ids=b["segments"])
    return [out.prediction_logits[b["valid"]], out.seq_relationship_logits]


def bert_ours(model: nn.Module, b: dict) -> list[Tensor]:
    mlm, nsp = model(b["ids"], segments=b["segments"], valid=b["valid"])
    return [mlm[b["valid"]], nsp]


def seq2seq_batch(cfg: TransformerConfig) -> dict:
    src, src_valid = padded(vocab=cfg.src_vocab_size or cfg.vocab_size, pad=cfg.pad_id)
    tgt, tgt_valid = padded(vocab=cfg.vocab_size, pad=cfg.pad_id, lengths=(4, 6, 3))
    tgt[:, 0] = cfg.decoder_start_id  # decoder inputs start with the start symbol (Marian: the pad id)
    return dict(src=src, src_valid=src_valid, tgt=tgt, tgt_valid=tgt_valid)


def seq2seq_hf(model: nn.Module, b: dict) -> list[Tensor]:
    out = model(input_ids=b["src"], attention_mask=b["src_valid"].long(), decoder_input_ids=b["tgt"],
                decoder_attention_mask=b["tgt_valid"].long())
    return [out.logits[b["tgt_valid"]]]


def seq2seq_ours(model: nn.Module, b: dict) -> list[Tensor]:
    memory = model.encode(b["src"], b["src_valid"])  # (B, S, d)
    logits = model.decode(b["tgt"], memory, b["src_valid"], tgt_valid=b["tgt_valid"])  # (B, T, V)
    return [logits[b["tgt_valid"]]]


@dataclass
class Case:
    hf_config: Callable[[], transformers.PretrainedConfig]  # a tiny Hugging Face model of this type
    auto: str  # the transformers Auto class that loads it
    ours: Callable[[], TransformerConfig]  # a config of ours that maps to this type
    batch: Callable[[TransformerConfig], dict]
    run_hf: Callable[[nn.Module, dict], list[Tensor]]
    run_ours: Callable[[nn.Module, dict], list[Tensor]]


def marian_ours(**kw: object) -> tformer.Seq2SeqConfig:
    return tformer.Seq2SeqConfig(
        vocab_size=V, d_model=D, n_heads=H, d_ff=FF, n_layers=2, n_decoder_layers=3, max_len=N, activation="silu",
        output_bias=True, pad_id=V - 1, bos_id=V - 1, eos_id=0, positions=PositionConfig(sinusoid_layout="split"),
        init=InitConfig(kind="normal"), **kw)


CASES = {
    "gpt2": Case(
        hf_config=lambda: transformers.GPT2Config(vocab_size=V, n_embd=D, n_head=H, n_inner=FF, n_layer=2,
                                                  n_positions=N, bos_token_id=1, eos_token_id=2),
        auto="AutoModelForCausalLM",
        ours=lambda: tformer.GPTConfig(vocab_size=V, d_model=D, n_heads=H, d_ff=FF, n_layers=2, max_len=N,
                                       bos_id=1, eos_id=2),
        batch=lm_batch, run_hf=lm_hf, run_ours=lm_ours),
    "bert": Case(
        hf_config=lambda: transformers.BertConfig(vocab_size=V, hidden_size=D, num_attention_heads=H,
                                                  intermediate_size=FF, num_hidden_layers=2,
                                                  max_position_embeddings=N),
        auto="AutoModelForPreTraining",
        ours=lambda: tformer.BertConfig(vocab_size=V, d_model=D, n_heads=H, d_ff=FF, n_layers=2, max_len=N,
                                        activation="gelu_tanh"),
        batch=bert_batch, run_hf=bert_hf, run_ours=bert_ours),
    "marian": Case(
        hf_config=lambda: transformers.MarianConfig(
            vocab_size=V, d_model=D, encoder_layers=2, decoder_layers=3, encoder_attention_heads=H,
            decoder_attention_heads=H, encoder_ffn_dim=FF, decoder_ffn_dim=FF, max_position_embeddings=N,
            activation_function="swish", scale_embedding=True, pad_token_id=V - 1, decoder_start_token_id=V - 1,
            eos_token_id=0),
        auto="AutoModelForSeq2SeqLM", ours=marian_ours,
        batch=seq2seq_batch, run_hf=seq2seq_hf, run_ours=seq2seq_ours),
    "marian-unshared": Case(  # separate source and target vocabularies, untied output layer
        hf_config=lambda: transformers.MarianConfig(
            vocab_size=V, decoder_vocab_size=V - 16, share_encoder_decoder_embeddings=False,
            tie_word_embeddings=False, d_model=D, encoder_layers=2, decoder_layers=2, encoder_attention_heads=H,
            decoder_attention_heads=H, encoder_ffn_dim=FF, decoder_ffn_dim=FF, max_position_embeddings=N,
            pad_token_id=1, decoder_start_token_id=1, eos_token_id=0),
        auto="AutoModelForSeq2SeqLM",
        ours=lambda: marian_ours(src_vocab_size=V + 16, tie_embeddings=False, scale_embeddings=False),
        batch=seq2seq_batch, run_hf=seq2seq_hf, run_ours=seq2seq_ours),
    "pegasus": Case(  # Marian pre-LN, with a LayerNorm after each stack
        hf_config=lambda: transformers.PegasusConfig(
            vocab_size=V, d_model=D, encoder_layers=2, decoder_layers=3, encoder_attention_heads=H,
            decoder_attention_heads=H, encoder_ffn_dim=FF, decoder_ffn_dim=FF, max_position_embeddings=N,
            activation_function="swish", scale_embedding=True, pad_token_id=V - 1, decoder_start_token_id=V - 1,
            eos_token_id=0),
        auto="AutoModelForSeq2SeqLM", ours=lambda: marian_ours(norm=NormConfig(placement="pre")),
        batch=seq2seq_batch, run_hf=seq2seq_hf, run_ours=seq2seq_ours),
    "llama": Case(  # grouped-query attention: 4 query heads share 2 key/value heads
        hf_config=lambda: transformers.LlamaConfig(
            vocab_size=V, hidden_size=D, num_attention_heads=H, num_key_value_heads=2, intermediate_size=FF,
            num_hidden_layers=2, max_position_embeddings=N, rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
        auto="AutoModelForCausalLM",
        ours=lambda: tformer.preset("llama-tiny", dict(
            vocab_size=V, max_len=N, bos_id=1, eos_id=2, init=dict(kind="normal", scaled_residual=False))),
        batch=lm_batch, run_hf=lm_hf, run_ours=lm_ours),
    "llama-tied-bias": Case(  # tied output layer, biases on every projection, head_dim != d / heads
        hf_config=lambda: transformers.LlamaConfig(
            vocab_size=V, hidden_size=D, num_attention_heads=H, num_key_value_heads=1, head_dim=16,
            intermediate_size=FF, num_hidden_layers=2, max_position_embeddings=N, tie_word_embeddings=True,
            attention_bias=True, mlp_bias=True),
        auto="AutoModelForCausalLM",
        ours=lambda: tformer.GPTConfig(
            vocab_size=V, d_model=D, n_heads=H, n_kv_heads=1, head_dim=16, d_ff=FF, n_layers=2, max_len=N,
            activation="geglu", bos_id=1, eos_id=2, positions=PositionConfig(kind="rope"),
            norm=NormConfig(kind="rmsnorm", eps=1e-6, placement="pre"), init=InitConfig(kind="normal"),
            dropout=tformer.config.DropoutConfig(embed=0.0, residual=0.0)),
        batch=lm_batch, run_hf=lm_hf, run_ours=lm_ours),
}


def max_diff(a: list[Tensor], b: list[Tensor]) -> float:
    assert [x.shape for x in a] == [y.shape for y in b]
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def hf_model(case: Case) -> nn.Module:
    torch.manual_seed(0)
    cls = getattr(transformers, case.auto)
    model = perturb(cls.from_config(case.hf_config()))
    if hasattr(model, "final_logits_bias"):  # a buffer, so perturb leaves it: give Marian's bias values
        model.final_logits_bias.normal_(std=0.1)
    return model


@pytest.mark.parametrize("name", CASES)
@torch.no_grad()
def test_from_hf_matches_transformers(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    hf = hf_model(case)
    hf.save_pretrained(tmp_path)
    ours, cfg = from_hf(tmp_path)
    assert not ours.training
    batch = case.batch(cfg)
    diff = max_diff(case.run_ours(ours, batch), case.run_hf(hf, batch))
    print(f"{name}: max |ours - transformers| = {diff:.2e}")
    assert diff <= TOLERANCE


@pytest.mark.parametrize("name", CASES)
@torch.no_grad()
def test_to_hf_round_trip(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    cfg = case.ours()
    ours = perturb(tformer.build_model(cfg))
    to_hf(ours, tmp_path / "ours")
    hf, info = getattr(transformers, case.auto).from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched weights
    assert type(hf).__name__ == mapping_for(cfg).ARCHITECTURE
    hf.eval().save_pretrained(tmp_path / "hf")
    back, back_cfg = from_hf(tmp_path / "hf")

    assert to_dict(back_cfg) == to_dict(cfg)
    mine, theirs = ours.state_dict(), back.state_dict()
    assert mine.keys() == theirs.keys()
    for key in mine:
        assert torch.equal(mine[key], theirs[key]), key
    batch = case.batch(cfg)
    expected = case.run_ours(ours, batch)
    diff = max_diff(expected, case.run_hf(hf, batch))
    print(f"{name}: max |ours - transformers| after to_hf = {diff:.2e}")
    assert diff <= TOLERANCE
    assert all(torch.equal(a, b) for a, b in zip(expected, case.run_ours(back, batch), strict=True))


@torch.no_grad()
def test_reads_pytorch_bin_and_shards(tmp_path: Path) -> None:
    """The older pytorch_model.bin (which stores the tied lm_head copy) and a sharded safetensors index."""
    hf = hf_model(CASES["gpt2"])
    hf.config.save_pretrained(tmp_path / "bin")
    torch.save(hf.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    assert json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())["weight_map"]
    batch = lm_batch(CASES["gpt2"].ours())
    expected = lm_hf(hf, batch)
    for folder in ("bin", "sharded"):
        ours, _ = from_hf(tmp_path / folder)
        assert max_diff(lm_ours(ours, batch), expected) <= TOLERANCE
