"""`tasks.translation.training_rates`: the tokens/s a run's test.json reports, from its logged windows."""

from tformer.tasks.translation import training_rates


def test_training_rates_median_and_overall() -> None:
    records = [{"step": 50, "tokens_per_s": 1000.0, "elapsed_s": 1.0},  # 1,000 tokens in 1 s
               {"step": 100, "tokens_per_s": 100.0, "elapsed_s": 11.0},  # 1,000 tokens in 10 s: a busy machine
               {"step": 100, "eval/bleu": 3.0},
               {"step": 150, "tokens_per_s": 1000.0, "elapsed_s": 12.0}]  # 1,000 tokens in 1 s
    median, overall = training_rates(records)
    assert median == 1000.0 and overall == 3000.0 / 12.0
    assert training_rates([{"step": 1, "eval/bleu": 1.0}]) == (None, None)
