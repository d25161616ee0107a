"""BERT end to end on tiny synthetic data: pretraining lowers MLM and NSP losses, a classifier learns a
separable task, fine-tuning starts from a tformer or Hugging Face encoder, and `tformer classify` labels lines."""

import json
import random

import pytest
import torch
import transformers

from tformer.cli import main
from tformer.config import from_dict
from tformer.data.labelled import read_labelled
from tformer.tasks.bert import PretrainRecipe, train_bert
from tformer.tasks.classify import ClassifyRecipe, build_classifier, train_classifier
from tformer.tokenization import WordPieceTokenizer

TOPICS = [["red", "blue", "green", "yellow", "purple"], ["cat", "dog", "horse", "mouse", "sheep"],
          ["run", "jump", "swim", "climb", "walk"], ["one", "two", "three", "four", "five"]]
TINY = {"d_model": 32, "d_ff": 64, "n_heads": 2, "n_layers": 2}


def write_documents(path, n_docs: int, seed: int) -> None:  # noqa: ANN001
    """Documents on one topic each: a sentence is 4-7 words of its topic, so the next sentence shares the
    topic and a random one (from another document) usually does not."""
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        words = TOPICS[d % len(TOPICS)]
        docs.append("\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 7))) + " ."
                              for _ in range(6)))
    path.write_text("\n\n".join(docs) + "\n")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):  # noqa: ANN001, ANN201
    root = tmp_path_factory.mktemp("bert")
    write_documents(root / "train.txt", 80, seed=0)
    write_documents(root / "valid.txt", 12, seed=1)
    recipe = from_dict(PretrainRecipe, {
        "out_dir": str(root / "run"),
        "data": {"corpora": ["files"], "paths": [str(root / "train.txt")], "valid_paths": [str(root / "valid.txt")],
                 "vocab_size": 100, "max_len": 32, "batch_size": 16},
        "model": {"preset": "bert-tiny", "overrides": {**TINY, "d_model": 64, "d_ff": 128, "n_heads": 4,
                                                       "dropout": {"embed": 0.0, "residual": 0.0}}},
        "train": {"max_steps": 300, "eval_every": 50, "log_every": 50, "optim": {"lr": 2e-3},
                  "schedule": {"name": "constant", "warmup": 10}},
    })
    train_bert(recipe, progress=False)
    return root


def test_pretraining_lowers_masked_lm_and_next_sentence_losses(pretrained) -> None:  # noqa: ANN001
    evals = [r for r in map(json.loads, (pretrained / "run" / "metrics.jsonl").read_text().splitlines())
             if "eval/mlm_loss" in r]
    first, last = evals[0], evals[-1]
    assert last["eval/mlm_loss"] < first["eval/mlm_loss"] - 0.8  # ln 20 = 3.0: guessing among all 20 words
    assert last["eval/mlm_accuracy"] > 0.22
    assert last["eval/nsp_loss"] < first["eval/nsp_loss"] - 0.05 and last["eval/nsp_accuracy"] > 0.6


def write_labelled(path, n: int, seed: int) -> None:  # noqa: ANN001
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        label = rng.choice(["animals", "colours"])
        words = TOPICS[1] if label == "animals" else TOPICS[0]
        noise = TOPICS[2] + TOPICS[3]
        text = [rng.choice(words) for _ in range(2)] + [rng.choice(noise) for _ in range(rng.randint(2, 6))]
        rng.shuffle(text)
        lines.append(f"{label}\t{' '.join(text)}")
    path.write_text("\n".join(lines) + "\n")


def classify_recipe(root, **model) -> ClassifyRecipe:  # noqa: ANN001
    for name, n, seed in (("train", 400, 0), ("valid", 100, 1), ("test", 100, 2)):
        write_labelled(root / f"{name}.tsv", n, seed)
    return from_dict(ClassifyRecipe, {
        "out_dir": str(root / "cls"),
        "data": {"corpus": "files", "train": str(root / "train.tsv"), "valid": str(root / "valid.tsv"),
                 "test": str(root / "test.tsv"), "vocab_size": 100, "max_len": 32, "batch_size": 16},
        "model": {"preset": "bert-tiny", "overrides": TINY, **model},
        "train": {"max_steps": 120, "eval_every": 40, "log_every": 20, "optim": {"lr": 2e-3},
                  "schedule": {"name": "cosine", "warmup": 10, "total_steps": 120}},
    })


def test_classifier_learns_a_separable_task_and_the_cli_labels_lines(tmp_path, capsys) -> None:  # noqa: ANN001
    state = train_classifier(classify_recipe(tmp_path), progress=False)
    assert state["test"]["test_accuracy"] >= 0.95
    (tmp_path / "lines.txt").write_text("dog cat one two\nred blue swim\n")
    capsys.readouterr()  # what training printed (the model, each evaluation, the test accuracy)
    assert main(["classify", "--checkpoint", str(tmp_path / "cls" / "best"), "--input",
                 str(tmp_path / "lines.txt"), "--top", "2"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [row[0] for row in rows] == ["animals", "colours"]
    assert all(abs(float(row[1]) + float(row[3]) - 1) < 1e-3 and float(row[1]) > 0.5 for row in rows)


def test_fine_tuning_starts_from_a_pretrained_tformer_encoder(pretrained, tmp_path) -> None:  # noqa: ANN001
    from tformer.training.checkpoint import load_model

    recipe = classify_recipe(tmp_path, init_from=str(pretrained / "run" / "best"))
    model, tokenizer = build_classifier(recipe, read_labelled(tmp_path / "train.tsv"))
    encoder, _ = load_model(pretrained / "run" / "best")
    for name, tensor in encoder.bert.state_dict().items():
        assert torch.equal(model.bert.state_dict()[name], tensor), name
    assert tokenizer.vocab_size == encoder.config.vocab_size and model.config.label_names == ["animals", "colours"]
    state = train_classifier(recipe, progress=False)
    assert state["test"]["test_accuracy"] >= 0.9


def test_fine_tuning_starts_from_a_hugging_face_bert(tmp_path) -> None:  # noqa: ANN001
    write_labelled(tmp_path / "train.tsv", 50, 0)
    tokenizer = WordPieceTokenizer.train((tmp_path / "train.tsv").read_text().split("\n"), vocab_size=100)
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(config).eval()
    hf.save_pretrained(tmp_path / "hf")
    tokenizer.save(tmp_path / "hf")
    recipe = classify_recipe(tmp_path, init_from=str(tmp_path / "hf"))
    model, ours_tokenizer = build_classifier(recipe, read_labelled(tmp_path / "train.tsv"))
    ids = torch.tensor([[1] + ours_tokenizer.encode("red dog swim") + [2]])
    with torch.no_grad():
        expected = hf.bert(input_ids=ids).pooler_output
        _, pooled = model.eval().bert(ids)
    assert (pooled - expected).abs().max() < 1e-5
