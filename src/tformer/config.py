"""Typed model configurations, validated when built.

The notes' names for the hyperparameters, and ours:
    d  width                 d_model
    m  feed-forward width    d_ff
    k  head width            head_dim      (derived: d / h)
    h  heads                 n_heads
    L  depth                 n_layers      (encoder-decoder: n_layers encoder, n_decoder_layers decoder)
    n  context               max_len
The families: seq2seq, bert and gpt are Transformers (`TransformerConfig`); rnn is the road to them, an RNN
encoder-decoder with or without attention (`RNNSeq2SeqConfig`), which shares no part of a Transformer.
Dropout, initialisation, norm and positions are nested sub-configs. L2 / weight decay and the learning rate
belong to training (`tformer.training`), not to the model.

Every config is a keyword-only dataclass; `__post_init__` derives the rest and raises `ValueError` naming
the bad value and what is allowed. A choice among names is a `Literal[...]` type, the one list of what it
allows. `from_dict` (of `tformer.configio`, the generic loader) builds one from nested plain dicts (YAML),
rejecting unknown keys, wrong types and values outside a `Literal`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal, get_args

from tformer.configio import check_finite, check_literals, from_dict, to_dict, with_default
from tformer.errors import UserError

Activation = Literal["relu", "relu2", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"]
NormKind = Literal["layernorm", "rmsnorm"]
Placement = Literal["post", "pre"]
PositionKind = Literal["sinusoidal", "learned", "none", "rope", "alibi"]
SinusoidLayout = Literal["interleaved", "split"]
InitKind = Literal["xavier", "normal"]
AttentionKind = Literal["sdpa", "eager", "windowed", "sparse", "lowrank", "linear", "lsh", "ssm"]
SparsePattern = Literal["strided", "fixed"]
RNNCell = Literal["lstm", "gru"]
MatchKind = Literal["none", "dot", "general", "additive", "cosine"]  # an RNN decoder's attention

ACTIVATIONS = get_args(Activation)
NORM_KINDS = get_args(NormKind)
PLACEMENTS = get_args(Placement)
POSITION_KINDS = get_args(PositionKind)
SINUSOID_LAYOUTS = get_args(SinusoidLayout)
INIT_KINDS = get_args(InitKind)
ATTENTION_KINDS = get_args(AttentionKind)
EXACT_KINDS = ("sdpa", "eager")
SPARSE_PATTERNS = get_args(SparsePattern)
RNN_CELLS = get_args(RNNCell)
MATCH_KINDS = get_args(MatchKind)


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{name}={value!r} must be a positive integer")


def _token_ids(config: object, names: tuple[str, ...]) -> None:
    """Each of `config`'s special token ids `names` inside its vocabulary."""
    vocab = config.vocab_size
    for name in names:
        value = getattr(config, name)
        if not 0 <= value < vocab:
            raise UserError(f"{name}={value} must be in [0, vocab_size={vocab})")


def _probability(name: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise UserError(f"{name}={value!r} must be in [0, 1)")


@dataclass(kw_only=True)
class NormConfig:
    """Which norm, and where: post-LN `norm(x + f(x))` as in the paper, or pre-LN `x + f(norm(x))`."""

    DERIVED = ("final",)  # filled in by __post_init__ when left None

    kind: NormKind = "layernorm"
    eps: float = 1e-5
    placement: Placement = "post"
    final: bool | None = None  # a norm after the last layer; None: only for pre-LN, where it is needed

    def __post_init__(self) -> None:
        check_literals(self, where="norm.")  # kind, placement
        check_finite(self, where="norm.")
        if not self.eps > 0:
            raise UserError(f"norm.eps={self.eps!r} must be > 0")
        if self.final is None:
            self.final = self.placement == "pre"


@dataclass(kw_only=True)
class PositionConfig:
    """How tokens learn their order: added to the embeddings (sinusoidal, learned) or inside attention
    (RoPE rotates queries and keys, ALiBi biases the scores)."""

    SHORTHAND = "kind"

    kind: PositionKind = "sinusoidal"
    sinusoid_layout: SinusoidLayout = "interleaved"  # paper: sin on even dims, cos on odd; "split": sin half | cos half
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        check_literals(self, where="positions.")  # kind, sinusoid_layout
        check_finite(self, where="positions.")
        if not self.rope_theta > 0:
            raise UserError(f"positions.rope_theta={self.rope_theta!r} must be > 0")


@dataclass(kw_only=True)
class AttentionConfig:
    """Which token mixer every self-attention layer uses; cross-attention is always exact. A plain string
    is short for the kind (`attention: windowed`). Each kind reads only its own options:

    sdpa, eager  exact softmax(QK^T / sqrt(k)) V; sdpa is PyTorch's fused kernel, eager the reference
    windowed     restricted self-attention: query i sees keys j with |i - j| <= window (j <= i if causal)
    sparse       Child et al. 2019: `pattern` strided (the last `block` keys + every block-th key before)
                 or fixed (its own block + the last `summary` positions of every block)
    lowrank      Linformer (Wang et al. 2020): keys and values projected along the sequence to `rank`
                 rows; bidirectional only (in an encoder-decoder it replaces the encoder's attention)
    linear       Katharopoulos et al. 2020, feature map elu + 1; causal form computed in `chunk`-long
                 blocks, decoded with a constant-size recurrent state
    lsh          Reformer (Kitaev et al. 2020): shared query/key projection, `buckets` buckets from random
                 rotations (seeded by `seed`), `rounds` hash rounds, attention within `chunk`-long chunks
                 and to the chunk before
    ssm          a Mamba-style selective state-space mixer (Gu & Dao 2023) in place of attention: state
                 size `state`, inner width `expand` * d, causal convolution of width `conv`
    """

    SHORTHAND = "kind"

    kind: AttentionKind = "sdpa"
    window: int = 64  # windowed: the neighbourhood r
    pattern: SparsePattern = "strided"  # sparse
    block: int = 32  # sparse: the stride / block length l
    summary: int = 4  # sparse fixed: c summary positions per block
    rank: int = 64  # lowrank: projected length
    buckets: int = 8  # lsh
    rounds: int = 2  # lsh
    chunk: int = 64  # lsh: chunk length; linear and ssm: block length of the parallel form
    seed: int = 0  # lsh: the random rotations
    state: int = 16  # ssm: N
    expand: int = 2  # ssm
    conv: int = 4  # ssm

    def __post_init__(self) -> None:
        check_literals(self, where="attention.")  # kind, pattern
        for name in ("window", "block", "summary", "rank", "buckets", "rounds", "chunk", "state", "expand", "conv"):
            _positive(f"attention.{name}", getattr(self, name))
        if self.summary > self.block:
            raise UserError(f"attention.summary={self.summary} must be <= attention.block={self.block}")
        if self.buckets > 1 and self.buckets % 2:
            raise UserError(f"attention.buckets={self.buckets} must be 1 or even (random rotations give "
                             "buckets in +/- pairs)")

    @property
    def exact(self) -> bool:
        return self.kind in EXACT_KINDS


@dataclass(kw_only=True)
class DropoutConfig:
    embed: float = 0.1  # on the sum of token and position embeddings
    attention: float = 0.0  # on the attention weights
    residual: float = 0.1  # on each sub-layer's output, before the residual add
    activation: float = 0.0  # inside the feed-forward, after the non-linearity

    def __post_init__(self) -> None:
        check_finite(self, where="dropout.")
        for f in dataclasses.fields(self):
            _probability(f"dropout.{f.name}", getattr(self, f.name))


@dataclass(kw_only=True)
class InitConfig:
    """Xavier-uniform as in the paper's reference code, or normal(0, std) as in GPT-2 / BERT. With
    `scaled_residual`, the projections that write into the residual stream get std / sqrt(2 L); with
    `zero_residual`, they start at zero (every pre-LN block starts as the identity)."""

    kind: InitKind = "xavier"
    std: float = 0.02
    scaled_residual: bool = False
    zero_residual: bool = False

    def __post_init__(self) -> None:
        check_literals(self, where="init.")  # kind
        check_finite(self, where="init.")
        if not self.std > 0:
            raise UserError(f"init.std={self.std!r} must be > 0")


@dataclass(kw_only=True)
class TransformerConfig:
    """What every family shares: the sizes of one stack of blocks and how its parts are chosen."""

    vocab_size: int = 32000
    d_model: int = 512
    n_heads: int = 8
    n_kv_heads: int | None = None  # None: = n_heads (MHA); 1: MQA; in between: GQA
    head_dim: int | None = None  # None: d_model // n_heads
    d_ff: int = 2048
    n_layers: int = 6
    max_len: int = 512
    activation: Activation = "relu"
    bias: bool = True
    attention: AttentionConfig = field(default_factory=AttentionConfig)  # self-attention kind and options
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d), as the paper does
    tie_embeddings: bool = True
    pad_id: int = 0
    norm: NormConfig = field(default_factory=NormConfig)
    positions: PositionConfig = field(default_factory=PositionConfig)
    dropout: DropoutConfig = field(default_factory=DropoutConfig)
    init: InitConfig = field(default_factory=InitConfig)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # sub-configs may be given as plain dicts (or a shorthand)
            value, factory = getattr(self, f.name), f.default_factory
            if factory is dataclasses.MISSING or not isinstance(value, str | dict):
                continue
            cls = type(factory())
            if not dataclasses.is_dataclass(cls):
                continue
            value = with_default(f, cls, value)  # a shorthand expanded, a partial dict over the default
            if isinstance(value, dict):
                setattr(self, f.name, from_dict(cls, value, where=f"{f.name}."))
        check_finite(self)  # a family's own floats (classifier_dropout)
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "max_len"):
            _positive(name, getattr(self, name))
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise UserError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                    "pick n_heads dividing d_model or set head_dim"
                )
            self.head_dim = self.d_model // self.n_heads
        _positive("head_dim", self.head_dim)
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        _positive("n_kv_heads", self.n_kv_heads)
        if self.n_heads % self.n_kv_heads:
            raise UserError(
                f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}; "
                "n_kv_heads must divide n_heads (1 = multi-query, n_heads = multi-head)"
            )
        check_literals(self)  # activation
        self._check_attention()
        if not 0 <= self.pad_id < self.vocab_size:
            raise UserError(f"pad_id={self.pad_id} must be in [0, vocab_size={self.vocab_size})")

    def _check_attention(self) -> None:
        kind, pos = self.attention.kind, self.positions.kind
        if pos == "alibi" and not self.attention.exact:
            raise UserError(f"positions.kind=alibi needs exact attention (sdpa or eager), not "
                             f"attention.kind={kind}: its bias covers the full T x S score matrix")
        if kind == "ssm" and pos in ("rope", "alibi"):
            raise UserError(f"positions.kind={pos} acts inside attention and would do nothing with "
                             "attention.kind=ssm; use sinusoidal, learned or none")
        if kind == "lsh" and self.n_kv_heads != self.n_heads:
            raise UserError(f"attention.kind=lsh shares queries and keys, so n_kv_heads={self.n_kv_heads} "
                             f"must equal n_heads={self.n_heads}")
        if kind == "lowrank" and self.attention.rank > self.max_len:
            raise UserError(f"attention.rank={self.attention.rank} must be <= max_len={self.max_len}")


@dataclass(kw_only=True)
class Seq2SeqConfig(TransformerConfig):
    """The paper's encoder-decoder. `vocab_size` is the target vocabulary; `src_vocab_size` None shares it
    (one embedding matrix for source, target and, with `tie_embeddings`, the output projection)."""

    scale_embeddings: bool = True
    src_vocab_size: int | None = None
    n_decoder_layers: int | None = None  # None: = n_layers
    bos_id: int = 1
    eos_id: int = 2
    decoder_start_id: int | None = None  # first decoder input; None: bos_id
    output_bias: bool = False  # a bias on the final linear layer (Marian has one)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_decoder_layers is None:
            self.n_decoder_layers = self.n_layers
        _positive("n_decoder_layers", self.n_decoder_layers)
        if self.src_vocab_size is not None:
            _positive("src_vocab_size", self.src_vocab_size)
        if self.decoder_start_id is None:
            self.decoder_start_id = self.bos_id
        _token_ids(self, ("bos_id", "eos_id", "decoder_start_id"))

    @property
    def shared_vocab(self) -> bool:
        return self.src_vocab_size is None


@dataclass(kw_only=True)
class BertConfig(TransformerConfig):
    """Encoder-only BERT: token + position + segment embeddings, a LayerNorm on their sum, post-LN blocks,
    a tied masked-LM head, a next-sentence head and a pooled classification head."""

    activation: Activation = "gelu"
    positions: PositionConfig = field(default_factory=lambda: PositionConfig(kind="learned"))
    norm: NormConfig = field(default_factory=lambda: NormConfig(eps=1e-12))
    init: InitConfig = field(default_factory=lambda: InitConfig(kind="normal"))
    type_vocab_size: int = 2
    n_labels: int = 2
    label_names: list[str] = field(default_factory=list)  # the classes' names, if known (else LABEL_i)
    classifier_dropout: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        _positive("type_vocab_size", self.type_vocab_size)
        _positive("n_labels", self.n_labels)
        if self.label_names and len(self.label_names) != self.n_labels:
            raise UserError(f"label_names has {len(self.label_names)} names but n_labels={self.n_labels}")
        _probability("classifier_dropout", self.classifier_dropout)


@dataclass(kw_only=True)
class GPTConfig(TransformerConfig):
    """Decoder-only: a causal stack and a language-model head (tied to the embeddings if asked)."""

    activation: Activation = "gelu_tanh"
    positions: PositionConfig = field(default_factory=lambda: PositionConfig(kind="learned"))
    norm: NormConfig = field(default_factory=lambda: NormConfig(placement="pre"))
    init: InitConfig = field(default_factory=lambda: InitConfig(kind="normal", scaled_residual=True))
    bos_id: int | None = None
    eos_id: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.attention.kind == "lowrank":
            raise UserError("attention.kind=lowrank mixes all positions, so it cannot be causal; a GPT "
                             "needs causal attention (use windowed, sparse, linear, lsh or ssm)")


@dataclass(kw_only=True)
class RNNSeq2SeqConfig:
    """The road to the Transformer: an RNN encoder-decoder (Sutskever et al. 2014), whose encoder's final
    state starts the decoder, and with a `match` the attention-based RNN (Bahdanau et al. 2015; Luong et
    al. 2015), whose decoder also reads a weighted sum of the encoder states at every step.

    One width `d_model` for the embeddings, the decoder's state and the encoder's states: a bidirectional
    encoder gives each direction d/2 units and concatenates them, so its states and, layer by layer, its
    final states have the decoder's size. The encoder and the decoder have `n_layers` layers each, and the
    final state of encoder layer l starts decoder layer l. `match` names the MATCH function that scores
    a decoder state z against an encoder state h (`models/rnn.py`): dot z.h, general z.W h, additive
    v.tanh(W z + U h), cosine beta cos(z, h); none: no attention. With a match, `input_feeding` feeds each
    step's attentional output to the next step's input (Luong et al. 2015, sec. 3.3); without it the decoder
    RNN runs over the whole target in one call in training, about twice as fast. `max_len` bounds what decoding produces
    and what a text may hold (an RNN has no positions to run out of). `vocab_size` is the target
    vocabulary; `src_vocab_size` None shares it, as `Seq2SeqConfig` does. The key was `attention` before
    (a word a Transformer's config uses for its kind of self-attention); a config giving it is refused with
    a pointer to `match`, and a checkpoint saved with it loads as `match` (RENAMED, read by `configio`)."""

    RENAMED = {"attention": ("match", "for family rnn: the decoder's MATCH function")}

    vocab_size: int = 32000
    src_vocab_size: int | None = None
    d_model: int = 256
    n_layers: int = 2
    cell: RNNCell = "lstm"
    bidirectional: bool = True
    match: MatchKind = "none"
    input_feeding: bool = True  # with a match: o_t-1 joins the decoder's input at step t
    max_len: int = 256
    dropout: float = 0.1  # on the embeddings, between layers, and on the decoder's output
    init_range: float = 0.1  # every weight starts uniform in [-init_range, init_range] (Luong et al. 2015)
    tie_embeddings: bool = True
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    decoder_start_id: int | None = None  # first decoder input; None: bos_id

    def __post_init__(self) -> None:
        check_literals(self)  # cell, match
        check_finite(self)
        for name in ("vocab_size", "d_model", "n_layers", "max_len"):
            _positive(name, getattr(self, name))
        if self.src_vocab_size is not None:
            _positive("src_vocab_size", self.src_vocab_size)
        if self.bidirectional and self.d_model % 2:
            raise UserError(f"d_model={self.d_model} must be even with bidirectional=true: each direction of the "
                             "encoder has d_model / 2 units")
        _probability("dropout", self.dropout)
        if not self.init_range > 0:
            raise UserError(f"init_range={self.init_range!r} must be > 0")
        if self.decoder_start_id is None:
            self.decoder_start_id = self.bos_id
        _token_ids(self, ("pad_id", "bos_id", "eos_id", "decoder_start_id"))

    @property
    def shared_vocab(self) -> bool:
        return self.src_vocab_size is None


ModelConfig = TransformerConfig | RNNSeq2SeqConfig
ENCODER_DECODERS = (Seq2SeqConfig, RNNSeq2SeqConfig)  # the families that translate

FAMILIES: dict[str, type[ModelConfig]] = {
    "seq2seq": Seq2SeqConfig,
    "bert": BertConfig,
    "gpt": GPTConfig,
    "rnn": RNNSeq2SeqConfig,
}


def family_of(config: ModelConfig) -> str:
    for name, cls in FAMILIES.items():
        if type(config) is cls:
            return name
    raise UserError(f"unknown config type {type(config).__name__}")


__all__ = [
    "ACTIVATIONS", "ATTENTION_KINDS", "ENCODER_DECODERS", "EXACT_KINDS", "FAMILIES", "INIT_KINDS", "MATCH_KINDS",
    "NORM_KINDS", "PLACEMENTS", "POSITION_KINDS", "RNN_CELLS", "SINUSOID_LAYOUTS", "SPARSE_PATTERNS", "Activation",
    "AttentionConfig", "AttentionKind", "BertConfig", "DropoutConfig", "GPTConfig", "InitConfig", "InitKind",
    "MatchKind", "ModelConfig", "NormConfig", "NormKind", "Placement", "PositionConfig", "PositionKind", "RNNCell",
    "RNNSeq2SeqConfig", "Seq2SeqConfig", "SinusoidLayout", "SparsePattern", "TransformerConfig", "family_of",
    "from_dict", "to_dict",
]
