"""`TranslationTask` between training steps: its evaluations share one holder of captured decoding steps (on
a GPU, recorded at the first evaluation and replayed at the next), made again only for another model."""

from pathlib import Path

from tests.benchmarks.test_step_profile import corpus
from tformer.decoding import Decoder
from tformer.tasks import load_recipe
from tformer.tasks.translation import translation_setup


def test_evaluations_keep_one_decoder(tmp_path: Path) -> None:
    train, valid = corpus(tmp_path / "train.tsv", 40), corpus(tmp_path / "valid.tsv", 6)
    recipe = load_recipe("demo", ["data.corpus=files", f"data.train={train}", f"data.valid={valid}",
                                  "data.vocab_size=300", "data.bleu_sentences=3", "model.overrides.d_model=16",
                                  "model.overrides.d_ff=32", "model.overrides.n_heads=2", "model.overrides.n_layers=1"])
    built = translation_setup(recipe, None)
    model, task = built.model.eval(), built.task
    first = task.evaluate(model)
    decoder = task._decoder
    assert isinstance(decoder, Decoder) and decoder.model is model
    assert task.evaluate(model) == first and task._decoder is decoder
    other = translation_setup(recipe, built.tokenizer).model.eval()
    task.evaluate(other)
    assert task._decoder is not decoder and task._decoder.model is other
