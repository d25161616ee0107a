"""Language-model pretraining: packing the token stream into blocks, the task's loss and metrics, sampling,
and a tiny GPT that learns through `train_lm` (and resumes exactly)."""

import json
import math
import random

import pytest
import torch

from tformer.config import GPTConfig
from tformer.models.presets import build_model
from tformer.tasks import TASKS, load_recipe
from tformer.tasks import lm as lm_task
from tformer.tasks.base import ModelSpec
from tformer.tasks.lm import LMDataConfig, LMRecipe, LMTask, SampleSection, model_config, train_lm
from tformer.tokenization import CharTokenizer, load_tokenizer
from tformer.training.config import TrainConfig
from tformer.training.optim import OptimConfig
from tformer.training.schedules import ScheduleConfig

WORDS = "the a cat dog sat ran on under mat log and then slept barked".split()


def sentences(n: int, seed: int) -> list[str]:
    """Documents of a few short sentences from a tiny grammar: learnable structure in a few steps."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        lines = [f"{rng.choice(WORDS[:2])} {rng.choice(WORDS[2:4])} {rng.choice(WORDS[4:6])} "
                 f"{rng.choice(WORDS[6:8])} the {rng.choice(WORDS[8:10])}." for _ in range(rng.randint(1, 4))]
        docs.append("\n".join(lines))
    return docs


def write_corpus(tmp_path, n_train: int = 300, n_valid: int = 20) -> tuple[str, str]:  # noqa: ANN001
    tmp_path.mkdir(parents=True, exist_ok=True)
    train, valid = tmp_path / "train.txt", tmp_path / "valid.jsonl"
    train.write_text("\n\n".join(sentences(n_train, seed=0)))  # one document
    valid.write_text("\n".join(json.dumps({"text": d}) for d in sentences(n_valid, seed=1)))
    return str(train), str(valid)


def recipe_for(tmp_path, *, max_steps: int, block_size: int = 32, **data) -> LMRecipe:  # noqa: ANN001
    train, valid = write_corpus(tmp_path)
    return LMRecipe(
        out_dir=str(tmp_path / "run"),
        data=LMDataConfig(corpus="files", paths=[train], valid_paths=[valid], block_size=block_size, batch_size=8,
                          **data),
        model=ModelSpec(preset="gpt-tiny", overrides={"d_model": 32, "d_ff": 64, "n_heads": 2, "n_layers": 1,
                                                      "dropout": {"embed": 0.0, "residual": 0.0}}),
        train=TrainConfig(max_steps=max_steps, eval_every=max_steps, log_every=10, label_smoothing=0.0,
                          optim=OptimConfig(name="adamw", lr=1e-2, betas=(0.9, 0.95), weight_decay=0.0),
                          schedule=ScheduleConfig(name="cosine", warmup=10, total_steps=max(max_steps, 20))),
        sample=SampleSection(prompts=["", "the cat"], max_new_tokens=20),
    )


def test_stream_and_blocks() -> None:
    tok = CharTokenizer.train(["abc", "de"])
    stream = lm_task.token_stream(["abc", "de"], tok)
    assert stream.tolist() == [2, *tok.encode("abc"), 2, *tok.encode("de"), 2]
    blocks = lm_task.pack_blocks(stream, block_size=3)
    assert blocks.tolist() == [stream[0:4].tolist(), stream[3:7].tolist()]  # stride 3, tail [2] left out


def test_epoch_order_is_fixed_per_seed_and_epoch() -> None:
    stream = torch.arange(1000)
    first = lm_task.epoch_blocks(stream, block_size=16, seed=0, epoch=0)
    assert first.shape[1] == 17
    assert torch.equal(first, lm_task.epoch_blocks(stream, block_size=16, seed=0, epoch=0))
    assert not torch.equal(first[:5], lm_task.epoch_blocks(stream, block_size=16, seed=0, epoch=1)[:5])
    assert not torch.equal(first[:5], lm_task.epoch_blocks(stream, block_size=16, seed=1, epoch=0)[:5])
    starts = first[:, 0]
    assert torch.equal(first, starts[:, None] + torch.arange(17))  # contiguous slices of the stream
    assert len(set((starts % 16).tolist())) == 1 and len(set(starts.tolist())) == len(starts)  # one offset


def test_task_batches_targets_and_metrics(tmp_path) -> None:  # noqa: ANN001
    recipe = recipe_for(tmp_path, max_steps=1)
    tok = CharTokenizer.train(sentences(300, seed=0))
    task = LMTask(recipe, tok)
    batches = task.batches(0)
    assert batches[0].inputs.shape == (8, 32) and all(b.inputs.shape[1] == 32 for b in batches)
    for b in batches:
        assert torch.equal(b.inputs[:, 1:], b.targets[:, :-1])  # targets are the inputs shifted by one
        assert task.n_tokens(b) == b.targets.numel()
    again = task.batches(0)
    assert all(torch.equal(a.inputs, b.inputs) for a, b in zip(batches, again, strict=True))
    assert not torch.equal(batches[0].inputs, task.batches(1)[0].inputs)
    valid_docs = sentences(20, seed=1)
    assert task.valid_chars == sum(len(d) + 1 for d in valid_docs)
    assert sum(task.n_tokens(b) for b in task.valid_batches) == task.valid_chars  # char level: a token a char
    model = build_model(model_config(recipe, tok))
    metrics = task.evaluate(model)
    assert metrics["bits_per_char"] == pytest.approx(metrics["valid_loss"] / math.log(2), rel=1e-9)
    assert metrics["valid_ppl"] == pytest.approx(math.exp(metrics["valid_loss"]))


def test_eval_tokens_keeps_whole_documents(tmp_path) -> None:  # noqa: ANN001
    tok = CharTokenizer.train(sentences(300, seed=0))
    task = LMTask(recipe_for(tmp_path, max_steps=1, eval_tokens=100), tok)
    docs = sentences(20, seed=1)
    kept = next(i for i in range(1, len(docs) + 1) if sum(len(d) + 1 for d in docs[: i + 1]) > 100)
    assert task.valid_chars == sum(len(d) + 1 for d in docs[:kept])


def test_model_config_and_generate(tmp_path) -> None:  # noqa: ANN001
    recipe = recipe_for(tmp_path, max_steps=1, block_size=300)  # above gpt-tiny's max_len 256
    tok = CharTokenizer.train(["abc"])
    config = model_config(recipe, tok)
    assert isinstance(config, GPTConfig) and config.max_len == 300 and config.vocab_size == tok.vocab_size
    assert config.bos_id == config.eos_id == tok.eos_id  # a document starts after the </s> separator
    model = build_model(config)
    sample = SampleSection(prompts=["ab", "c" * 400], max_new_tokens=1000, temperature=1.0, top_k=3)
    texts = lm_task.sample_texts(model, tok, sample, seed=3)
    assert texts == lm_task.sample_texts(model, tok, sample, seed=3)  # reproducible per seed
    assert texts[0].startswith("ab") and len(texts[0]) <= 2 + 299 and texts[1].startswith("c" * 400)
    with pytest.raises(ValueError, match="not decoder-only"):
        model_config(LMRecipe(model=ModelSpec(preset="transformer-tiny")), tok)
    with pytest.raises(ValueError, match="needs data.paths and data.valid_paths"):
        LMDataConfig(corpus="files", paths=["x.txt"])


def test_tiny_gpt_learns_and_resumes_exactly(tmp_path) -> None:  # noqa: ANN001
    recipe = recipe_for(tmp_path, max_steps=80)
    torch.manual_seed(recipe.train.seed)  # as train_lm does before building the model
    tok = CharTokenizer.train(sentences(300, seed=0))
    initial = LMTask(recipe, tok).evaluate(build_model(model_config(recipe, tok)))["valid_loss"]
    state = train_lm(recipe, progress=False)
    final = state["metrics"]["valid_loss"]
    print(f"valid_loss {initial:.3f} -> {final:.3f}, bits/char {state['metrics']['bits_per_char']:.3f}")
    assert final < initial - 1.0
    assert len(state["samples"]) == 2 and state["samples"][1].startswith("the cat")
    assert (tmp_path / "run" / "samples.txt").is_file() and (tmp_path / "run" / "recipe.yaml").is_file()

    short = recipe_for(tmp_path / "b", max_steps=6)
    train_lm(short, progress=False)
    short.train.max_steps = 12
    resumed = train_lm(short, resume=True, progress=False)
    straight = recipe_for(tmp_path / "c", max_steps=12)
    straight.train.eval_every = 6
    direct = train_lm(straight, progress=False)
    assert resumed["metrics"]["valid_loss"] == pytest.approx(direct["metrics"]["valid_loss"], rel=1e-5)


def test_gpt_bible_config_loads_and_runs_two_steps(tmp_path) -> None:  # noqa: ANN001
    assert TASKS["lm"][0] is LMRecipe
    recipe = load_recipe("gpt-bible", [
        f"out_dir={tmp_path}", "train.max_steps=2", "model.overrides.d_model=32", "model.overrides.d_ff=64",
        "model.overrides.n_layers=1", "data.eval_tokens=500", "sample.max_new_tokens=5"])
    assert isinstance(recipe, LMRecipe) and recipe.train.time_budget_min == 15
    state = train_lm(recipe, progress=False)
    assert state["step"] == 2 and math.isfinite(state["metrics"]["bits_per_char"])


def test_distillation_takes_the_teachers_tokenizer_and_learns_its_choices(tmp_path) -> None:  # noqa: ANN001
    """A smaller GPT distilled from a trained one: it trains with the teacher's tokenizer, reports its
    agreement with the teacher, keeps the best by it, and agrees far more after training than before."""
    train_lm(recipe_for(tmp_path / "t", max_steps=60), progress=False)
    teacher = tmp_path / "t" / "run" / "best"
    student = recipe_for(tmp_path / "s", max_steps=60)
    student.model = ModelSpec(preset="gpt-tiny", overrides={"d_model": 16, "d_ff": 32, "n_heads": 2, "n_layers": 1})
    student.distill = lm_task.DistillConfig(teacher=str(teacher))
    student.train.best_metric = "agreement"
    model, tok = lm_task.load_teacher(student.distill, block_size=32)
    torch.manual_seed(student.train.seed)
    fresh = build_model(model_config(student, tok))
    before = LMTask(student, tok, teacher=model).evaluate(fresh)["agreement"]
    state = train_lm(student, progress=False)
    after = state["metrics"]["agreement"]
    print(f"agreement with the teacher {before:.3f} -> {after:.3f}")
    assert after > before + 0.3 and after > 0.6
    saved = load_tokenizer(tmp_path / "s" / "run" / "best")
    assert saved.vocab_size == tok.vocab_size and saved.encode("the cat sat.") == tok.encode("the cat sat.")


def test_distillation_settings_are_checked(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=r"distill.weight=1.5 must be in \[0, 1\]"):
        lm_task.DistillConfig(teacher="t", weight=1.5)
    with pytest.raises(ValueError, match="distill.tau=0 must be > 0"):
        lm_task.DistillConfig(teacher="t", tau=0)
    with pytest.raises(ValueError, match="train.best_metric=agreement needs a teacher"):
        LMRecipe(train=TrainConfig(best_metric="agreement"))
