"""models/rnn.py: the RNN encoder-decoder and the attention-based RNN. The encoder's final state starts the
decoder (checked against torch's LSTM run by hand); cached decoding, the state carried from step to step and
reordered with the beams, gives what re-running the whole prefix gives, for greedy and beam search, in every
cell and MATCH; the presets' sizes against the demo's Transformer; bad configs refused; checkpoints round
trip; the Transformer-only exports refuse it in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import tformer
from tformer.checkpoints import load_model
from tformer.config import MATCH_KINDS, RNNSeq2SeqConfig
from tformer.configio import from_dict
from tformer.decoding import greedy
from tformer.decoding.beam import beam_search
from tformer.manifest import write_manifest
from tformer.models.calc import model_forward_flops, param_count
from tformer.quant import quantize
from tformer.training.checkpoint import save_checkpoint

V = 40

pytestmark = pytest.mark.usefixtures("one_thread")




def tiny(**overrides: object) -> tformer.RNNEncoderDecoder:
    config = tformer.preset("rnn-small", {"vocab_size": V, "d_model": 12, "max_len": 32, "init_range": 0.4,
                                          **overrides})
    return tformer.build_model(config).eval()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded sources (3, 6) of 6, 4 and 2 tokens, and decoder inputs (3, 5)."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, V, (3, 6), generator=g)
    src[1, 4:], src[2, 2:] = 0, 0
    return src, torch.randint(3, V, (3, 5), generator=g)


def test_the_encoders_final_state_starts_the_decoder() -> None:
    torch.manual_seed(0)
    model = tiny()  # LSTM, bidirectional, no attention
    src, tgt = batch()
    valid = src != 0
    with torch.no_grad():
        _, h, c = model.encoder(model.src_embed(src), valid)  # (L, B, d): [forward ; backward] of each layer
        by_hand, _ = model.decoder.rnn(model.tgt_embed(tgt), (h, c))  # torch's LSTM from that state
        assert torch.allclose(model(src, tgt), model.lm_head(by_hand), atol=1e-6)


GRID = ([(cell, match, True, True) for cell in ("lstm", "gru") for match in MATCH_KINDS]
        + [("gru", "additive", False, True), ("lstm", "dot", True, False), ("gru", "general", False, False)])


@pytest.mark.parametrize(("cell", "match", "bidirectional", "input_feeding"), GRID)
def test_cached_decoding_equals_uncached(cell: str, match: str, bidirectional: bool, input_feeding: bool) -> None:
    torch.manual_seed(0)
    model = tiny(cell=cell, match=match, bidirectional=bidirectional, input_feeding=input_feeding)
    src, tgt = batch()
    with torch.no_grad():
        whole = model(src, tgt)  # (B, T, V): the decoder re-run over every position
        memory, caches = model.encode(src), model.new_caches(3, 5)
        steps = [model.decode(tgt[:, t : t + 1], memory, src != 0, caches=caches, offset=t) for t in range(5)]
    assert torch.allclose(whole, torch.cat(steps, dim=1), atol=1e-5)
    assert caches[0].mixer_state.length == 5
    assert greedy(model, src, use_cache=True, max_len_b=4) == greedy(model, src, use_cache=False, max_len_b=4)
    cached, uncached = (beam_search(model, src, beam=3, n_best=3, use_cache=c, max_len_b=4) for c in (True, False))
    assert [[h.tokens for h in hyps] for hyps in cached] == [[h.tokens for h in hyps] for hyps in uncached]
    assert [h.score for hyps in cached for h in hyps] == pytest.approx([h.score for hyps in uncached for h in hyps],
                                                                       abs=1e-5)


def test_a_cache_continues_only_where_it_stopped() -> None:
    model = tiny(match="dot")
    src, tgt = batch()
    memory, caches = model.encode(src), model.new_caches(3, 5)
    model.decode(tgt[:, :2], memory, src != 0, caches=caches)  # two positions at once
    with pytest.raises(ValueError, match="consumed 2 positions, but decode was given offset=3"):
        model.decode(tgt[:, 3:4], memory, src != 0, caches=caches, offset=3)


def test_preset_sizes_are_the_demo_transformers() -> None:
    """At the demo's 4,000 tokens (docs/models.md, "The road to the Transformer")."""
    demo = tformer.preset("transformer-tiny", {"vocab_size": 4000, "d_model": 160, "d_ff": 640, "n_heads": 4,
                                               "n_layers": 3, "norm": {"placement": "pre"}})
    counts = {name: param_count(tformer.preset(name, {"vocab_size": 4000}))
              for name in ("rnn-small", "rnn-attention-small")}
    assert param_count(demo) == 2_806_400
    assert counts == {"rnn-small": 2_867_200, "rnn-attention-small": 2_819_264}
    assert all(abs(n - 2_806_400) / 2_806_400 < 0.03 for n in counts.values())


def test_flops_count_the_rnn_weights_and_the_attention() -> None:
    model = tiny(match="dot", bidirectional=False, n_layers=1)
    d = 12
    lstm = 4 * d * (d + d) + 4 * d * (2 * d + d)  # encoder; decoder reads [y ; o]
    assert model_forward_flops(model, 10) == 2 * (lstm + 2 * d * d + d * V) + 4 * 10 * d  # + combine, output


@pytest.mark.parametrize(("overrides", "message"), [
    ({"match": "luong"}, "match='luong' is not allowed; choose one of none, dot, general, additive, cosine"),
    ({"cell": "rnn"}, "cell='rnn' is not allowed; choose one of lstm, gru"),
    ({"d_model": 9}, "d_model=9 must be even with bidirectional=true"),
    ({"dropout": 1.0}, r"dropout=1.0 must be in \[0, 1\)"),
    ({"init_range": 0.0}, "init_range=0.0 must be > 0"),
    ({"n_heads": 4}, "unknown config key 'n_heads'"),
    ({"eos_id": 1000}, r"eos_id=1000 must be in \[0, vocab_size=1000\)"),
])
def test_bad_configs_are_refused(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tformer.preset("rnn-small", overrides)
    with pytest.raises(ValueError, match=message):  # the same from a checkpoint's config.yaml
        from_dict(RNNSeq2SeqConfig, {"vocab_size": 1000, **overrides})


def test_the_old_key_attention_is_refused_with_a_pointer_to_match() -> None:
    """`attention` named an RNN's MATCH before it was renamed: a recipe's override or a config giving it is
    told the new key, in one line with its values."""
    message = ("config key 'attention' is now 'match' for family rnn: the decoder's MATCH function, one of none, "
               "dot, general, additive, cosine")
    with pytest.raises(ValueError, match=f"^{message}$"):
        tformer.preset("rnn-small", {"attention": "dot"})
    with pytest.raises(ValueError, match=f"^{message}$"):
        from_dict(RNNSeq2SeqConfig, {"attention": "none"})
    with pytest.raises(ValueError, match="unknown config key 'match'"):  # the Transformer's attention is its own
        tformer.preset("transformer-tiny", {"match": "dot"})


def test_a_checkpoint_saved_with_the_old_key_loads_as_match(tmp_path: Path) -> None:
    """A checkpoint saved before the rename holds `attention:` in its config.yaml: it loads, as `match`, with
    the same weights (the state-dict keys did not change); given both keys, it is refused."""
    model = tiny(match="general")
    save_checkpoint(tmp_path / "ckpt", model=model, config=model.config)
    meta = yaml.safe_load((tmp_path / "ckpt" / "config.yaml").read_text())
    meta["config"] = {("attention" if k == "match" else k): v for k, v in meta["config"].items()}
    (tmp_path / "ckpt" / "config.yaml").write_text(yaml.safe_dump(meta))
    write_manifest(tmp_path / "ckpt")  # as the save before the rename wrote it
    loaded, config = load_model(tmp_path / "ckpt")
    assert config == model.config and config.match == "general"
    src, tgt = batch()
    assert torch.equal(loaded(src, tgt), model(src, tgt))
    meta["config"]["match"] = "dot"
    (tmp_path / "ckpt" / "config.yaml").write_text(yaml.safe_dump(meta))
    write_manifest(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="config.yaml: config key 'attention' is now 'match'"):
        load_model(tmp_path / "ckpt")


def test_checkpoint_round_trip_and_int8(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = tiny(match="additive", cell="gru")
    save_checkpoint(tmp_path / "ckpt", model=model, config=model.config)
    loaded, config = load_model(tmp_path / "ckpt")
    src, tgt = batch()
    assert config == model.config and type(loaded) is tformer.RNNEncoderDecoder
    assert loaded.lm_head.weight is loaded.tgt_embed.weight is loaded.src_embed.weight  # tied, stored once
    assert torch.equal(loaded(src, tgt), model(src, tgt))
    quantize(loaded, "int8")  # the linear layers; torch's GRU stays fp32
    assert [len(t) for t in greedy(loaded, src, max_len_b=4)] == [len(t) for t in greedy(loaded, src, max_len_b=4)]


def test_transformer_exports_refuse_it_in_one_line(tmp_path: Path) -> None:
    from tformer.interop.ct2 import to_ct2

    model = tiny(match="dot")
    with pytest.raises(ValueError, match="^to_hf writes GPT, BertForPretraining, EncoderDecoder models, not "
                                         "RNNEncoderDecoder$"):
        tformer.to_hf(model, tmp_path / "hf")
    with pytest.raises(ValueError, match="^this model has no CTranslate2 equivalent: RNNEncoderDecoder "):
        to_ct2(model, tmp_path / "ct2")
    assert not (tmp_path / "hf").exists() and not (tmp_path / "ct2").exists()
