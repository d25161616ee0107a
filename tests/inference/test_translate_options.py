"""What `inference.translate` and `translate_n_best` add to the searches (issue 32): n-best lists that are the
beam search's own hypotheses, forced prefixes given as text, and repetition control from the decoding
settings (a recipe's `decode:` keys), checked by `decoding.Repetition` in its own words."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
import yaml

import tformer
from tformer.data.padding import pad
from tformer.decoding import Decoder, Repetition, SampleConfig, beam_search, greedy
from tformer.errors import UserError
from tformer.inference import (
    DecodeConfig,
    check_n_best,
    run_decode,
    split_prefixes,
    translate,
    translate_n_best,
    with_given,
)
from tformer.tokenization import BPETokenizer
from tformer.training.checkpoint import save_checkpoint

TEXT = ["the cat sees the dog", "a big red house", "the small blue cat sleeps", "a dog runs", "the house sleeps"]
TINY = {"d_model": 32, "d_ff": 64, "n_heads": 2, "n_layers": 1, "max_len": 32, "init": {"kind": "normal", "std": 0.5}}


@pytest.fixture(scope="module")
def mt() -> tuple[torch.nn.Module, BPETokenizer]:
    """An untrained translator whose wide weights make its output depend on its input (and repeat itself)."""
    torch.manual_seed(0)
    bpe = BPETokenizer.train(TEXT * 3, vocab_size=280)
    model = tformer.build_model(tformer.preset("transformer-tiny", {**TINY, "vocab_size": bpe.vocab_size}))
    return model.eval(), bpe


def alone(model: torch.nn.Module, tokenizer: BPETokenizer, sentence: str, **kwargs: object) -> list:
    return beam_search(model, pad([tokenizer.encode(sentence)], tokenizer.pad_id), **kwargs)[0]


def round_trips(tokenizer: BPETokenizer, tokens: list[int]) -> bool:
    """Whether the text of `tokens`, tokenized again, is `tokens` (a model may write a word in other pieces)."""
    return tokenizer.encode(tokenizer.decode(tokens)) == tokens


@pytest.mark.parametrize("stopping", ["finished", "best"])
def test_the_n_best_list_is_the_beam_searchs_hypotheses_in_order(mt: tuple, stopping: str) -> None:
    model, bpe = mt
    decode = DecodeConfig(beam=3, max_len_b=8, stopping=stopping, lenpen=0.6)
    found = translate_n_best(model, bpe, TEXT + [""], decode, n_best=3)
    assert found[-1] == []  # an empty line has no hypotheses
    for sentence, candidates in zip(TEXT, found, strict=False):
        want = alone(model, bpe, sentence, beam=3, n_best=3, max_len_a=1.5, max_len_b=8, stopping=stopping,
                     lenpen=0.6)
        assert [c.text for c in candidates] == [bpe.decode(h.tokens) for h in want]
        assert [c.score for c in candidates] == pytest.approx([h.score for h in want], rel=1e-5)
        assert [c.log_prob for c in candidates] == pytest.approx([h.log_prob for h in want], rel=1e-5)
        assert [c.eos for c in candidates] == [h.eos for h in want]
        assert [c.score for c in candidates] == sorted((c.score for c in candidates), reverse=True)  # best first
    assert [c[0].text if c else "" for c in found] == translate(model, bpe, TEXT + [""], decode)


def test_one_best_of_a_beam_of_one_is_the_greedy_translation(mt: tuple) -> None:
    model, bpe = mt
    for stopping in ("finished", "best"):
        decode = DecodeConfig(beam=1, max_len_b=8, stopping=stopping, lenpen=1.0)
        assert [c[0].text for c in translate_n_best(model, bpe, TEXT, decode, n_best=1)] == \
            translate(model, bpe, TEXT, decode)


@pytest.mark.parametrize("n_best, beam", [(0, 4), (5, 4), (2, 1)])
def test_an_n_best_outside_the_beam_is_refused(mt: tuple, n_best: int, beam: int) -> None:
    model, bpe = mt
    message = f"n_best={n_best} is not allowed; give 1 to the beam size ({beam}), or a wider beam for more hypotheses"
    with pytest.raises(UserError) as e:
        translate_n_best(model, bpe, TEXT, DecodeConfig(beam=beam), n_best=n_best)
    assert str(e.value) == message
    with pytest.raises(UserError, match="^--n-best="):
        check_n_best(n_best, beam=beam, what="--n-best")


@pytest.mark.parametrize("beam", [1, 3])
def test_every_translation_starts_with_its_prefix(mt: tuple, beam: int) -> None:
    model, bpe = mt
    decode = DecodeConfig(beam=beam, max_len_b=8)
    prefixes = ["Der", None, " Haus ist", "", "gross"]
    out = translate(model, bpe, TEXT, decode, prefixes=prefixes)
    for got, prefix, plain in zip(out, prefixes, translate(model, bpe, TEXT, decode), strict=True):
        assert got.startswith(prefix) if prefix else got == plain
    for candidates, prefix in zip(translate_n_best(model, bpe, TEXT, decode, n_best=beam, prefixes=prefixes),
                                  prefixes, strict=True):
        assert candidates and all(c.text.startswith(prefix or "") for c in candidates)


def test_the_n_best_list_with_a_prefix_is_the_searchs_own(mt: tuple) -> None:
    model, bpe = mt
    found = translate_n_best(model, bpe, TEXT[:2], DecodeConfig(beam=3, max_len_b=8), n_best=3,
                             prefixes=["Der Hund", None])
    want = alone(model, bpe, TEXT[0], beam=3, n_best=3, max_len_a=1.5, max_len_b=8, prefixes=[bpe.encode("Der Hund")])
    assert [c.text for c in found[0]] == [bpe.decode(h.tokens) for h in want]
    assert [c.score for c in found[0]] == pytest.approx([h.score for h in want], rel=1e-5)


@pytest.mark.parametrize("beam", [1, 2])
def test_the_models_own_output_as_prefix_gives_it_back(mt: tuple, beam: int) -> None:
    """Greedy (beam 1) and the beam search's best: forcing the start of what the model wrote changes nothing,
    where the text of its tokens tokenizes back to them. (A whole output cut at the maximum length is not a
    case: a prefix always leaves room for one more token.)"""
    model, bpe = mt
    decode = DecodeConfig(beam=beam, max_len_b=8)
    src = pad(bpe.encode_batch(TEXT), bpe.pad_id)
    tokens = greedy(model, src, max_len_a=1.5, max_len_b=8) if beam == 1 else \
        [h[0].tokens for h in beam_search(model, src, beam=beam, max_len_b=8, max_len_a=1.5)]
    plain = translate(model, bpe, TEXT, decode)
    assert plain == [bpe.decode(t) for t in tokens]
    for k in (1, 2, 5):
        usable = [i for i, t in enumerate(tokens) if round_trips(bpe, t[:k]) and len(t) > k]
        assert usable
        start = [bpe.decode(tokens[i][:k]) for i in usable]
        assert translate(model, bpe, [TEXT[i] for i in usable], decode, prefixes=start) == [plain[i] for i in usable]


def test_a_bad_prefix_is_refused_naming_its_line(mt: tuple) -> None:
    model, bpe = mt
    with pytest.raises(UserError) as e:
        translate(model, bpe, ["a cat", "a dog"], DecodeConfig(beam=1), prefixes=[None, "the " * 40], where="in.txt",
                  first_line=7)
    assert str(e.value) == ("in.txt:8: the prefix is 80 tokens; the model writes at most max_len=32, so a prefix may "
                            "hold at most 31")
    with pytest.raises(UserError) as e:
        translate(model, bpe, ["a cat"], DecodeConfig(beam=1), prefixes=["der </s> Hund"], where="stdin")
    assert str(e.value) == ("stdin:1: the prefix holds the end symbol (id 2); a prefix is the start of the "
                            "translation, not a whole one")


def test_split_prefixes_splits_at_the_first_tab() -> None:
    assert split_prefixes(["a cat\tDie", "a dog", "x\ty\tz", "b\t"]) == \
        (["a cat", "a dog", "x", "b"], ["Die", None, "y\tz", ""])


def test_no_bigram_twice_with_no_repeat_ngram_size_2(mt: tuple) -> None:
    model, bpe = mt
    src = pad(bpe.encode_batch(TEXT), bpe.pad_id)
    decode = DecodeConfig(beam=1, max_len_b=12, no_repeat_ngram_size=2)
    assert decode.repetition == Repetition(no_repeat_ngram_size=2)
    tokens = greedy(model, src, max_len_a=1.5, max_len_b=12, repetition=decode.repetition)
    assert translate(model, bpe, TEXT, decode) == [bpe.decode(t) for t in tokens]
    for t in tokens:
        bigrams = list(zip(t, t[1:], strict=False))
        assert len(bigrams) == len(set(bigrams)), t
    plain = greedy(model, src, max_len_a=1.5, max_len_b=12)
    assert any(len(set(zip(t, t[1:], strict=False))) < len(t) - 1 for t in plain)  # it repeats without
    penalised = translate(model, bpe, TEXT, DecodeConfig(beam=2, max_len_b=12, repetition_penalty=1.5))
    assert penalised != translate(model, bpe, TEXT, DecodeConfig(beam=2, max_len_b=12))
    assert DecodeConfig().repetition is None  # off by default


@pytest.mark.parametrize("key, value, message", [
    ("no_repeat_ngram_size", -1, "no_repeat_ngram_size=-1 must be an integer >= 0 (0 = off)"),
    ("repetition_penalty", 0.5, "repetition_penalty=0.5 must be a finite number >= 1 (1 = off)")],
    ids=["no-repeat-negative", "penalty-below-1"])
def test_a_bad_repetition_setting_is_refused_in_repetitions_words_everywhere(key: str, value: float, message: str,
                                                                             tmp_path: Path) -> None:
    """The library's Repetition, the decoding settings given (`with_given`: the command line, the server),
    a recipe's `decode:` and an lm recipe's `sample:` section: one check, one message (a recipe's names its
    section)."""
    for call, said in [(lambda: Repetition(**{{"repetition_penalty": "penalty"}.get(key, key): value}), message),
                       (lambda: with_given(DecodeConfig(), **{key: value}), message),
                       (lambda: DecodeConfig(**{key: value}), f"decode.{message}"),
                       (lambda: SampleConfig(**{key: value}), f"sample.{message}")]:
        with pytest.raises(UserError) as e:
            call()
        assert str(e.value) == said
    bpe = BPETokenizer.train(TEXT * 3, vocab_size=280)
    config = tformer.preset("transformer-tiny", {**TINY, "vocab_size": bpe.vocab_size})
    save_checkpoint(tmp_path / "best", model=tformer.build_model(config), config=config, tokenizer=bpe)
    recipe = {"task": "translation", "data": {"corpus": "bible"}, "decode": {key: value}}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    with pytest.raises(UserError) as e:
        run_decode(tmp_path / "best")
    assert str(e.value).endswith(f"is not a valid recipe: decode.{message}")
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({**recipe, "decode": {key: 3 if key[0] == "n" else 1.2}}))
    assert getattr(run_decode(tmp_path / "best"), key) == (3 if key[0] == "n" else 1.2)


def test_captured_steps_are_kept_by_their_holder_across_calls(mt: tuple) -> None:
    """On a GPU a captured decoding step costs a recording; `Loaded.graphs` keeps it for the next call (a
    server's next request, a file's next batch). On the CPU the same fixed-shape path runs eagerly."""
    model, bpe = mt
    decoder = Decoder(model, capture=True)
    graphs = decoder.graphs
    for decode in (DecodeConfig(beam=1, max_len_b=6), DecodeConfig(beam=2, max_len_b=6)):
        eager = translate(Decoder(model, capture=False), bpe, TEXT, decode)
        first = translate(decoder, bpe, TEXT, decode)
        kept = dict(graphs._kept)
        assert first == eager and kept  # the same translations, and state kept for the shapes seen
        assert translate(decoder, bpe, TEXT, decode) == eager
        assert all(graphs._kept[key] is state for key, state in kept.items())  # reused, not made again
    n_best = translate_n_best(decoder, bpe, TEXT, DecodeConfig(beam=2, max_len_b=6), n_best=2)
    assert [c[0].text for c in n_best] == translate(model, bpe, TEXT, DecodeConfig(beam=2, max_len_b=6))


def test_one_call_makes_one_holder_for_all_its_batches(mt: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    model, bpe = mt
    seen = []
    module = importlib.import_module("tformer.decoding.search")
    real = module.greedy

    def spy(decoder, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(decoder)
        return real(decoder, *args, **kwargs)

    monkeypatch.setattr(module, "greedy", spy)
    translate(model, bpe, TEXT, DecodeConfig(beam=1, max_len_b=4, batch_size=2))
    assert len(seen) == 3 and all(d is seen[0] and isinstance(d, Decoder) and d.model is model for d in seen)
