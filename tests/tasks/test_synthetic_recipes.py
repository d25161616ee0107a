"""The three synthetic recipes (synthetic-rnn, synthetic-attention, synthetic-transformer): the same corpus,
budget and decoding, models of about one size, the RNNs trained as recurrent models are; and the road recipes'
RNNs so trained too; the three road recipes on the Bible share data, budget and decoding at about one size."""

from __future__ import annotations

import pytest

import tformer
from tformer.models.calc import param_count
from tformer.tasks import load_recipe
from tformer.tasks.translation import translation_setup

SYNTHETIC = ("synthetic-rnn", "synthetic-attention", "synthetic-transformer")
RECURRENT = ("synthetic-rnn", "synthetic-attention", "road-rnn", "road-attention")
ROAD = ("road-rnn", "road-attention", "road-transformer")


def test_the_three_share_corpus_budget_and_decoding_at_about_one_size() -> None:
    recipes = [load_recipe(name) for name in SYNTHETIC]
    assert all(r.data == recipes[0].data and r.data.corpus == "synthetic" for r in recipes)
    assert len({(r.train.time_budget_min, r.train.max_steps, r.train.seed) for r in recipes}) == 1
    assert all(r.decode == recipes[0].decode for r in recipes)
    small = ["data.synthetic.train=20", "data.synthetic.valid=4", "data.synthetic.test=4"]
    sizes = [sum(p.numel() for p in translation_setup(load_recipe(n, small), None).model.parameters())
             for n in SYNTHETIC]
    assert max(sizes) / min(sizes) < 1.05, sizes
    families = [type(translation_setup(load_recipe(n, small), None).config).__name__ for n in SYNTHETIC]
    assert families == ["RNNSeq2SeqConfig", "RNNSeq2SeqConfig", "Seq2SeqConfig"]


@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_recipes_train_as_recurrent_models_are(name: str) -> None:
    """Adam at 1e-3 with its usual betas, the gradient norm clipped at 5, no warm-up (Sutskever et al. 2014;
    Luong et al. 2015); the weights uniform in [-0.1, 0.1] (the model's init_range)."""
    train = load_recipe(name).train
    assert (train.optim.name, train.optim.lr, train.optim.betas, train.optim.clip_norm) == \
        ("adam", 1e-3, (0.9, 0.999), 5.0)
    assert train.schedule.warmup == 0
    assert load_recipe(name).model.overrides.get("init_range", 0.1) == 0.1


def test_the_road_shares_data_budget_and_decoding_at_about_one_size() -> None:
    """An hour each on the demo's data and decoding; sizes at the demo's 4,000 tokens within 3% of each other."""
    recipes = [load_recipe(name) for name in ROAD]
    assert all(r.data == recipes[0].data and r.data.corpus == "bible" for r in recipes)
    assert {(r.train.time_budget_min, r.train.max_steps, r.train.seed) for r in recipes} == {(60, 100000, 0)}
    assert all(r.decode == recipes[0].decode and r.decode.beam == 4 for r in recipes)
    sizes = [param_count(tformer.preset(r.model.preset, {**r.model.overrides, "vocab_size": 4000}))
             for r in recipes]
    assert max(sizes) / min(sizes) < 1.03, sizes
    attention = recipes[1].model.overrides
    assert (attention["match"], attention["input_feeding"]) == ("dot", False)
