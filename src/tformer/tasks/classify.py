"""Sequence classification with BERT: [CLS] text [SEP] -> the pooled [CLS] vector -> a linear layer.

Two ways to start: from scratch (a preset, with a WordPiece vocabulary trained on the task's training
text), or fine-tuning a pretrained encoder, `model.init_from`: a tformer pretraining checkpoint (e.g.
`runs/bert/best`) or a Hugging Face BERT directory (config.json, weights, tokenizer.json). Fine-tuning keeps
the encoder's config and tokenizer, adds a fresh classification head, and trains everything.

Data (`tformer.data.labelled`): "bbc" topics, "sentiment" (the VADER movie-review snippets), or your TSV /
JSONL files. Training texts longer than the context keep their first max_len - 2 pieces (classifying a user's
text is `inference.classify`'s, which refuses a longer one unless asked to truncate). The best checkpoint
(by validation accuracy) is scored on the test split at the end: out_dir/test.json.

B batch, T length, C classes.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tformer.checkpoints import load_model
from tformer.config import BertConfig
from tformer.configio import shown
from tformer.data.device import device_of, to_device
from tformer.data.labelled import Labelled, load_bbc_topics, load_sentiment, read_labelled
from tformer.data.nsp import length_batches
from tformer.errors import UserError
from tformer.files import write_atomic
from tformer.inference.classify import ClassBatch, collate_texts, encode_texts
from tformer.inference.loaded import load
from tformer.models.bert import BertClassifier
from tformer.models.presets import preset
from tformer.runs import RunDir
from tformer.tasks.base import ModelSpec, Resume, Setup, check_recipe, run_task
from tformer.tokenization import Tokenizer
from tformer.tokenization.hf import check_vocabulary, load_tokenizer
from tformer.tokenization.wordpiece import WordPieceTokenizer
from tformer.training.config import TrainConfig
from tformer.training.optim import OptimConfig
from tformer.training.schedules import ScheduleConfig

CORPORA = ("bbc", "sentiment", "files")
EVAL_METRICS = ("valid_loss", "accuracy")  # what ClassifyTask.evaluate reports


@dataclass(kw_only=True)
class ClassifyDataConfig:
    corpus: str = "bbc"  # "bbc" (5 topics), "sentiment" (movie snippets), "files"
    train: str | None = None  # files: TSV label<TAB>text or JSONL {"text", "label"}
    valid: str | None = None
    test: str | None = None
    archive: str | None = None  # sentiment: the vaderSentiment-3.3.2 source archive (default: searched)
    vocab_size: int = 8000  # from scratch: the WordPiece vocabulary trained on the training texts
    max_len: int = 128  # [CLS] text [SEP]
    batch_size: int = 32

    def __post_init__(self) -> None:
        if self.corpus not in CORPORA:
            raise UserError(f"data.corpus={self.corpus!r} is not allowed; choose one of {', '.join(CORPORA)}")
        if self.corpus == "files" and not (self.train and self.valid):
            raise UserError("data.corpus='files' needs data.train and data.valid (and data.test to score)")
        for name in ("vocab_size", "batch_size"):
            if getattr(self, name) < 1:
                raise UserError(f"data.{name}={getattr(self, name)} must be a positive integer")
        if self.max_len < 3:
            raise UserError(f"data.max_len={self.max_len} must be at least 3 ([CLS] text [SEP])")


@dataclass(kw_only=True)
class ClassifyModelSpec(ModelSpec):
    init_from: str | None = None  # a tformer BERT checkpoint or a Hugging Face BERT directory (else: preset)


def _classify_train_config() -> TrainConfig:
    return TrainConfig(label_smoothing=0.0, best_metric="accuracy", eval_every=100,
                       optim=OptimConfig(name="adamw", lr=3e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                                         clip_norm=1.0),
                       schedule=ScheduleConfig(name="cosine", warmup=50, total_steps=1000, min_ratio=0.0))


@dataclass(kw_only=True)
class ClassifyRecipe:
    METRICS = EVAL_METRICS  # what train.best_metric may name

    task: str = "classify"
    out_dir: str = "runs/classify"
    data: ClassifyDataConfig = field(default_factory=ClassifyDataConfig)
    model: ClassifyModelSpec = field(default_factory=lambda: ClassifyModelSpec(preset="bert-tiny"))
    train: TrainConfig = field(default_factory=_classify_train_config)

    def __post_init__(self) -> None:
        check_recipe(self)


def load_split(data: ClassifyDataConfig, split: str, *, names: list[str] | None = None) -> Labelled:
    """One split ("train", "validation", "test") of the recipe's labelled data."""
    if data.corpus == "bbc":
        return load_bbc_topics(split)
    if data.corpus == "sentiment":
        return load_sentiment(split, archive=data.archive)
    path = {"train": data.train, "validation": data.valid, "test": data.test}[split]
    if path is None:
        raise UserError(f"data.{'valid' if split == 'validation' else split} is not set")
    return read_labelled(path, names=names)


# --- the task ------------------------------------------------------------------------------------------


class ClassifyTask:
    """Length-sorted batches of [CLS] text [SEP]; cross entropy per example; validation accuracy."""

    def __init__(self, recipe: ClassifyRecipe, tokenizer: Tokenizer, train: Labelled, valid: Labelled) -> None:
        self.recipe, self.tokenizer = recipe, tokenizer
        self.train_rows = encode_texts(tokenizer, train.texts, recipe.data.max_len)
        self.train_labels = train.labels
        self.valid_batches = make_batches(tokenizer, valid, recipe.data)

    def batches(self, epoch: int) -> list[ClassBatch]:
        rng = np.random.default_rng([self.recipe.train.seed, epoch])
        order = length_batches([len(r) for r in self.train_rows], batch_size=self.recipe.data.batch_size, rng=rng)
        return [collate_texts([self.train_rows[i] for i in idx], [self.train_labels[i] for i in idx],
                              pad_id=self.tokenizer.pad_id) for idx in order]

    def n_tokens(self, batch: ClassBatch) -> int:
        return len(batch.labels)  # the loss is per example

    def loss(self, model: nn.Module, batch: ClassBatch) -> Tensor:
        return F.cross_entropy(model(batch.ids, valid=batch.valid), batch.labels, reduction="sum")

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return accuracy(model, self.valid_batches)


def make_batches(tokenizer: Tokenizer, data: Labelled, config: ClassifyDataConfig) -> list[ClassBatch]:
    rows = encode_texts(tokenizer, data.texts, config.max_len)
    order = length_batches([len(r) for r in rows], batch_size=config.batch_size, rng=None)
    return [collate_texts([rows[i] for i in idx], [data.labels[i] for i in idx], pad_id=tokenizer.pad_id)
            for idx in order]


@torch.inference_mode()
def accuracy(model: nn.Module, batches: list[ClassBatch]) -> dict[str, float]:
    nll, correct, count = 0.0, 0, 0
    for batch in batches:
        batch = to_device(batch, device_of(model))
        logits = model(batch.ids, valid=batch.valid)  # (B, C)
        nll += float(F.cross_entropy(logits, batch.labels, reduction="sum"))
        correct += int((logits.argmax(-1) == batch.labels).sum())
        count += len(batch.labels)
    return {"valid_loss": nll / count, "accuracy": correct / count}


# --- the model -----------------------------------------------------------------------------------------


def pretrained_encoder(path: str | Path) -> tuple[nn.Module, BertConfig, Tokenizer]:
    """(the encoder `Bert` module, its config, its tokenizer) of a tformer or Hugging Face BERT checkpoint."""
    path = Path(path)
    if not (path / "config.json").is_file():  # a tformer checkpoint
        loaded = load(path)
        model, config, tokenizer = loaded.model, loaded.config, loaded.tokenizer
    else:  # a Hugging Face directory
        from tformer.interop import from_hf

        model, config = from_hf(path)
        tokenizer = load_tokenizer(path)
        check_vocabulary(tokenizer, config.vocab_size, where=f"model.init_from={str(path)!r}")
    if not isinstance(config, BertConfig) or not hasattr(model, "bert"):
        raise UserError(f"model.init_from={str(path)!r} holds a {type(config).__name__}, not a BERT")
    return model.bert, config, tokenizer


def build_classifier(recipe: ClassifyRecipe, train: Labelled, *,
                     tokenizer: Tokenizer | None = None) -> tuple[BertClassifier, Tokenizer]:
    """The classifier (fresh head; encoder pretrained or fresh) and its tokenizer: the pretrained one, else
    `tokenizer` (a resumed run's), else one trained on the training texts."""
    labels = dict(n_labels=len(train.names), label_names=list(train.names))
    if recipe.model.init_from:
        encoder, config, tokenizer = pretrained_encoder(recipe.model.init_from)
        config = dataclasses.replace(config, **labels)
        model = BertClassifier(config)
        model.bert.load_state_dict(encoder.state_dict())
        return model, tokenizer
    tokenizer = tokenizer or WordPieceTokenizer.train(train.texts, vocab_size=recipe.data.vocab_size)
    overrides = {**recipe.model.overrides, **labels, "vocab_size": tokenizer.vocab_size, "pad_id": tokenizer.pad_id}
    overrides.setdefault("max_len", recipe.data.max_len)
    config = preset(recipe.model.preset, overrides)
    if not isinstance(config, BertConfig):
        raise UserError(f"model.preset={recipe.model.preset!r} is not a BERT; classification needs an encoder")
    return BertClassifier(config), tokenizer


def check_labels(train: Labelled, data: ClassifyDataConfig) -> None:
    """A classifier learns to tell labels apart: training data of one label would give a model that always
    answers it (with "accuracy 1.000" on validation data of that label)."""
    if len(train.names) < 2:
        where = f"data.train={data.train}" if data.corpus == "files" else f"data.corpus={data.corpus}"
        raise UserError(f"{where} has 1 label ({shown(train.names[0]) if train.names else 'none'}); a classifier "
                         "needs training examples of at least 2 labels")


def train_classifier(recipe: ClassifyRecipe, *, resume: bool | Resume = False, overwrite: bool = False,
                     progress: bool = True) -> dict[str, Any]:
    """Train (or resume) the classifier, then score its best checkpoint on the test split (if there is one)."""
    train = load_split(recipe.data, "train")
    check_labels(train, recipe.data)
    scored = not (recipe.data.corpus == "files" and not recipe.data.test)
    test = load_split(recipe.data, "test", names=train.names) if scored else None  # read before the training

    def setup(tokenizer: Tokenizer | None) -> Setup:
        valid = load_split(recipe.data, "validation", names=train.names)
        model, tokenizer = build_classifier(recipe, train, tokenizer=tokenizer)
        if model.config.max_len < recipe.data.max_len:
            raise UserError(f"data.max_len={recipe.data.max_len} exceeds the model's max_len={model.config.max_len}")
        return Setup(model, model.config, ClassifyTask(recipe, tokenizer, train, valid), tokenizer)

    def finish(state: dict[str, Any], built: Setup) -> dict[str, Any]:
        if test is None:
            return state
        run = RunDir(recipe.out_dir)
        best, _ = load_model(run.best)
        result = {"test_accuracy": accuracy(best, make_batches(built.tokenizer, test, recipe.data))["accuracy"],
                  "test_examples": len(test.texts), "best_valid_accuracy": state["best"], "steps": state["step"],
                  "train_minutes": state["elapsed"] / 60}
        write_atomic(run.results("test"), json.dumps(result, indent=2) + "\n")
        if progress:
            print(f"test accuracy {result['test_accuracy']:.4f} on {len(test.texts)} examples")
        return {**state, "test": result}

    return run_task(recipe, setup, resume=resume, overwrite=overwrite, progress=progress, finish=finish)


