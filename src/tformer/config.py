"""Typed model configurations, validated when built.

The notes' names for the hyperparameters, and ours:
    d  width                 d_model
    m  feed-forward width    d_ff
    k  head width            head_dim      (derived: d / h)
    h  heads                 n_heads
    L  depth                 n_layers      (encoder-decoder: n_layers encoder, n_decoder_layers decoder)
    n  context               max_len
Dropout, initialisation, norm and positions are nested sub-configs. L2 / weight decay and the learning rate
belong to training (`tformer.training`), not to the model.

Every config is a keyword-only dataclass; `__post_init__` derives the rest and raises `ValueError` naming
the bad value and what is allowed. `from_dict` builds one from nested plain dicts (YAML), rejecting unknown
keys and wrong types.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu")
NORM_KINDS = ("layernorm", "rmsnorm")
PLACEMENTS = ("post", "pre")
POSITION_KINDS = ("sinusoidal", "learned", "none", "rope", "alibi")
SINUSOID_LAYOUTS = ("interleaved", "split")
INIT_KINDS = ("xavier", "normal")
ATTENTION_KINDS = ("sdpa", "eager", "windowed", "sparse", "lowrank", "linear", "lsh", "ssm")
EXACT_KINDS = ("sdpa", "eager")
SPARSE_PATTERNS = ("strided", "fixed")


def _choice(name: str, value: object, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {', '.join(map(str, allowed))}")


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")


def _probability(name: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name}={value!r} must be in [0, 1)")


@dataclass(kw_only=True)
class NormConfig:
    """Which norm, and where: post-LN `norm(x + f(x))` as in the paper, or pre-LN `x + f(norm(x))`."""

    DERIVED = ("final",)  # filled in by __post_init__ when left None

    kind: str = "layernorm"
    eps: float = 1e-5
    placement: str = "post"
    final: bool | None = None  # a norm after the last layer; None: only for pre-LN, where it is needed

    def __post_init__(self) -> None:
        _choice("norm.kind", self.kind, NORM_KINDS)
        _choice("norm.placement", self.placement, PLACEMENTS)
        if not self.eps > 0:
            raise ValueError(f"norm.eps={self.eps!r} must be > 0")
        if self.final is None:
            self.final = self.placement == "pre"


@dataclass(kw_only=True)
class PositionConfig:
    """How tokens learn their order: added to the embeddings (sinusoidal, learned) or inside attention
    (RoPE rotates queries and keys, ALiBi biases the scores)."""

    SHORTHAND = "kind"

    kind: str = "sinusoidal"
    sinusoid_layout: str = "interleaved"  # paper: sin on even dims, cos on odd; "split": sin half | cos half
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        _choice("positions.kind", self.kind, POSITION_KINDS)
        _choice("positions.sinusoid_layout", self.sinusoid_layout, SINUSOID_LAYOUTS)
        if not self.rope_theta > 0:
            raise ValueError(f"positions.rope_theta={self.rope_theta!r} must be > 0")


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

    kind: str = "sdpa"
    window: int = 64  # windowed: the neighbourhood r
    pattern: str = "strided"  # sparse
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
        _choice("attention.kind", self.kind, ATTENTION_KINDS)
        _choice("attention.pattern", self.pattern, SPARSE_PATTERNS)
        for name in ("window", "block", "summary", "rank", "buckets", "rounds", "chunk", "state", "expand", "conv"):
            _positive(f"attention.{name}", getattr(self, name))
        if self.summary > self.block:
            raise ValueError(f"attention.summary={self.summary} must be <= attention.block={self.block}")
        if self.buckets > 1 and self.buckets % 2:
            raise ValueError(f"attention.buckets={self.buckets} must be 1 or even (random rotations give "
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
        for f in dataclasses.fields(self):
            _probability(f"dropout.{f.name}", getattr(self, f.name))


@dataclass(kw_only=True)
class InitConfig:
    """Xavier-uniform as in the paper's reference code, or normal(0, std) as in GPT-2 / BERT. With
    `scaled_residual`, the projections that write into the residual stream get std / sqrt(2 L)."""

    kind: str = "xavier"
    std: float = 0.02
    scaled_residual: bool = False

    def __post_init__(self) -> None:
        _choice("init.kind", self.kind, INIT_KINDS)
        if not self.std > 0:
            raise ValueError(f"init.std={self.std!r} must be > 0")


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
    activation: str = "relu"
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
            default = factory()
            if isinstance(value, str) and hasattr(default, "SHORTHAND"):
                value = {default.SHORTHAND: value}
            if isinstance(value, dict):
                setattr(self, f.name, from_dict(type(default), {**_given(default), **value}, where=f"{f.name}."))
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "max_len"):
            _positive(name, getattr(self, name))
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                    "pick n_heads dividing d_model or set head_dim"
                )
            self.head_dim = self.d_model // self.n_heads
        _positive("head_dim", self.head_dim)
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        _positive("n_kv_heads", self.n_kv_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}; "
                "n_kv_heads must divide n_heads (1 = multi-query, n_heads = multi-head)"
            )
        _choice("activation", self.activation, ACTIVATIONS)
        self._check_attention()
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id={self.pad_id} must be in [0, vocab_size={self.vocab_size})")

    def _check_attention(self) -> None:
        kind, pos = self.attention.kind, self.positions.kind
        if pos == "alibi" and not self.attention.exact:
            raise ValueError(f"positions.kind=alibi needs exact attention (sdpa or eager), not "
                             f"attention.kind={kind}: its bias covers the full T x S score matrix")
        if kind == "ssm" and pos in ("rope", "alibi"):
            raise ValueError(f"positions.kind={pos} acts inside attention and would do nothing with "
                             "attention.kind=ssm; use sinusoidal, learned or none")
        if kind == "lsh" and self.n_kv_heads != self.n_heads:
            raise ValueError(f"attention.kind=lsh shares queries and keys, so n_kv_heads={self.n_kv_heads} "
                             f"must equal n_heads={self.n_heads}")
        if kind == "lowrank" and self.attention.rank > self.max_len:
            raise ValueError(f"attention.rank={self.attention.rank} must be <= max_len={self.max_len}")


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
        for name in ("bos_id", "eos_id", "decoder_start_id"):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise ValueError(f"{name}={value} must be in [0, vocab_size={self.vocab_size})")

    @property
    def shared_vocab(self) -> bool:
        return self.src_vocab_size is None


@dataclass(kw_only=True)
class BertConfig(TransformerConfig):
    """Encoder-only BERT: token + position + segment embeddings, a LayerNorm on their sum, post-LN blocks,
    a tied masked-LM head, a next-sentence head and a pooled classification head."""

    activation: str = "gelu"
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
            raise ValueError(f"label_names has {len(self.label_names)} names but n_labels={self.n_labels}")
        _probability("classifier_dropout", self.classifier_dropout)


@dataclass(kw_only=True)
class GPTConfig(TransformerConfig):
    """Decoder-only: a causal stack and a language-model head (tied to the embeddings if asked)."""

    activation: str = "gelu_tanh"
    positions: PositionConfig = field(default_factory=lambda: PositionConfig(kind="learned"))
    norm: NormConfig = field(default_factory=lambda: NormConfig(placement="pre"))
    init: InitConfig = field(default_factory=lambda: InitConfig(kind="normal", scaled_residual=True))
    bos_id: int | None = None
    eos_id: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.attention.kind == "lowrank":
            raise ValueError("attention.kind=lowrank mixes all positions, so it cannot be causal; a GPT "
                             "needs causal attention (use windowed, sparse, linear, lsh or ssm)")


FAMILIES: dict[str, type[TransformerConfig]] = {
    "seq2seq": Seq2SeqConfig,
    "bert": BertConfig,
    "gpt": GPTConfig,
}


def family_of(config: TransformerConfig) -> str:
    for name, cls in FAMILIES.items():
        if type(config) is cls:
            return name
    raise ValueError(f"unknown config type {type(config).__name__}")


# --- plain dicts (YAML) in and out ------------------------------------------------------------------

C = TypeVar("C")


def to_dict(config: Any) -> dict:
    return dataclasses.asdict(config)


def from_dict(cls: type[C], data: dict, *, where: str = "") -> C:
    """Build dataclass `cls` from nested dicts; an unknown key or a wrong type is a ValueError naming it."""
    if not isinstance(data, dict):
        raise ValueError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        name = f"{where}{key}"
        if key not in known:
            raise ValueError(f"unknown config key {name!r}; known keys: {', '.join(sorted(known))}")
        factory = known[key].default_factory
        if isinstance(value, str) and hasattr(hints[key], "SHORTHAND"):
            value = {hints[key].SHORTHAND: value}  # `attention: linear` means `attention: {kind: linear}`
        if dataclasses.is_dataclass(hints[key]) and isinstance(value, dict) and factory is not dataclasses.MISSING:
            value = {**_given(factory()), **value}  # a partial sub-config overrides the family's default
        kwargs[key] = _coerce(hints[key], value, name)
    return cls(**kwargs)


def _given(config: Any) -> dict:
    """A sub-config's own values, leaving out those its __post_init__ derives."""
    derived = getattr(config, "DERIVED", ())
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in derived}
    return {k: _given(v) if dataclasses.is_dataclass(v) else v for k, v in values.items()}


def _coerce(hint: Any, value: Any, name: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return value if isinstance(value, hint) else from_dict(hint, value, where=f"{name}.")
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(option, value, name)
            except ValueError:
                continue
        raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected {_type_name(hint)}")
    if origin is Literal:
        if value not in typing.get_args(hint):
            raise ValueError(f"config key {name!r}={value!r}; allowed: {typing.get_args(hint)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected a list")
        (item,) = typing.get_args(hint)[:1] or (Any,)
        return origin(_coerce(item, v, f"{name}[{i}]") for i, v in enumerate(value))
    if hint is Any:
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):
        try:  # YAML 1.1 (PyYAML) reads 1e-4, without a dot, as a string
            return float(value)
        except ValueError:
            pass
    if hint is bool and not isinstance(value, bool):
        raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected true or false")
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected an integer")
    if hint is dict and not isinstance(value, dict):
        raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected a mapping")
    if hint in (float, str) and not isinstance(value, hint):
        raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected {hint.__name__}")
    return value


def _type_name(hint: Any) -> str:
    return " or ".join(getattr(a, "__name__", str(a)) for a in typing.get_args(hint))
