"""Decoder-only language-model pretraining end to end: a recipe (data, model, training, sampling), the task
the training loop runs, and the samples a run writes at its end (writing text with a trained model for a
user is `inference.generate`).

Data: the documents of the training split are tokenized and joined into one stream, each document preceded
by </s> (so every document starts after a separator, as GPT-2's <|endoftext|>) and the stream closed by one:

    </s> doc_1 </s> doc_2 </s> ... doc_n </s>

Blocks of block_size + 1 consecutive tokens are cut from it with stride block_size; a block's first
block_size tokens are the input and its last block_size the targets (shifted by one), so every token is a
target once. Each epoch starts the cut at a random offset (below block_size) and shuffles the blocks, both
drawn from (seed, epoch), so an epoch's batches are fixed and a resumed run sees the same order.

Validation covers its whole text (the last block padded, padding ignored): valid_loss is nats per token,
valid_ppl = exp(valid_loss), and bits_per_char = total nats / ln 2 / characters, where the characters are
those of the validation documents plus one per </s> target (the separator counts as one character, as a
newline does in enwik8), so the figure compares across tokenizers.

Distillation (`distill.teacher`: a trained GPT's checkpoint): the loss adds the teacher's next-token distribution
to the text's (`training.losses.distillation_loss`), the run takes the teacher's tokenizer (data.tokenizer and
data.vocab_size are not used), and evaluation also reports `agreement`, the share of validation tokens where
the student's likeliest next token is the teacher's: the rate at which a greedy speculative round accepts a
draft token (`decoding.speculative`). That is how a draft for a GPT is best trained.

A run directory holds `recipe.yaml`, `metrics.jsonl`, the checkpoints `last/` and `best/`, and
`samples.txt` (text sampled at the end).

B batch (blocks), T block_size, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from tformer.checkpoints import load_config, load_model
from tformer.config import GPTConfig, family_of
from tformer.data.device import device_of
from tformer.data.text import load_text_corpus, read_texts
from tformer.decoding.generate import check_max_new_tokens
from tformer.decoding.search import sample
from tformer.decoding.settings import SampleConfig
from tformer.errors import UserError
from tformer.files import write_atomic
from tformer.models.presets import build_model, preset
from tformer.runs import RunDir
from tformer.tasks.base import ModelSpec, Resume, Setup, check_recipe, run_task, token_loss, token_nll
from tformer.tokenization import Tokenizer, load_tokenizer
from tformer.tokenization.bpe import BPETokenizer
from tformer.tokenization.char import CharTokenizer
from tformer.training.config import TrainConfig
from tformer.training.distributed import launched_world
from tformer.training.losses import distillation_loss
from tformer.training.optim import OptimConfig
from tformer.training.schedules import ScheduleConfig

SPLITS = ("train", "valid", "test")
CORPORA = ("bible", "bbc", "files")
TOKENIZERS = ("char", "bpe")
EVAL_METRICS = ("valid_loss", "valid_ppl", "bits_per_char")  # what LMTask.evaluate reports
DISTILL_METRICS = ("agreement",)  # and, with a teacher, this


@dataclass(kw_only=True)
class LMDataConfig:
    corpus: str = "bible"  # "bible" (World English Bible), "bbc" (BBC News), or "files" (your paths)
    paths: list[str] | None = None  # files: training text (.txt files, directories of them, .jsonl)
    valid_paths: list[str] | None = None  # files: validation text
    test_paths: list[str] | None = None  # files: test text (optional)
    tokenizer: str = "char"  # "char" or "bpe" (byte-level BPE), trained on the training split
    vocab_size: int = 8000  # bpe only; a char vocabulary is every character of the training text
    block_size: int = 256  # context length n: input tokens of one block
    batch_size: int = 32  # blocks per micro-batch
    eval_tokens: int | None = None  # evaluate on the first validation documents up to about this many tokens

    def __post_init__(self) -> None:
        if self.corpus not in CORPORA:
            raise UserError(f"data.corpus={self.corpus!r} is not allowed; choose one of {', '.join(CORPORA)}")
        if self.corpus == "files" and not (self.paths and self.valid_paths):
            raise UserError("data.corpus='files' needs data.paths and data.valid_paths (.txt, directories, .jsonl)")
        if self.tokenizer not in TOKENIZERS:
            raise UserError(f"data.tokenizer={self.tokenizer!r} is not allowed; choose one of {', '.join(TOKENIZERS)}")
        for name in ("vocab_size", "block_size", "batch_size"):
            if getattr(self, name) < 1:
                raise UserError(f"data.{name}={getattr(self, name)} must be a positive integer")
        if self.eval_tokens is not None and self.eval_tokens < 1:
            raise UserError(f"data.eval_tokens={self.eval_tokens} must be a positive integer or null")


@dataclass(frozen=True, kw_only=True)
class SampleSection(SampleConfig):
    """A recipe's `sample:` section: what to write after training (its prompts, each continued by at most
    `max_new_tokens` tokens) and how (`decoding.SampleConfig`'s keys; a recipe samples at temperature 0.8
    among the 40 likeliest tokens unless it says otherwise: `RECIPE_SAMPLING`)."""

    prompts: list[str] = field(default_factory=lambda: [""])  # "" starts a new document
    max_new_tokens: int = 200

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            check_max_new_tokens(self.max_new_tokens)
        except ValueError as e:
            raise UserError(f"sample.{e}") from None


@dataclass(kw_only=True)
class DistillConfig:
    """A recipe's `distill:` section: the teacher GPT whose next-token distributions the model also learns
    (none: plain language modelling), the teacher term's share of the loss, and the softening temperature tau. The
    text's term is the task's own cross entropy (label-smoothed as train.label_smoothing says)."""

    teacher: str | None = None  # a GPT checkpoint directory (e.g. runs/gpt-bible/best); its tokenizer is the run's
    weight: float = 1.0  # w: loss = (1 - w) * cross entropy on the text + w * tau^2 * KL(teacher || model)
    tau: float = 1.0  # the temperature both distributions are softened by: softmax(logits / tau)

    def __post_init__(self) -> None:
        if self.teacher is not None and (not isinstance(self.teacher, str) or not self.teacher.strip()):
            raise UserError(f"distill.teacher={self.teacher!r} must name a GPT checkpoint directory, or be null")
        if not 0.0 <= self.weight <= 1.0:
            raise UserError(f"distill.weight={self.weight!r} must be in [0, 1] (the teacher term's share of the loss)")
        if not self.tau > 0:
            raise UserError(f"distill.tau={self.tau!r} must be > 0 (the softening temperature)")


RECIPE_SAMPLING = dict(temperature=0.8, top_k=40)  # a recipe's sampling unless its sample: section says


def _lm_train_config() -> TrainConfig:
    """Language-model defaults: plain cross entropy, AdamW (decay 0.1, betas 0.9 / 0.95), warm-up + cosine."""
    return TrainConfig(label_smoothing=0.0, optim=OptimConfig(name="adamw", lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                                                              weight_decay=0.1, clip_norm=1.0),
                       schedule=ScheduleConfig(name="cosine", warmup=100, total_steps=1000, min_ratio=0.1))


@dataclass(kw_only=True)
class LMRecipe:
    METRICS = EVAL_METRICS + DISTILL_METRICS  # what train.best_metric may name

    task: str = "lm"
    out_dir: str = "runs/lm"
    data: LMDataConfig = field(default_factory=LMDataConfig)
    model: ModelSpec = field(default_factory=lambda: ModelSpec(preset="gpt-tiny"))
    train: TrainConfig = field(default_factory=_lm_train_config)
    sample: SampleSection = field(default_factory=lambda: SampleSection(**RECIPE_SAMPLING))
    distill: DistillConfig = field(default_factory=DistillConfig)

    def __post_init__(self) -> None:
        check_recipe(self)
        if self.train.best_metric in DISTILL_METRICS and self.distill.teacher is None:
            raise UserError(f"train.best_metric={self.train.best_metric} needs a teacher to agree with; set "
                             "distill.teacher or choose one of " + ", ".join(EVAL_METRICS))


def load_split(data: LMDataConfig, split: str) -> list[str]:
    """The documents of one split."""
    if split not in SPLITS:
        raise UserError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    if data.corpus != "files":
        return load_text_corpus(data.corpus, "validation" if split == "valid" else split)
    paths = {"train": data.paths, "valid": data.valid_paths, "test": data.test_paths}[split]
    if not paths:
        raise UserError(f"data.{'paths' if split == 'train' else split + '_paths'} is not set")
    return read_texts(paths)


def train_tokenizer(data: LMDataConfig, texts: list[str]) -> CharTokenizer | BPETokenizer:
    if data.tokenizer == "char":
        return CharTokenizer.train(texts)
    return BPETokenizer.train(texts, vocab_size=data.vocab_size)


def load_teacher(distill: DistillConfig, *, block_size: int) -> tuple[nn.Module, Tokenizer]:
    """The teacher GPT (eval mode, frozen, on the CPU) and its tokenizer; a UserError unless `distill.teacher`
    is a GPT checkpoint with a tokenizer that reads blocks of `block_size` tokens."""
    path = Path(str(distill.teacher))
    if not path.is_dir():
        raise UserError(f"distill.teacher={str(path)!r} is not a directory; train the teacher first (for the "
                         "gpt-bible-draft recipe: tformer train gpt-bible) or set distill.teacher=DIR, a GPT "
                         "checkpoint")
    config, _ = load_config(path)
    if family_of(config) != "gpt":
        raise UserError(f"distill.teacher={str(path)!r} holds a {type(config).__name__}, not a GPT; a language "
                         "model learns from a GPT's next-token distributions")
    if config.max_len < block_size:
        raise UserError(f"distill.teacher={str(path)!r} has a context of max_len={config.max_len}, shorter than "
                         f"data.block_size={block_size}; lower data.block_size to at most {config.max_len}")
    tokenizer = load_tokenizer(path)
    if tokenizer.vocab_size != config.vocab_size:
        raise UserError(f"distill.teacher={str(path)!r}: its tokenizer has {tokenizer.vocab_size} tokens and its "
                         f"model {config.vocab_size}; distillation needs one token for each of the model's outputs")
    teacher, _ = load_model(path)
    return teacher.requires_grad_(False), tokenizer


# --- packing --------------------------------------------------------------------------------------------


class LMBatch(NamedTuple):
    inputs: Tensor  # (B, T) token ids
    targets: Tensor  # (B, T) the next token of each input; pad where there is none


def token_stream(docs: list[str], tokenizer: Tokenizer) -> Tensor:
    """</s> doc_1 </s> doc_2 ... doc_n </s> as one (N,) tensor of ids."""
    eos = tokenizer.eos_id
    ids = [eos]
    for doc in tokenizer.encode_batch(docs):
        ids += doc
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def pack_blocks(stream: Tensor, *, block_size: int, offset: int = 0) -> Tensor:
    """Blocks of block_size + 1 tokens with stride block_size, from `offset`; a short tail is left out."""
    return stream[offset:].unfold(0, block_size + 1, block_size)  # (N, T + 1)


def pack_padded(stream: Tensor, *, block_size: int, pad_id: int) -> Tensor:
    """`pack_blocks` keeping the tail: the last block is padded, so every token but the first is a target."""
    n_blocks = max(1, math.ceil((len(stream) - 1) / block_size))
    padded = torch.full((n_blocks * block_size + 1,), pad_id, dtype=torch.long)
    padded[: len(stream)] = stream
    return pack_blocks(padded, block_size=block_size)  # (N, T + 1)


def split_block(blocks: Tensor) -> LMBatch:
    return LMBatch(inputs=blocks[:, :-1], targets=blocks[:, 1:])  # (B, T) each


def epoch_blocks(stream: Tensor, *, block_size: int, seed: int, epoch: int) -> Tensor:
    """The training blocks of one epoch, in training order: a random start offset, then shuffled."""
    rng = np.random.default_rng([seed, epoch])
    offset = int(rng.integers(min(block_size, len(stream) - block_size)))
    blocks = pack_blocks(stream, block_size=block_size, offset=offset)  # (N, T + 1)
    return blocks[torch.from_numpy(rng.permutation(len(blocks)))]


# --- the task -------------------------------------------------------------------------------------------


class LMTask:
    """Shuffled blocks of the training stream; summed next-token cross entropy; validation loss, perplexity
    and bits per character."""

    def __init__(self, recipe: LMRecipe, tokenizer: Tokenizer, *, train_docs: list[str] | None = None,
                 valid_docs: list[str] | None = None, teacher: nn.Module | None = None) -> None:
        self.recipe, self.tokenizer, self.teacher, data = recipe, tokenizer, teacher, recipe.data
        self._choices: list[Tensor] | None = None  # the teacher's on the validation batches (`agreement`)
        self.stream = token_stream(load_split(data, "train") if train_docs is None else train_docs, tokenizer)
        if len(self.stream) < data.block_size + 1:
            raise UserError(f"the training text has {len(self.stream)} tokens; data.block_size="
                             f"{data.block_size} needs at least {data.block_size + 1}")
        docs = self._eval_docs(load_split(data, "valid") if valid_docs is None else valid_docs)
        self.valid_chars = sum(len(d) for d in docs) + len(docs)  # each document's </s> counts as one
        valid = pack_padded(token_stream(docs, tokenizer), block_size=data.block_size, pad_id=tokenizer.pad_id)
        step = data.batch_size
        self.valid_batches = [split_block(valid[i : i + step]) for i in range(0, len(valid), step)]

    def _eval_docs(self, docs: list[str]) -> list[str]:
        """The first documents up to data.eval_tokens tokens (at least one), or all."""
        limit = self.recipe.data.eval_tokens
        if limit is None:
            return docs
        kept, total = [], 0
        for doc, ids in zip(docs, self.tokenizer.encode_batch(docs), strict=True):
            if kept and total + len(ids) + 1 > limit:
                break
            kept.append(doc)
            total += len(ids) + 1
        return kept

    def batches(self, epoch: int) -> list[LMBatch]:
        data = self.recipe.data
        blocks = epoch_blocks(self.stream, block_size=data.block_size, seed=self.recipe.train.seed, epoch=epoch)
        return [split_block(blocks[i : i + data.batch_size]) for i in range(0, len(blocks), data.batch_size)]

    def n_tokens(self, batch: LMBatch) -> int:
        return int((batch.targets != self.tokenizer.pad_id).sum())

    @staticmethod
    def forward(model: nn.Module, batch: LMBatch) -> tuple[Tensor, Tensor]:
        return model(batch.inputs), batch.targets  # (B, T, V), (B, T)

    def loss(self, model: nn.Module, batch: LMBatch) -> Tensor:
        if self.teacher is None:
            return token_loss(model, batch, self.forward, smoothing=self.recipe.train.label_smoothing,
                              pad_id=self.tokenizer.pad_id)
        distill = self.recipe.distill
        with torch.no_grad():
            taught = self._teacher_on(batch.inputs.device)(batch.inputs)  # (B, T, V)
        return distillation_loss(model(batch.inputs), taught, batch.targets, weight=distill.weight,
                                 temperature=distill.tau, ignore_index=self.tokenizer.pad_id,
                                 smoothing=self.recipe.train.label_smoothing)

    def _teacher_on(self, device: torch.device) -> nn.Module:
        if device_of(self.teacher) != device:
            self.teacher.to(device)
        return self.teacher

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        total, count = token_nll(model, self.valid_batches, self.forward, pad_id=self.tokenizer.pad_id)
        metrics = {"valid_loss": total / count, "valid_ppl": math.exp(min(total / count, 700.0)),
                   "bits_per_char": total / math.log(2) / self.valid_chars}
        if self.teacher is not None:
            metrics["agreement"] = self.agreement(model)
        return metrics

    @torch.inference_mode()
    def agreement(self, model: nn.Module) -> float:
        """The share of validation targets where the model's likeliest next token is the teacher's."""
        same, count = 0, 0
        device = device_of(model)
        for batch, taught in zip(self.valid_batches, self._teacher_choices(device), strict=True):
            inputs, counted = batch.inputs.to(device), (batch.targets != self.tokenizer.pad_id).to(device)
            agree = model(inputs).argmax(dim=-1) == taught.to(device)  # (B, T)
            same, count = same + int((agree & counted).sum()), count + int(counted.sum())
        return same / count

    def _teacher_choices(self, device: torch.device) -> list[Tensor]:
        """The teacher's likeliest next token at each validation position, (B, T) a batch: computed at the
        first evaluation and kept (the teacher does not change)."""
        if self._choices is None:
            teacher = self._teacher_on(device)
            self._choices = [teacher(batch.inputs.to(device)).argmax(dim=-1) for batch in self.valid_batches]
        return self._choices


# --- sampling -------------------------------------------------------------------------------------------


def sample_texts(model: nn.Module, tokenizer: Tokenizer, config: SampleSection, *, seed: int = 0) -> list[str]:
    """One continuation per prompt, each prompt read as the start of a new document (after </s>); a
    continuation ends at the next </s> (unless the section says not to stop). A prompt too long for the model
    keeps its last tokens. Drawn with the section's seed, else `seed` (the run's)."""
    limit = model.config.max_len
    max_new = min(config.max_new_tokens, limit - 1)
    prompts = [[tokenizer.eos_id, *tokenizer.encode(p)][-(limit - max_new):] for p in config.prompts]
    if not prompts:
        return []
    settings = config if config.seed is not None else dataclasses.replace(config, seed=seed)
    new = sample(model, prompts, settings, max_new_tokens=max_new, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id)
    return [p + tokenizer.decode(ids) for p, ids in zip(config.prompts, new, strict=True)]


# --- training -------------------------------------------------------------------------------------------


def model_config(recipe: LMRecipe, tokenizer: Tokenizer) -> GPTConfig:
    """The preset with the tokenizer's vocabulary and special ids; max_len raised to block_size if needed.
    bos_id is the token a document starts after: </s>, the separator of the training stream (as GPT-2's
    <|endoftext|>), so `tformer generate` and scoring start documents the way training saw them."""
    ids = dict(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, bos_id=tokenizer.eos_id,
               eos_id=tokenizer.eos_id)
    overrides = {**recipe.model.overrides, **ids}
    config = preset(recipe.model.preset, overrides)
    if not isinstance(config, GPTConfig):
        raise UserError(f"model.preset={recipe.model.preset!r} is not decoder-only; language modelling needs a GPT")
    block = recipe.data.block_size
    if config.max_len < block:
        if "max_len" in recipe.model.overrides:
            raise UserError(f"model.overrides.max_len={config.max_len} is below data.block_size={block}")
        config = preset(recipe.model.preset, {**overrides, "max_len": block})
    return config


def train_lm(recipe: LMRecipe, *, resume: bool | Resume = False, overwrite: bool = False,
             progress: bool = True) -> dict[str, Any]:
    """Train (or resume) the recipe's language model, then sample from it; returns the loop's final state
    with the samples under "samples" (also written to out_dir/samples.txt)."""

    def setup(tokenizer: Tokenizer) -> Setup:
        teacher = None
        if recipe.distill.teacher is not None:
            teacher, taught = load_teacher(recipe.distill, block_size=recipe.data.block_size)
            tokenizer = tokenizer or taught
        train_docs = load_split(recipe.data, "train")
        if tokenizer is None:
            tokenizer = train_tokenizer(recipe.data, train_docs)
        task = LMTask(recipe, tokenizer, train_docs=train_docs, teacher=teacher)
        config = model_config(recipe, tokenizer)
        return Setup(build_model(config), config, task, tokenizer)

    def finish(state: dict[str, Any], built: Setup) -> dict[str, Any]:
        out_dir, model = Path(recipe.out_dir), built.model
        if launched_world().is_distributed:  # the trained weights may be sharded over the ranks: read them whole
            model, _ = load_model(RunDir(out_dir).last)
        samples = sample_texts(model, built.tokenizer, recipe.sample, seed=recipe.train.seed)
        write_atomic(RunDir(out_dir).samples, "".join(f"=== sample {i}\n{s}\n" for i, s in enumerate(samples)))
        if progress:
            for text in samples:
                print(f"--- sample\n{text}")
        return {**state, "samples": samples}

    return run_task(recipe, setup, resume=resume, overwrite=overwrite, progress=progress, finish=finish)
