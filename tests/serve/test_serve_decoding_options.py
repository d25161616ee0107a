"""Issue 32 through the server: /translate's `n_best` (the library's hypotheses, scores and all), `prefix` (a
string, or with `texts` a list) and the repetition fields of /translate and /generate (the library's answers),
and `warnings` in an answer about text the model's tokenizer cannot represent. Refusals of the new values are
compared with the command line's in test_serve_values.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from serving import call, sentences
from test_serve_errors import assert_refused

from tformer.decoding import SampleConfig, generate
from tformer.inference import (
    DecodeConfig,
    continue_prompt,
    load,
    prompt_ids,
    repetition_of,
    translate,
    translate_n_best,
)
from tformer.serve import Limits
from tformer.serve.endpoints import load_service, run_batch
from tformer.serve.endpoints.translate import TranslateWork, prepare

DECODE = DecodeConfig(beam=2, max_len_b=6, max_len_a=1.0)  # the translator's recipe.yaml


@pytest.fixture(scope="module")
def loaded(checkpoints: dict[str, Path]) -> dict:
    return {kind: load(checkpoints[kind]) for kind in ("seq2seq", "gpt")}


def post(servers: dict[str, str], kind: str, path: str, body: dict) -> dict:
    status, answer = call(servers[kind], "POST", path, body)
    assert status == 200, answer
    return answer


def as_json(candidates: list) -> list[dict]:
    return [dataclasses.asdict(c) for c in candidates]


def test_n_best_answers_the_librarys_hypotheses(servers: dict[str, str], loaded: dict) -> None:
    mt = loaded["seq2seq"]
    texts = sentences(3)
    want = translate_n_best(mt.model, mt.tokenizer, texts, DECODE, n_best=2)
    one = post(servers, "seq2seq", "/translate", {"text": texts[0], "n_best": 2})
    assert set(one) == {"translation", "hypotheses"}
    assert [h["text"] for h in one["hypotheses"]] == [c.text for c in want[0]]
    assert [h["score"] for h in one["hypotheses"]] == pytest.approx([c.score for c in want[0]], rel=1e-5)
    assert one["translation"] == translate(mt.model, mt.tokenizer, texts[:1], DECODE)[0] == want[0][0].text
    many = post(servers, "seq2seq", "/translate", {"texts": texts, "n_best": 1, "beam": 3})
    wider = translate_n_best(mt.model, mt.tokenizer, texts, dataclasses.replace(DECODE, beam=3), n_best=1)
    assert [[h["text"] for h in hyps] for hyps in many["hypotheses"]] == [[c.text for c in w] for w in wider]
    assert many["translations"] == [w[0].text for w in wider]
    for body, message in [({"n_best": 3}, "n_best=3 is not allowed; give 1 to the beam size (2), or a wider beam "
                                          "for more hypotheses"),
                          ({"n_best": 2, "beam": 1}, "n_best=2 is not allowed; give 1 to the beam size (1), or a wider "
                                                     "beam for more hypotheses")]:
        answer = call(servers["seq2seq"], "POST", "/translate", {"text": texts[0], **body})
        assert assert_refused(*answer, codes=(422,)) == message


def test_a_batch_with_and_without_n_best_gives_each_its_own_answer(checkpoints: dict[str, Path]) -> None:
    service = load_service(checkpoints["seq2seq"], limits=Limits(), device="cpu")
    works = [prepare(service, text=None, texts=sentences(2), beam=None, lenpen=None).work,
             prepare(service, text=None, texts=sentences(3)[1:], beam=None, lenpen=None, n_best=2,
                               prefix=["Der", None]).work]
    forced = (tuple(service.tokenizer.encode("Der")), ())  # the prefixes' ids, tokenized once with the request
    assert isinstance(works[1], TranslateWork) and works[1].forced == forced and works[1].n_best == 2
    assert run_batch(service.loaded, works) == [run_batch(service.loaded, [w])[0] for w in works]


def test_a_prefix_starts_the_translation(servers: dict[str, str], loaded: dict) -> None:
    mt = loaded["seq2seq"]
    texts = sentences(3)
    one = post(servers, "seq2seq", "/translate", {"text": texts[0], "prefix": "Der Hund"})
    assert one["translation"].startswith("Der Hund")
    assert one["translation"] == translate(mt.model, mt.tokenizer, texts[:1], DECODE, prefixes=["Der Hund"])[0]
    many = post(servers, "seq2seq", "/translate", {"texts": texts, "prefix": [None, "Die", ""], "n_best": 2})
    assert many["translations"] == translate(mt.model, mt.tokenizer, texts, DECODE, prefixes=[None, "Die", None])
    assert all(h["text"].startswith("Die") for h in many["hypotheses"][1])
    assert post(servers, "seq2seq", "/translate", {"text": texts[0], "prefix": ""}) == \
        post(servers, "seq2seq", "/translate", {"text": texts[0]})


@pytest.mark.parametrize("body, message", [
    ({"texts": ["a cat", "a dog"], "prefix": ["Die"]},
     "with texts, give prefix as a list of 2 strings, one per text (null: none), not 1 of them"),
    ({"texts": ["a cat", "a dog"], "prefix": "Die"},
     "with texts, give prefix as a list of 2 strings, one per text (null: none), not a string"),
    ({"text": "a cat", "prefix": ["Die"]}, "prefix is a list; with text, give one string (a list of them goes with "
                                           "texts)"),
    ({"text": "a cat", "prefix": "Die\nKatze"}, "prefix holds a line break; a prefix is the start of one "
                                                "sentence's translation"),
    ({"texts": ["a cat"], "prefix": ["Die " * 40]}, "prefix[0] is 160 tokens; the model writes at most max_len=48, "
                                                    "so a prefix may hold at most 47"),
    ({"text": "a cat", "prefix": "Die </s>"}, "prefix holds the end symbol (id 2); a prefix is the start of the "
                                              "translation, not a whole one"),
    ({"text": "a cat", "prefix": 5}, "prefix=5 is not allowed: input should be a valid string or a valid array"),
    ({"texts": ["a", "b"], "prefix": ["Die", 5]}, "prefix[1]=5 is not allowed: input should be a valid string"),
], ids=["list-too-short", "string-with-texts", "list-with-text", "line-break", "too-long", "end-symbol", "a-number",
        "a-number-in-the-list"])
def test_a_bad_prefix_is_refused_in_one_line(body: dict, message: str, servers: dict[str, str]) -> None:
    refused = assert_refused(*call(servers["seq2seq"], "POST", "/translate", body), codes=(422,))
    assert refused.startswith(message), refused


def test_repetition_settings_give_the_librarys_answers(servers: dict[str, str], loaded: dict) -> None:
    mt, gpt = loaded["seq2seq"], loaded["gpt"]
    texts = sentences(4)
    for settings in ({"no_repeat_ngram_size": 2}, {"repetition_penalty": 1.5, "beam": 1}):
        got = post(servers, "seq2seq", "/translate", {"texts": texts, **settings})["translations"]
        assert got == translate(mt.model, mt.tokenizer, texts, dataclasses.replace(DECODE, **settings))
    body = {"prompt": "the cat", "max_new_tokens": 15, "temperature": 0.0, "no_repeat_ngram_size": 2}
    text = post(servers, "gpt", "/generate", body)["text"]
    assert text == continue_prompt(gpt.model, gpt.tokenizer, "the cat",
                                   SampleConfig(temperature=0.0, no_repeat_ngram_size=2), max_new_tokens=15)
    prompt = prompt_ids(gpt.tokenizer, gpt.config, "the cat")
    (new,) = generate(gpt.model, [prompt], max_new_tokens=15, temperature=0.0, repetition=repetition_of(2),
                      stop_tokens=(gpt.config.eos_id,))
    assert gpt.tokenizer.decode(new) == text
    bigrams = list(zip(prompt + new, (prompt + new)[1:], strict=False))
    assert len(bigrams) == len(set(bigrams))  # no bigram twice, the prompt's included
    penalised = post(servers, "gpt", "/generate", {**body, "no_repeat_ngram_size": 0, "repetition_penalty": 1.3})
    assert penalised["text"] == continue_prompt(gpt.model, gpt.tokenizer, "the cat",
                                                SampleConfig(temperature=0.0, repetition_penalty=1.3),
                                                max_new_tokens=15)


@pytest.mark.parametrize("kind, path, body, example", [
    ("gpt", "/generate", {"prompt": "the Жук", "max_new_tokens": 2}, "'Ж', 'у', 'к'"),
    ("gpt", "/score", {"texts": ["the Жук", "the cat"]}, "'Ж', 'у', 'к'"),
    ("bert classifier", "/classify", {"text": "the 猫 cat"}, "'猫'")], ids=["generate", "score", "classify"])
def test_text_the_tokenizer_cannot_represent_gets_a_warning(kind: str, path: str, body: dict, example: str,
                                                            servers: dict[str, str]) -> None:
    answer = post(servers, kind, path, body)
    (warning,) = answer["warnings"]
    assert warning.endswith(f"are unknown to this model's tokenizer (e.g. {example}); its output will be poor")
    clean = {k: v.replace("Жук", "dog").replace("猫", "dog") if isinstance(v, str) else
             [t.replace("Жук", "dog") for t in v] if isinstance(v, list) else v for k, v in body.items()}
    assert "warnings" not in post(servers, kind, path, clean)


def test_a_byte_level_translator_never_warns(servers: dict[str, str]) -> None:
    assert "warnings" not in post(servers, "seq2seq", "/translate", {"text": "the Жук 猫", "prefix": "Ж"})
