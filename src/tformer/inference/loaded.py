"""A trained checkpoint loaded once for use: the model (in eval mode, placed, perhaps quantized), its config,
its tokenizer, what kind of model it is, and the model held for decoding with the state that decoding keeps
(`decoding.Decoder`), together in a `Loaded`.

Every command that uses a trained model (translate, generate, score, classify, plot attention, serve) loads
it through `load`, which checks what it can before it reads the weights: the placement (--device, --dtype,
--int8) and, for a command, the kind of checkpoint it takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from tformer.checkpoints import build_saved, load_config, load_weights, read_consistently, tokenizer_dir
from tformer.config import ModelConfig, family_of
from tformer.data.device import check_placement, device_of, place
from tformer.decoding.decoder import Decoder
from tformer.decoding.speculative import DRAFT_TOKENS, Draft, check_draft_tokens
from tformer.errors import UserError, allocating
from tformer.quant import check_mode, quantize
from tformer.tokenization import Tokenizer, check_vocabulary, load_tokenizer

# command -> (the kinds of checkpoint it takes, how its refusal of another kind reads)
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "translate": (("seq2seq",), "holds a {config}, not an encoder-decoder; translate needs a seq2seq checkpoint"),
    "evaluate": (("seq2seq",), "holds a {config}, not an encoder-decoder; evaluate needs a seq2seq checkpoint"),
    "generate": (("gpt",), "holds a {config}; generate needs a GPT"),
    "score": (("gpt", "seq2seq"), "holds a {config}; score needs a GPT or an encoder-decoder"),
    "classify": (("bert classifier",), "holds a {model}; classify needs a BertClassifier (train one with task: "
                                       "classify)"),
}


@dataclass(kw_only=True)
class Loaded:
    """A checkpoint ready to use. `decoder` holds the model with its decoding state (`decoding.Decoder`: the
    CPU weight layout, the captured steps on a GPU) from one decoding call to the next, so that a server or a
    file of batches makes each copy and captures each shape once; it goes with this object."""

    path: str
    model: nn.Module  # in eval mode
    config: ModelConfig
    tokenizer: Tokenizer
    kind: str  # seq2seq, gpt, bert, bert classifier (`checkpoint_kind`)
    dtype: str = "float32"  # what the weights were loaded as
    quantization: str | None = None  # "int8": linear layers quantized at load (`tformer.quant`)
    draft: Draft | None = None  # a GPT's draft model for speculative decoding where it applies (`load_draft`)
    decoder: Decoder = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.decoder = Decoder(self.model)


def checkpoint_kind(config: ModelConfig, model_class: str = "") -> str:
    """What a checkpoint holds, in the words the commands use: its family (seq2seq, gpt, bert), "seq2seq"
    for an RNN encoder-decoder too (it translates and scores as the Transformer's does), or "bert classifier"
    for a BERT with a classification head."""
    family = family_of(config)
    if family == "rnn":
        return "seq2seq"
    return "bert classifier" if family == "bert" and model_class == "BertClassifier" else family


def check_kind(path: str | Path, command: str) -> str:
    """The kind of checkpoint `path` holds; a ValueError unless `command` takes it, saying what it holds
    and which commands take that. Reads only config.yaml, so a command can check before anything else."""
    config, model_class = load_config(path)
    return _check_kind(path, config, model_class, command)


def _check_kind(path: str | Path, config: ModelConfig, model_class: str, command: str) -> str:
    kind = checkpoint_kind(config, model_class)
    takes, refusal = NEEDS[command]
    if kind in takes:
        return kind
    held = refusal.format(config=type(config).__name__, model=model_class or kind)
    users = [c for c, (kinds, _) in NEEDS.items() if kind in kinds]
    use = f"tformer {' / '.join(users)}" if users else "fine-tuning a classifier (task: classify, model.init_from)"
    raise UserError(f"checkpoint {path} {held}; a {kind} checkpoint is for {use}")


def load(path: str | Path, *, command: str | None = None, device: str = "cpu", dtype: str = "float32",
         quantization: str | None = None) -> Loaded:
    """The checkpoint directory `path` (trained here or imported with `tformer convert --from-hf`), loaded.

    With `command` (a key of NEEDS), a checkpoint of a kind that command does not take is refused first. The
    tokenizer must make no id the model has no embedding for (an encoder-decoder's one tokenizer serves both
    sides, so it must fit the smaller vocabulary). The model is placed on `device` in `dtype`
    (`data.device.place`; "auto": a GPU if there is one); `quantization` ("int8", or None) is applied in
    memory once loaded, in float32 on the CPU only (so "auto" means the CPU for it); the files stay fp32.
    All of these are checked before anything loads."""
    if quantization is not None and device == "auto":
        device = "cpu"
    where, _ = check_placement(device=device, dtype=dtype)
    if quantization is not None:
        check_mode(quantization)
        if where.type != "cpu" or dtype != "float32":
            raise UserError(f"--int8 runs in float32 on the CPU only (got --device {device} --dtype {dtype}); "
                             "drop --int8, or use --device cpu --dtype float32")

    def read() -> tuple[nn.Module, ModelConfig, Tokenizer]:  # a checkpoint a training replaces: whole, old or new
        config, model_class = load_config(path)  # read once: the kind, then the model
        if command is not None:
            _check_kind(path, config, model_class, command)
        with allocating("loading the model"):
            model = build_saved(path, config, model_class)
            load_weights(model, path)
        if tokenizer_dir(path) is None:
            raise UserError(f"checkpoint {path} has no tokenizer/ directory")
        tokenizer = load_tokenizer(path)
        shared = min(config.vocab_size, getattr(config, "src_vocab_size", None) or config.vocab_size)
        check_vocabulary(tokenizer, shared, where=f"checkpoint {path}")
        return model, config, tokenizer

    model, config, tokenizer = read_consistently(path, read)
    with allocating("loading the model"):
        model = place(model, device=str(where), dtype=dtype)
    if quantization is not None:
        quantize(model, quantization)
    return Loaded(path=str(path), model=model.eval(), config=config, tokenizer=tokenizer,
                  kind=checkpoint_kind(config, type(model).__name__), dtype=dtype, quantization=quantization)


def load_draft(path: str | Path, target: Loaded, *, tokens: int = DRAFT_TOKENS) -> Draft:
    """The checkpoint at `path` as a draft for `target`'s speculative decoding (`decoding.speculative`),
    proposing `tokens` tokens a round, placed as the target is (device, dtype, int8). Before its weights are
    read, a UserError unless the target and the draft are both GPTs, the draft's tokenizer is the target's (the
    same token for every id) and its context is at least the target's."""
    check_draft_tokens(tokens, what="--draft-tokens")
    if target.kind != "gpt":
        raise UserError(f"--draft is for a GPT; checkpoint {target.path} holds a {type(target.config).__name__}, "
                         "which writes no text a draft could propose")
    config, model_class = load_config(path)
    if checkpoint_kind(config, model_class) != "gpt":
        raise UserError(f"draft checkpoint {path} holds a {type(config).__name__}, not a GPT; a draft is a small GPT "
                         f"trained with the target's tokenizer (e.g. tformer train gpt-bible-draft)")
    if tokenizer_dir(path) is None:
        raise UserError(f"checkpoint {path} has no tokenizer/ directory")
    differs = tokenizer_difference(target.tokenizer, load_tokenizer(path), config.vocab_size, target.config.vocab_size)
    if differs:
        raise UserError(f"draft checkpoint {path} does not share the target's vocabulary: {differs}; train the draft "
                         "with the target's tokenizer (the same data: section)")
    if config.max_len < target.config.max_len:
        raise UserError(f"draft checkpoint {path} has a context of max_len={config.max_len}, shorter than the "
                         f"target's max_len={target.config.max_len}; train the draft with at least the target's")
    loaded = load(path, device=str(device_of(target.model)), dtype=target.dtype, quantization=target.quantization)
    return Draft(loaded.decoder, tokens, str(path))


def tokenizer_difference(target: Tokenizer, draft: Tokenizer, draft_vocab: int, target_vocab: int) -> str | None:
    """How the draft's vocabulary differs from the target's (the model's size, the tokenizer's kind, size or
    first token that differs), or None when they are the same."""
    if draft_vocab != target_vocab:
        return f"its model has vocab_size={draft_vocab}, the target's {target_vocab}"
    if type(draft) is not type(target) or draft.vocab_size != target.vocab_size:
        return (f"its tokenizer is a {type(draft).__name__} of {draft.vocab_size} tokens, the target's a "
                f"{type(target).__name__} of {target.vocab_size}")
    i = next((i for i in range(target.vocab_size) if draft.token(i) != target.token(i)), None)
    return None if i is None else f"its id {i} is {draft.token(i)!r}, the target's {target.token(i)!r}"


__all__ = ["NEEDS", "Loaded", "check_kind", "checkpoint_kind", "load", "load_draft", "tokenizer_difference"]
