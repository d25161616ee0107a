"""A prepared request's work, typed: each endpoint's `prepare` gives a job holding its own dataclass, whose
batch key names what requests must share to be decoded together (a translation's search settings, a
generation's sampling settings; nothing for scoring or classification), and no key for what must run alone
(seeded sampling, attention maps). `endpoints.run_batch` runs a batch of works by their endpoint, each answer
its own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tformer.decoding import DecodeConfig, SampleConfig
from tformer.serve import Limits
from tformer.serve.batching import Job
from tformer.serve.endpoints import attention, classify, generate, load_service, run_batch, score, translate
from tformer.serve.endpoints.attention import AttentionWork
from tformer.serve.endpoints.classify import ClassifyWork
from tformer.serve.endpoints.generate import GenerateWork
from tformer.serve.endpoints.score import ScoreWork
from tformer.serve.endpoints.translate import TranslateWork
from tformer.serve.service import Service


@pytest.fixture(scope="module")
def services(checkpoints: dict[str, Path]) -> dict[str, Service]:
    return {kind: load_service(checkpoints[kind], limits=Limits(max_new_tokens=20), device="cpu")
            for kind in ("seq2seq", "gpt", "bert classifier")}


def generation(service: Service, **settings: object) -> Job:
    return generate.prepare(service, **{"prompt": "the", "max_new_tokens": 5, "temperature": 1.0, "top_k": None,
                                        "top_p": None, "seed": None, "stop": True, **settings})


def test_a_translation_is_keyed_by_its_search_settings(services: dict[str, Service]) -> None:
    mt = services["seq2seq"]
    job = translate.prepare(mt, text=None, texts=["the cat", "a dog"], beam=None, lenpen=None)
    recipes = DecodeConfig(beam=2, lenpen=1.0, stopping="finished", max_len_a=1.0, max_len_b=6)  # recipe.yaml
    ids = tuple(map(tuple, mt.tokenizer.encode_batch(["the cat", "a dog"])))  # tokenized once, carried
    assert job.work == TranslateWork(ids, dataclasses.replace(recipes, batch_size=mt.limits.max_batch))
    assert job.size == 2 and job.key == recipes
    assert translate.prepare(mt, text="a", texts=None, beam=2, lenpen=None).key == job.key
    assert translate.prepare(mt, text="a", texts=None, beam=3, lenpen=None).key != job.key
    assert translate.prepare(mt, text="a", texts=None, beam=None, lenpen=0.5).key != job.key


def test_a_generation_is_keyed_by_its_sampling_settings_and_a_seeded_one_runs_alone(
        services: dict[str, Service]) -> None:
    gpt = services["gpt"]
    job = generation(gpt, top_k=5)
    assert isinstance(job.work, GenerateWork) and job.size == 1
    assert job.key == SampleConfig(temperature=1.0, top_k=5, top_p=None, seed=None, stop=True)
    assert generation(gpt, top_k=5, prompt="a dog").key == job.key
    assert generation(gpt, top_k=6).key != job.key
    assert generation(gpt, top_k=5, stop=False).key != job.key
    assert generation(gpt, seed=3).key is None
    greedy = {generation(gpt, temperature=0.0, **s).key for s in ({}, {"top_k": 5}, {"top_p": 0.5}, {"seed": 3})}
    assert len(greedy) == 1  # greedy decoding: the other settings change nothing


def test_scorings_classifications_and_attention_maps(services: dict[str, Service]) -> None:
    gpt, clf = services["gpt"], services["bert classifier"]
    scored = [score.prepare(gpt, text=None, texts=["the cat", "a"], per_token=True),
              score.prepare(gpt, text="a dog", texts=None, per_token=False)]
    assert [j.work for j in scored] == [ScoreWork(("the cat", "a"), True), ScoreWork(("a dog",), False)]
    assert scored[0].key == scored[1].key and [j.size for j in scored] == [2, 1]
    labelled = [classify.prepare(clf, text="a", texts=None, top=1), classify.prepare(clf, text="b", texts=None, top=3)]
    assert labelled[0].work == ClassifyWork(("a",), 1) and labelled[0].key == labelled[1].key
    drawn = attention.prepare(gpt, text="the cat", target=None)
    assert drawn.work == AttentionWork("the cat", None) and drawn.key is None
    keys = [scored[0].key, labelled[0].key, generation(gpt).key, generation(gpt, temperature=0.0).key,
            translate.prepare(services["seq2seq"], text="a", texts=None, beam=None, lenpen=None).key]
    assert len(set(keys)) == len(keys)  # no two endpoints share a batch


def test_run_batch_runs_works_by_their_type_each_answer_its_own(services: dict[str, Service]) -> None:
    gpt, clf = services["gpt"], services["bert classifier"]
    works = [ScoreWork(("the cat", "a dog"), True), ScoreWork(("the",), False)]
    batched = run_batch(gpt.loaded, works)
    alone = [run_batch(gpt.loaded, [w])[0] for w in works]
    assert [len(a) for a in batched] == [2, 1] and "token_log_probs" not in batched[1][0]
    flat = [s["log_prob"] for answer in batched for s in answer]
    assert flat == pytest.approx([s["log_prob"] for answer in alone for s in answer], rel=1e-5)
    labels = run_batch(clf.loaded, [ClassifyWork(("a",), 1), ClassifyWork(("b", "c"), 3)])
    assert [[len(ranked) for ranked in a] for a in labels] == [[1], [3, 3]]
    greedy = [generation(gpt, temperature=0.0, prompt=p, max_new_tokens=n).work for p, n in (("the", 4), ("a do", 6))]
    assert run_batch(gpt.loaded, greedy) == [run_batch(gpt.loaded, [w])[0] for w in greedy]
