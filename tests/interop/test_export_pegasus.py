"""The demo's translator made pre-LN leaves the project as a Pegasus: a small model of the demo recipe's
layout (interleaved sinusoids, one shared vocabulary, tied embeddings, embeddings scaled by sqrt(d), ReLU,
biases) with `norm.placement: pre` (so a final LayerNorm after each stack) and a BPE tokenizer, trained a
little on the made-up word-for-word corpus of test_export_marian.py, exported with `tformer convert --to-hf`,
loads in `transformers` as a `PegasusForConditionalGeneration` and a fast tokenizer that encode, decode and
translate (greedy) as ours does, token for token; `from_hf` reads the directory back.

B batch, S source length, T target length, V vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import transformers
from test_export_marian import SENTENCES, SIZES, TOLERANCE, assert_greedy_matches, pairs, train
from torch import Tensor, nn

import tformer
from tformer.cli import main
from tformer.interop import from_hf
from tformer.tokenization import BPETokenizer
from tformer.training.checkpoint import save_checkpoint


@dataclass(frozen=True)
class Exported:
    model: nn.Module  # ours, trained, eval mode
    tokenizer: BPETokenizer
    hf: nn.Module  # the exported PegasusForConditionalGeneration
    hf_tokenizer: transformers.PreTrainedTokenizerBase
    loading_info: dict  # what from_pretrained found missing, unexpected or mismatched
    path: Path


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    root = tmp_path_factory.mktemp("export")
    data = pairs(400, 0)
    tokenizer = BPETokenizer.train([s for p in data for s in p], vocab_size=300)
    ids = dict(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id,
               eos_id=tokenizer.eos_id)
    config = tformer.preset("transformer-tiny", {**SIZES, **ids, "dropout": {"embed": 0.0, "residual": 0.0},
                                                 "norm": {"placement": "pre"}})
    assert (config.positions.sinusoid_layout, config.norm.placement, config.norm.final) == ("interleaved", "pre", True)
    assert config.shared_vocab and config.tie_embeddings and config.scale_embeddings and config.activation == "relu"
    torch.manual_seed(0)
    model = train(tformer.build_model(config), tokenizer, data, steps=60)
    save_checkpoint(root / "ours", model=model, config=config, tokenizer=tokenizer)
    assert main(["convert", "--to-hf", str(root / "ours"), "--out", str(root / "hf")]) == 0
    hf, info = transformers.PegasusForConditionalGeneration.from_pretrained(root / "hf", output_loading_info=True)
    return Exported(model, tokenizer, hf.eval(), transformers.AutoTokenizer.from_pretrained(root / "hf"), info,
                    root / "hf")


def test_export_writes_a_standard_directory(exported: Exported) -> None:
    assert {p.name for p in exported.path.iterdir()} == {
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    assert not any(exported.loading_info.values()), exported.loading_info  # every weight in place, none extra
    config = json.loads((exported.path / "config.json").read_text())
    tok, cfg = exported.tokenizer, exported.model.config
    assert (config["model_type"], config["architectures"]) == ("pegasus", ["PegasusForConditionalGeneration"])
    assert (config["vocab_size"], config["pad_token_id"], config["bos_token_id"], config["eos_token_id"],
            config["decoder_start_token_id"]) == (tok.vocab_size, tok.pad_id, tok.bos_id, tok.eos_id, tok.bos_id)
    assert (config["d_model"], config["encoder_layers"], config["decoder_layers"], config["encoder_attention_heads"],
            config["encoder_ffn_dim"], config["max_position_embeddings"]) == (32, 2, 2, 4, 64, cfg.max_len)
    assert (config["activation_function"], config["scale_embedding"], config["tie_word_embeddings"]) == (
        "relu", True, True)
    assert exported.hf_tokenizer.is_fast


def logits(model: nn.Module, src: Tensor, src_valid: Tensor, tgt: Tensor, tgt_valid: Tensor) -> Tensor:
    """Ours, teacher-forced: (B, T, V)."""
    return model.decode(tgt, model.encode(src, src_valid), src_valid, tgt_valid=tgt_valid)


def batch(cfg: tformer.Seq2SeqConfig) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A random right-padded batch: src (B, S), its validity, tgt (B, T) from the decoder start, its validity."""
    torch.manual_seed(1)
    src_valid = torch.arange(9)[None] < torch.tensor([9, 6, 2])[:, None]  # (B, S)
    tgt_valid = torch.arange(7)[None] < torch.tensor([5, 7, 3])[:, None]  # (B, T)
    src = torch.randint(4, cfg.vocab_size, src_valid.shape).masked_fill(~src_valid, cfg.pad_id)
    tgt = torch.randint(4, cfg.vocab_size, tgt_valid.shape).masked_fill(~tgt_valid, cfg.pad_id)
    tgt[:, 0] = cfg.decoder_start_id
    return src, src_valid, tgt, tgt_valid


@torch.no_grad()
def test_exported_logits_match(exported: Exported) -> None:
    """The basis permutation and the pre-LN mapping are exact up to rounding."""
    src, src_valid, tgt, tgt_valid = batch(exported.model.config)
    ours = logits(exported.model, src, src_valid, tgt, tgt_valid)
    theirs = exported.hf(input_ids=src, attention_mask=src_valid.long(), decoder_input_ids=tgt,
                         decoder_attention_mask=tgt_valid.long()).logits  # (B, T, V)
    diff = (ours[tgt_valid] - theirs[tgt_valid]).abs().max().item()
    print(f"max |logits ours - exported PegasusForConditionalGeneration| = {diff:.2e}")
    assert diff <= TOLERANCE


@torch.no_grad()
def test_greedy_translations_match_token_for_token(exported: Exported) -> None:
    """As test_export_marian's: `generate` cut at our per-sentence limits, never proposing <pad>, not
    forcing </s> at the limit."""
    assert_greedy_matches(exported)


def test_tokenizer_round_trip(exported: Exported) -> None:
    tok, hf_tok = exported.tokenizer, exported.hf_tokenizer
    assert (hf_tok.pad_token_id, hf_tok.bos_token_id, hf_tok.eos_token_id, hf_tok.unk_token_id) == (
        tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id)
    for text in [*SENTENCES, "Die Katze schläft, groß und rot!", "  two  spaces, an accent: é "]:
        ids = tok.encode(text)  # as our translators' sources: no <s>, no </s>
        assert hf_tok(text)["input_ids"] == ids
        assert hf_tok.decode([tok.bos_id, *ids, tok.eos_id], skip_special_tokens=True) == tok.decode(ids) == text


@torch.no_grad()
def test_import_reads_the_export_back(exported: Exported) -> None:
    """`from_hf` of the directory: a pre-LN model with split sinusoids (the permuted basis), same logits."""
    model, cfg = from_hf(exported.path)
    assert (cfg.norm.placement, cfg.norm.final, cfg.positions.sinusoid_layout) == ("pre", True, "split")
    src, src_valid, tgt, tgt_valid = batch(cfg)
    ours = logits(exported.model, src, src_valid, tgt, tgt_valid)[tgt_valid]
    assert (logits(model, src, src_valid, tgt, tgt_valid)[tgt_valid] - ours).abs().max() <= TOLERANCE
