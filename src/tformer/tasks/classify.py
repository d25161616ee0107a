"""Sequence classification with BERT: [CLS] text [SEP] -> the pooled [CLS] vector -> a linear layer.

Two ways to start: from scratch (a preset, with a WordPiece vocabulary trained on the task's training
text), or fine-tuning a pretrained encoder, `model.init_from`: a tformer pretraining checkpoint (e.g.
`runs/bert/best`) or a Hugging Face BERT directory (config.json, weights, tokenizer.json). Fine-tuning keeps
the encoder's config and tokenizer, adds a fresh classification head, and trains everything.

Data (`tformer.data.labelled`): "bbc" topics, "sentiment" (the VADER movie-review snippets), or your TSV /
JSONL files. Texts longer than the context keep their first max_len - 2 pieces. The best checkpoint (by
validation accuracy) is scored on the test split at the end: out_dir/test.json.

B batch, T length, C classes.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tformer.config import BertConfig
from tformer.data.device import device_of, to_device
from tformer.data.labelled import Labelled, load_bbc_topics, load_sentiment, read_labelled
from tformer.data.nsp import length_batches
from tformer.models.bert import BertClassifier
from tformer.models.presets import preset
from tformer.tokenization.hf import check_vocabulary, load_tokenizer
from tformer.tokenization.wordpiece import WordPieceTokenizer
from tformer.training.checkpoint import load_model, tokenizer_dir
from tformer.training.distributed import launched_world
from tformer.training.loop import TrainConfig, fit
from tformer.training.optim import OptimConfig
from tformer.training.schedules import ScheduleConfig

CORPORA = ("bbc", "sentiment", "files")


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
            raise ValueError(f"data.corpus={self.corpus!r} is not allowed; choose one of {', '.join(CORPORA)}")
        if self.corpus == "files" and not (self.train and self.valid):
            raise ValueError("data.corpus='files' needs data.train and data.valid (and data.test to score)")
        for name in ("vocab_size", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"data.{name}={getattr(self, name)} must be a positive integer")
        if self.max_len < 3:
            raise ValueError(f"data.max_len={self.max_len} must be at least 3 ([CLS] text [SEP])")


@dataclass(kw_only=True)
class ClassifyModelSpec:
    preset: str = "bert-tiny"  # from scratch
    overrides: dict = field(default_factory=dict)
    init_from: str | None = None  # a tformer BERT checkpoint or a Hugging Face BERT directory


def _classify_train_config() -> TrainConfig:
    return TrainConfig(label_smoothing=0.0, best_metric="accuracy", eval_every=100,
                       optim=OptimConfig(name="adamw", lr=3e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                                         clip_norm=1.0),
                       schedule=ScheduleConfig(name="cosine", warmup=50, total_steps=1000, min_ratio=0.0))


@dataclass(kw_only=True)
class ClassifyRecipe:
    task: str = "classify"
    out_dir: str = "runs/classify"
    data: ClassifyDataConfig = field(default_factory=ClassifyDataConfig)
    model: ClassifyModelSpec = field(default_factory=ClassifyModelSpec)
    train: TrainConfig = field(default_factory=_classify_train_config)


def load_split(data: ClassifyDataConfig, split: str, *, names: list[str] | None = None) -> Labelled:
    """One split ("train", "validation", "test") of the recipe's labelled data."""
    if data.corpus == "bbc":
        return load_bbc_topics(split)
    if data.corpus == "sentiment":
        return load_sentiment(split, archive=data.archive)
    path = {"train": data.train, "validation": data.valid, "test": data.test}[split]
    if path is None:
        raise ValueError(f"data.{'valid' if split == 'validation' else split} is not set")
    return read_labelled(path, names=names)


# --- the task ------------------------------------------------------------------------------------------


class ClassBatch(NamedTuple):
    ids: Tensor  # (B, T) [CLS] text [SEP], padded
    valid: Tensor  # (B, T)
    labels: Tensor  # (B,)


def encode_texts(tokenizer: Any, texts: list[str], max_len: int) -> list[list[int]]:
    """[CLS] pieces [SEP] per text, the pieces cut to max_len - 2."""
    return [[tokenizer.bos_id, *ids[: max_len - 2], tokenizer.eos_id] for ids in tokenizer.encode_batch(texts)]


def collate_texts(rows: list[list[int]], labels: list[int], *, pad_id: int) -> ClassBatch:
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    valid = torch.arange(width) < torch.tensor([len(r) for r in rows])[:, None]  # (B, T)
    return ClassBatch(ids, valid, torch.tensor(labels))


class ClassifyTask:
    """Length-sorted batches of [CLS] text [SEP]; cross entropy per example; validation accuracy."""

    def __init__(self, recipe: ClassifyRecipe, tokenizer: Any, train: Labelled, valid: Labelled) -> None:
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


def make_batches(tokenizer: Any, data: Labelled, config: ClassifyDataConfig) -> list[ClassBatch]:
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


def pretrained_encoder(path: str | Path) -> tuple[nn.Module, BertConfig, Any]:
    """(the encoder `Bert` module, its config, its tokenizer) of a tformer or Hugging Face BERT checkpoint."""
    path = Path(path)
    if (path / "config.json").is_file():  # a Hugging Face directory
        from tformer.interop import from_hf

        model, config = from_hf(path)
        tokenizer_path = path
    else:
        model, config = load_model(path)
        tokenizer_path = tokenizer_dir(path)
    if not isinstance(config, BertConfig) or not hasattr(model, "bert"):
        raise ValueError(f"model.init_from={str(path)!r} holds a {type(config).__name__}, not a BERT")
    if tokenizer_path is None:
        raise ValueError(f"model.init_from={str(path)!r} has no tokenizer")
    tokenizer = load_tokenizer(tokenizer_path)
    check_vocabulary(tokenizer, config.vocab_size, where=f"model.init_from={str(path)!r}")
    return model.bert, config, tokenizer


def build_classifier(recipe: ClassifyRecipe, train: Labelled, *,
                     tokenizer: WordPieceTokenizer | None = None) -> tuple[BertClassifier, Any]:
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
        raise ValueError(f"model.preset={recipe.model.preset!r} is not a BERT; classification needs an encoder")
    return BertClassifier(config), tokenizer


def train_classifier(recipe: ClassifyRecipe, *, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train (or resume) the classifier, then score its best checkpoint on the test split (if there is one)."""
    out_dir = Path(recipe.out_dir)
    torch.manual_seed(recipe.train.seed)
    train = load_split(recipe.data, "train")
    valid = load_split(recipe.data, "validation", names=train.names)
    saved = load_tokenizer(tokenizer_dir(out_dir / "last") or out_dir / "last") if resume else None
    model, tokenizer = build_classifier(recipe, train, tokenizer=saved)
    if model.config.max_len < recipe.data.max_len:
        raise ValueError(f"data.max_len={recipe.data.max_len} exceeds the model's max_len={model.config.max_len}")
    task = ClassifyTask(recipe, tokenizer, train, valid)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = fit(model, model.config, task, recipe.train, out_dir=out_dir, tokenizer=tokenizer, resume=resume,
                progress=progress, recipe=recipe)
    if state.get("interrupted") or not launched_world().is_main:
        return state
    if recipe.data.corpus != "files" or recipe.data.test:
        test = load_split(recipe.data, "test", names=train.names)
        best, _ = load_model(out_dir / "best")
        result = {"test_accuracy": accuracy(best, make_batches(tokenizer, test, recipe.data))["accuracy"],
                  "test_examples": len(test.texts), "best_valid_accuracy": state["best"], "steps": state["step"],
                  "train_minutes": state["elapsed"] / 60}
        (out_dir / "test.json").write_text(json.dumps(result, indent=2) + "\n")
        state["test"] = result
        if progress:
            print(f"test accuracy {result['test_accuracy']:.4f} on {len(test.texts)} examples")
    return state


@torch.inference_mode()
def classify(model: BertClassifier, tokenizer: Any, texts: list[str], *, batch_size: int = 64) -> Tensor:
    """Class probabilities (N, C) of `texts`, in input order."""
    rows = encode_texts(tokenizer, texts, model.config.max_len)
    out = torch.empty(len(rows), model.config.n_labels)
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        batch = collate_texts(chunk, [0] * len(chunk), pad_id=tokenizer.pad_id)
        out[start : start + len(chunk)] = model(batch.ids, valid=batch.valid).softmax(-1)
    return out
