"""CTranslate2 export (`tformer.interop.ct2`, `tformer convert --to-ct2`): tiny translators (post-LN and pre-LN,
sinusoidal, learned and rotary positions), trained a little on test_export_marian's made-up corpus, and tiny
random GPTs (learned positions, RoPE, ALiBi) decode greedily in CTranslate2 exactly as in tformer, token for
token, and CTranslate2's log-probabilities of a target equal ours; beam-4 translations are compared and their
share of identical ones printed. The export refuses what CTranslate2 cannot compute, in one line.

B batch, S source length, T target length, V vocabulary.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from test_export_marian import SENTENCES, SIZES, pairs, train
from torch import nn

import tformer
from tformer.cli import main
from tformer.data.padding import pad
from tformer.decoding import beam_search, generate_greedy, greedy
from tformer.interop.ct2 import CT2Model, generate_ids, load_ct2, to_ct2, translate_ids, vocabulary
from tformer.tokenization import BPETokenizer, CharTokenizer
from tformer.training.checkpoint import save_checkpoint

LIMITS = dict(max_len_a=1.5, max_len_b=4)
TOLERANCE = 1e-4
# Translators: the demo recipe's layout (post-LN, interleaved sinusoids, scaled tied embeddings) and variants.
TRANSLATORS = {
    "post-LN": {},
    "pre-LN": {"norm": {"placement": "pre"}},  # the demo model's: a final norm after each stack
    "learned": {"norm": {"placement": "pre"}, "positions": "learned", "activation": "gelu", "tie_embeddings": False,
                "output_bias": True, "n_kv_heads": 2},
    "rope": {"norm": {"kind": "rmsnorm", "eps": 1e-6, "placement": "pre"}, "positions": "rope",
             "activation": "swiglu", "bias": False},
}
# GPTs: preset and overrides.
GPTS = {
    "gpt2": ("gpt-tiny", {}),
    "llama": ("llama-tiny", {}),
    "alibi": ("gpt-tiny", {"positions": "alibi", "n_heads": 6, "d_model": 48}),  # 6 heads: not a power of two
    "post-LN": ("gpt-tiny", {"norm": {"placement": "post", "final": False}, "scale_embeddings": True}),
}


@pytest.fixture(scope="module")
def corpus() -> tuple[list[tuple[str, str]], BPETokenizer]:
    data = pairs(400, 0)
    return data, BPETokenizer.train([s for p in data for s in p], vocab_size=300)


def translator(overrides: dict, corpus: tuple[list[tuple[str, str]], BPETokenizer]) -> nn.Module:
    data, tokenizer = corpus
    ids = dict(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id,
               eos_id=tokenizer.eos_id)
    config = tformer.preset("transformer-tiny", {**SIZES, **ids, "dropout": {"embed": 0.0, "residual": 0.0},
                                                 **overrides})
    torch.manual_seed(0)
    return train(tformer.build_model(config), tokenizer, data, steps=60)


@pytest.fixture(scope="module", params=list(TRANSLATORS))
def exported(request: pytest.FixtureRequest, corpus: tuple, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[nn.Module, CT2Model]:
    model = translator(TRANSLATORS[request.param], corpus)
    path = tmp_path_factory.mktemp("ct2") / request.param
    to_ct2(model, path, tokenizer=corpus[1])
    return model, load_ct2(path, threads=1)


def sources(tokenizer: BPETokenizer) -> list[list[int]]:
    return tokenizer.encode_batch(SENTENCES + ["the red dog sees a cat", "a small house runs"])


def test_greedy_matches_token_for_token(exported: tuple[nn.Module, CT2Model], corpus: tuple) -> None:
    model, ct2 = exported
    src = sources(corpus[1])
    ours = greedy(model, pad(src, model.config.pad_id), **LIMITS)
    assert translate_ids(ct2, src, **LIMITS) == ours
    assert translate_ids(ct2, src, batch_size=3, **LIMITS) == ours  # CTranslate2 sorts and splits the batch
    limits = [int(1.5 * len(s) + 4) for s in src]
    assert all(len(t) < limit for t, limit in zip(ours, limits, strict=True))  # each ended by </s> ...
    assert len({len(t) for t in ours}) >= 3  # ... at varied lengths


@torch.no_grad()
def test_log_probs_match(exported: tuple[nn.Module, CT2Model], corpus: tuple) -> None:
    """CTranslate2's score of each target (its tokens and </s>) equals ours, log-prob by log-prob."""
    model, ct2 = exported
    cfg, src = model.config, sources(corpus[1])
    targets = greedy(model, pad(src, cfg.pad_id), **LIMITS)
    scored = ct2.engine.score_batch([[ct2.src_tokens[i] for i in s] for s in src],
                                    [[ct2.tokens[i] for i in t] for t in targets])
    for s, t, theirs in zip(src, targets, scored, strict=True):
        x = torch.tensor([s])
        logits = model.decode(torch.tensor([[cfg.decoder_start_id, *t]]), model.encode(x), x != cfg.pad_id)
        ours = logits.log_softmax(-1)[0].gather(-1, torch.tensor([*t, cfg.eos_id])[:, None])[:, 0]  # (T + 1,)
        assert (ours - torch.tensor(theirs.log_probs)).abs().max() <= TOLERANCE


def test_beam_search(exported: tuple[nn.Module, CT2Model], corpus: tuple) -> None:
    """Beam 4, lenpen 1, one sentence per call (so that each gets its own maximum length, where ours
    finishes the live hypotheses). Our default stopping rule is CTranslate2's (patience 1: stop once `beam`
    hypotheses have finished), and the two searches agree; ours with stopping="best" (until no live one can
    beat the finished) agrees with CTranslate2 at patience 4 here."""
    model, ct2 = exported
    src = sources(corpus[1])
    batch = pad(src, model.config.pad_id)
    finished = [h[0].tokens for h in beam_search(model, batch, beam=4, lenpen=1.0, **LIMITS)]
    assert [translate_ids(ct2, [s], beam=4, lenpen=1.0, **LIMITS)[0] for s in src] == finished
    best = [h[0].tokens for h in beam_search(model, batch, beam=4, lenpen=1.0, stopping="best", **LIMITS)]
    assert [translate_ids(ct2, [s], beam=4, lenpen=1.0, patience=4, **LIMITS)[0] for s in src] == best
    assert best != finished  # the two rules differ on these sentences


def test_int8_export(corpus: tuple, tmp_path: Path) -> None:
    model = translator(TRANSLATORS["pre-LN"], corpus)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    to_ct2(model, tmp_path / "int8", quantization="int8")
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # CTranslate2 quantized a copy
    to_ct2(model, tmp_path / "fp32")
    assert (tmp_path / "int8" / "model.bin").stat().st_size < (tmp_path / "fp32" / "model.bin").stat().st_size / 2
    src = sources(corpus[1])
    ours = greedy(model, pad(src, model.config.pad_id), **LIMITS)
    theirs = translate_ids(load_ct2(tmp_path / "int8", threads=1), src, **LIMITS)
    share = sum(a == b for a, b in zip(ours, theirs, strict=True)) / len(src)
    print(f"int8 greedy: {share:.0%} of {len(src)} translations identical to float32 tformer")
    assert share >= 0.5


def test_random_translator_with_a_source_vocabulary(tmp_path: Path) -> None:
    """No positions, or sinusoids in the split layout; a separate source vocabulary (its own JSON file), a head
    width other than d / h, a LayerNorm eps other than 1e-5. Random weights, scaled up so that each argmax is
    decided by a clear margin."""
    for positions in ("none", {"kind": "sinusoidal", "sinusoid_layout": "split"}):
        config = tformer.preset("transformer-tiny", dict(vocab_size=40, src_vocab_size=50, d_model=32, d_ff=64,
                                                         n_layers=2, max_len=64, head_dim=12, positions=positions,
                                                         norm={"eps": 1e-3}))
        torch.manual_seed(0)
        model = scaled(tformer.build_model(config), 3.0)
        to_ct2(model, tmp_path / "m")
        assert {"source_vocabulary.json", "target_vocabulary.json"} <= {p.name for p in (tmp_path / "m").iterdir()}
        g = torch.Generator().manual_seed(1)
        src = [torch.randint(4, 50, (n,), generator=g).tolist() for n in (3, 7, 5, 1, 9, 12)]
        assert translate_ids(load_ct2(tmp_path / "m", threads=1), src, **LIMITS) == greedy(model, pad(src, 0), **LIMITS)


def scaled(model: nn.Module, factor: float) -> nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(factor)
    return model.eval()


@pytest.mark.parametrize("name", list(GPTS))
def test_gpt_greedy_matches_token_for_token(name: str, tmp_path: Path) -> None:
    """Prompts of different lengths, starting from the start token (which CTranslate2 leaves out of its
    results) or not; with no stop token, and with a stop token our generation meets."""
    preset, overrides = GPTS[name]
    config = tformer.preset(preset, {"vocab_size": 40, "d_model": 32, "d_ff": 64, "n_layers": 2, "max_len": 64,
                                     "dropout": {"embed": 0.0, "residual": 0.0}, **overrides})
    torch.manual_seed(0)
    model = scaled(tformer.build_model(config), 5.0)
    to_ct2(model, tmp_path / "m")
    ct2 = load_ct2(tmp_path / "m", threads=1)
    g = torch.Generator().manual_seed(1)
    prompts = [[ct2.bos_id, *torch.randint(4, 40, (n,), generator=g).tolist()] for n in (3, 7, 0, 12)] + [[5, 6], [7]]
    ours = generate_greedy(model, prompts, max_new_tokens=10)
    assert generate_ids(ct2, prompts, max_new_tokens=10) == ours
    stop = [ours[0][2], ours[1][4]]
    stopped = generate_greedy(model, prompts, max_new_tokens=10, stop_tokens=stop)
    assert stopped != ours
    assert generate_ids(ct2, prompts, max_new_tokens=10, stop_tokens=stop) == stopped
    assert generate_ids(ct2, prompts, max_new_tokens=0) == [[] for _ in prompts]


def test_vocabulary_names_every_id() -> None:
    chars = CharTokenizer(list("ab c"))
    assert vocabulary(chars, 10) == ["<pad>", "<s>", "</s>", "<unk>", "a", "b", " ", "c", "<id:8>", "<id:9>"]
    assert vocabulary(None, 3) == ["<id:0>", "<id:1>", "<id:2>"]

    class Twice:  # a tokenizer naming every id alike
        vocab_size = 3

        def token(self, i: int) -> str:
            return "x"

    with pytest.raises(ValueError, match="names two ids 'x'"):
        vocabulary(Twice(), 3)


# --- the command ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(corpus: tuple, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, nn.Module]:
    model = translator(TRANSLATORS["pre-LN"], corpus)
    path = tmp_path_factory.mktemp("ours") / "best"
    save_checkpoint(path, model=model, config=model.config, tokenizer=corpus[1])
    return path, model


def test_convert_to_ct2(checkpoint: tuple[Path, nn.Module], corpus: tuple, tmp_path: Path,
                        capsys: pytest.CaptureFixture) -> None:
    path, model = checkpoint
    out = tmp_path / "ct2"
    for _ in range(2):  # the second export replaces the first
        assert main(["convert", "--to-ct2", str(path), "--out", str(out)]) == 0
        assert "exported EncoderDecoder" in capsys.readouterr().out
    assert {p.name for p in tmp_path.iterdir()} == {"ct2"}  # no temporary sibling left
    assert {p.name for p in out.iterdir()} == {"model.bin", "config.json", "shared_vocabulary.json", "config.yaml",
                                               "tokenizer.json"}
    ct2_config = json.loads((out / "config.json").read_text())
    assert (ct2_config["decoder_start_token"], ct2_config["eos_token"], ct2_config["layer_norm_epsilon"]) == (
        "<s>", "</s>", 1e-5)
    src = sources(corpus[1])
    assert translate_ids(load_ct2(out, threads=1), src, **LIMITS) == greedy(model, pad(src, 0), **LIMITS)
    assert main(["convert", "--to-ct2", str(path), "--out", str(tmp_path / "q"), "--quantization", "int8"]) == 0


def error_of(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tformer: error: ") and err.count("\n") == 1, err
    return err


def test_convert_refuses_what_ct2_cannot_compute(corpus: tuple, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    cases = {"windowed": ("transformer-tiny", {"attention": "windowed"}, "attention.kind=windowed"),
             "alibi": ("transformer-tiny", {"positions": "alibi"}, "positions.kind=alibi in an encoder-decoder"),
             "post-final": ("transformer-tiny", {"norm": {"final": True}}, "norm.final=True with norm.placement=post"),
             "bert": ("bert-tiny", {}, "BertForPretraining")}
    for name, (preset, overrides, expected) in cases.items():
        config = tformer.preset(preset, {"d_model": 32, "d_ff": 64, "n_layers": 1, "max_len": 32, **overrides})
        save_checkpoint(tmp_path / name, model=tformer.build_model(config), config=config)
        assert expected in error_of(["convert", "--to-ct2", str(tmp_path / name), "--out", str(tmp_path / "x")],
                                    capsys)
        assert not (tmp_path / "x").exists()


def test_convert_refuses_bad_arguments(checkpoint: tuple[Path, nn.Module], tmp_path: Path,
                                       capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = checkpoint
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    err = error_of(["convert", "--to-ct2", str(path), "--out", str(tmp_path / "mine")], capsys)
    assert "directory of other files" in err and (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    err = error_of(["convert", "--to-ct2", str(path), "--out", str(tmp_path / "x"), "--quantization", "int4"], capsys)
    assert "quantization='int4'" in err and "int8_float16" in err
    err = error_of(["convert", "--to-hf", str(path), "--out", str(tmp_path / "x"), "--quantization", "int8"], capsys)
    assert "--to-ct2 only" in err
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if not installed: importing it fails
    err = error_of(["convert", "--to-ct2", str(path), "--out", str(tmp_path / "x")], capsys)
    assert "needs the ctranslate2 package: pip install 'ctranslate2>=" in err and "(tformer's [ct2] extra)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_convert_a_gpt_with_a_character_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A GPT checkpoint as the language-model recipe makes one (its start token is </s>): the vocabulary
    names the characters, the tokenizer's own file goes along, and generation matches ours."""
    tokenizer = CharTokenizer.train(["In the beginning God created the heaven and the earth."])
    config = tformer.preset("gpt-tiny", {"vocab_size": tokenizer.vocab_size, "d_model": 32, "d_ff": 64,
                                         "n_layers": 2, "max_len": 64, "bos_id": 2, "eos_id": 2})
    torch.manual_seed(0)
    model = scaled(tformer.build_model(config), 5.0)
    save_checkpoint(tmp_path / "ckpt", model=model, config=config, tokenizer=tokenizer)
    assert main(["convert", "--to-ct2", str(tmp_path / "ckpt"), "--out", str(tmp_path / "ct2")]) == 0
    assert "exported GPT" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "ct2").iterdir()} == {"model.bin", "config.json", "vocabulary.json",
                                                              "config.yaml", "char_tokenizer.json"}
    vocab = json.loads((tmp_path / "ct2" / "vocabulary.json").read_text())
    assert vocab == [tokenizer.token(i) for i in range(tokenizer.vocab_size)] and vocab[4] == " "
    ct2 = load_ct2(tmp_path / "ct2", threads=1)
    prompts = [[2, *tokenizer.encode("In the")], [2, *tokenizer.encode("God")]]
    ours = generate_greedy(model, prompts, max_new_tokens=12, stop_tokens=[2])
    assert generate_ids(ct2, prompts, max_new_tokens=12, stop_tokens=[2]) == ours
    with pytest.raises(ValueError, match=f"prompt 1 has token id {tokenizer.vocab_size}; the vocabulary"):
        generate_ids(ct2, [[2, 5], [2, tokenizer.vocab_size]], max_new_tokens=3)


def test_a_full_disk_leaves_what_was_there(checkpoint: tuple[Path, nn.Module], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _, model = checkpoint
    to_ct2(model, tmp_path / "ct2")
    before = (tmp_path / "ct2" / "model.bin").read_bytes()

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("ctranslate2.specs.model_spec.ModelSpec._serialize", full)
    for out, kept in ((tmp_path / "new", ""), (tmp_path / "ct2", r" \(what was there is kept\)")):
        with pytest.raises(ValueError, match=f"cannot write {out}: No space left on device{kept}$"):
            to_ct2(model, out, quantization="int8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2"]  # no new directory, no temporary sibling
    assert (tmp_path / "ct2" / "model.bin").read_bytes() == before
    with pytest.raises(ValueError, match="source 0 has token id -1"):
        translate_ids(load_ct2(tmp_path / "ct2", threads=1), [[-1, 5]])
