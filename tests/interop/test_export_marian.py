"""The demo's kind of model leaves the project: a small translator of the demo recipe's layout (interleaved
sinusoids, one shared vocabulary, tied embeddings, embeddings scaled by sqrt(d), post-LN) with a BPE
tokenizer, trained a little on a made-up word-for-word corpus, exported with `tformer convert --to-hf`, loads
in `transformers` as a `MarianMTModel` and a fast tokenizer that encode, decode and translate (greedy) as
ours does, token for token.

B batch, S source length, T target length, V vocabulary.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import transformers
from torch import nn

import tformer
from tformer.cli import main
from tformer.data import collate
from tformer.decoding import greedy
from tformer.inference import DecodeConfig, translate
from tformer.interop import to_hf
from tformer.tokenization import BPETokenizer
from tformer.training.checkpoint import save_checkpoint
from tformer.training.losses import label_smoothed_nll

WORDS = "the a house cat dog sees big small red blue runs sleeps".split()
GERMAN = dict(zip(WORDS, "der ein Haus Katze Hund sieht groß klein rot blau rennt schläft".split(), strict=True))
SIZES = dict(d_model=32, d_ff=64, n_heads=4, n_layers=2, max_len=64)
DECODE = DecodeConfig(beam=1, max_len_a=1.5, max_len_b=4)
SENTENCES = ["the cat sees a dog", "a big red house", "the small blue dog runs", "a cat sleeps",
             "the big dog sees the small red cat", "blue"]
TOLERANCE = 1e-4


def pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = [[rng.choice(WORDS) for _ in range(rng.randint(1, 7))] for _ in range(n)]
    return [(" ".join(w), " ".join(GERMAN[x] for x in w)) for w in words]


@dataclass(frozen=True)
class Exported:
    model: nn.Module  # ours, trained, eval mode
    tokenizer: BPETokenizer
    hf: nn.Module  # the exported MarianMTModel
    hf_tokenizer: transformers.PreTrainedTokenizerBase
    path: Path


def train(model: nn.Module, tokenizer: BPETokenizer, data: list[tuple[str, str]], *, steps: int) -> nn.Module:
    """A few dozen Adam steps of teacher forcing, enough for varied, eos-ended greedy translations."""
    examples = list(zip(tokenizer.encode_batch([s for s, _ in data]), tokenizer.encode_batch([t for _, t in data]),
                        strict=True))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = random.Random(0)
    model.train()
    for _ in range(steps):
        batch = collate(rng.sample(examples, 32), pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id,
                        eos_id=tokenizer.eos_id)
        loss, n = label_smoothed_nll(model(batch.src, batch.tgt_in), batch.tgt_out, smoothing=0.0,
                                     ignore_index=tokenizer.pad_id)
        optimizer.zero_grad()
        (loss / n).backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    root = tmp_path_factory.mktemp("export")
    data = pairs(400, 0)
    tokenizer = BPETokenizer.train([s for p in data for s in p], vocab_size=300)
    ids = dict(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id,
               eos_id=tokenizer.eos_id)
    config = tformer.preset("transformer-tiny", {**SIZES, **ids, "dropout": {"embed": 0.0, "residual": 0.0}})
    assert (config.positions.sinusoid_layout, config.norm.placement) == ("interleaved", "post")  # the demo's
    assert config.shared_vocab and config.tie_embeddings and config.scale_embeddings
    torch.manual_seed(0)
    model = train(tformer.build_model(config), tokenizer, data, steps=60)
    save_checkpoint(root / "ours", model=model, config=config, tokenizer=tokenizer)
    assert main(["convert", "--to-hf", str(root / "ours"), "--out", str(root / "hf")]) == 0
    hf = transformers.MarianMTModel.from_pretrained(root / "hf").eval()
    return Exported(model, tokenizer, hf, transformers.AutoTokenizer.from_pretrained(root / "hf"), root / "hf")


def test_export_writes_a_standard_directory(exported: Exported) -> None:
    assert {p.name for p in exported.path.iterdir()} == {
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    config = json.loads((exported.path / "config.json").read_text())
    tok = exported.tokenizer
    assert (config["vocab_size"], config["pad_token_id"], config["bos_token_id"], config["eos_token_id"],
            config["decoder_start_token_id"]) == (tok.vocab_size, tok.pad_id, tok.bos_id, tok.eos_id, tok.bos_id)
    hf_tok = exported.hf_tokenizer
    assert hf_tok.is_fast
    assert (hf_tok.pad_token_id, hf_tok.bos_token_id, hf_tok.eos_token_id, hf_tok.unk_token_id) == (0, 1, 2, 3)


@torch.no_grad()
def test_exported_logits_match(exported: Exported) -> None:
    """A random right-padded batch through both models: the basis permutation is exact up to rounding."""
    torch.manual_seed(1)
    cfg = exported.model.config
    src_valid = torch.arange(9)[None] < torch.tensor([9, 6, 2])[:, None]  # (B, S)
    tgt_valid = torch.arange(7)[None] < torch.tensor([5, 7, 3])[:, None]  # (B, T)
    src = torch.randint(4, cfg.vocab_size, src_valid.shape).masked_fill(~src_valid, cfg.pad_id)
    tgt = torch.randint(4, cfg.vocab_size, tgt_valid.shape).masked_fill(~tgt_valid, cfg.pad_id)
    tgt[:, 0] = cfg.decoder_start_id
    ours = exported.model.decode(tgt, exported.model.encode(src, src_valid), src_valid, tgt_valid=tgt_valid)
    theirs = exported.hf(input_ids=src, attention_mask=src_valid.long(), decoder_input_ids=tgt,
                         decoder_attention_mask=tgt_valid.long()).logits  # (B, T, V)
    diff = (ours[tgt_valid] - theirs[tgt_valid]).abs().max().item()
    print(f"max |logits ours - exported MarianMTModel| = {diff:.2e}")
    assert diff <= TOLERANCE


@torch.no_grad()
def test_greedy_translations_match_token_for_token(exported: Exported) -> None:
    """`generate` (greedy) on the exported model and tokenizer, against our `greedy` and `translate`.
    `generate` has one length limit per batch, ours one per sentence (a * n + b), so each row of its output
    is cut at that row's limit; our decoder never proposes <pad> and does not force </s> at the limit, so
    neither does `generate` here."""
    assert_greedy_matches(exported)


def assert_greedy_matches(exported: Exported) -> None:
    """Greedy `generate` of an exported model (Marian or Pegasus) equals our `greedy` and `translate`."""
    tok, hf_tok, cfg = exported.tokenizer, exported.hf_tokenizer, exported.model.config
    batch = hf_tok(SENTENCES, return_tensors="pt", padding=True)
    lengths = batch["attention_mask"].sum(1).tolist()
    limits = [int(DECODE.max_len_a * n + DECODE.max_len_b) for n in lengths]
    out = exported.hf.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=max(limits),
                               suppress_tokens=[cfg.pad_id], forced_eos_token_id=None)  # (B, 1 + t)
    theirs = []
    for row, limit in zip(out[:, 1:].tolist(), limits, strict=True):  # after the decoder start
        row = row[:limit]
        theirs.append(row[: row.index(cfg.eos_id)] if cfg.eos_id in row else row)
    ours = greedy(exported.model, batch["input_ids"], max_len_a=DECODE.max_len_a, max_len_b=DECODE.max_len_b)
    print("\n".join(tok.decode(t) for t in ours))
    assert theirs == ours
    assert len({len(t) for t in ours}) >= 3  # varied lengths ...
    assert all(len(t) < limit for t, limit in zip(ours, limits, strict=True))  # ... each ended by </s>
    assert hf_tok.batch_decode(out, skip_special_tokens=True) == translate(exported.model, tok, SENTENCES, DECODE)


def test_tokenizer_round_trip(exported: Exported) -> None:
    tok, hf_tok = exported.tokenizer, exported.hf_tokenizer
    for text in [*SENTENCES, "Die Katze schläft, groß und rot!", "  two  spaces, an accent: é "]:
        ids = tok.encode(text)  # as our translators' sources: no <s>, no </s>
        assert hf_tok(text)["input_ids"] == ids
        assert hf_tok.decode(ids, skip_special_tokens=True) == tok.decode(ids) == text
        assert hf_tok.decode([tok.bos_id, *ids, tok.eos_id], skip_special_tokens=True) == text


def test_failed_export_leaves_no_tokenizer(exported: Exported, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kw: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("tformer.interop.hf.save_file", fail)
    with pytest.raises(ValueError, match="cannot write .*out: disk full"):
        to_hf(exported.model, tmp_path / "out", tokenizer=exported.tokenizer)
    assert list(tmp_path.iterdir()) == []
