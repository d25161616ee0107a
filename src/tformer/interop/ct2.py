"""CTranslate2 export: our translators and GPTs as CTranslate2 models (https://github.com/OpenNMT/CTranslate2),
a C++ engine for Transformer inference on CPU and GPU (fused kernels, int8 / float16 weights).

    to_ct2(model, path, tokenizer=, quantization=)   write a CTranslate2 model directory
    checkpoint_to_ct2(checkpoint, path)              `tformer convert --to-ct2`: a checkpoint's model and tokenizer
    load_ct2(path) -> CT2Model                       a ctranslate2.Translator / Generator and what runs it from ids
    translate_ids(ct2, sources, beam=, ...)          translations of token-id lists, as our `greedy` / `beam_search`
    generate_ids(ct2, prompts, max_new_tokens=)      greedy continuations, as our `generate_greedy`

The model is written through CTranslate2's own model description (`ctranslate2.specs`: a `TransformerSpec` for a
translator, a `TransformerDecoderModelSpec` for a GPT), filled in from our state dict: no Hugging Face export in
between. That keeps our choices exactly: the decoder starts from our start token (CTranslate2's Marian loader
assumes a zero embedding and drops the last vocabulary row), the vocabulary is ours by id, and the position
table is the one our model adds (sinusoids in either layout, or learned), written as CTranslate2's
`position_encodings`, so CTranslate2's own sinusoids (which may differ in layout and offset) are never used.
Pre-LN and post-LN stacks, a final norm (pre-LN), LayerNorm with or without bias, RMSNorm, gated and plain
feed-forwards, multi-/grouped-query attention, RoPE ("rotate half") and, for a GPT, ALiBi map one to one.

The directory holds CTranslate2's files (model.bin, config.json, the vocabulary as JSON, CTranslate2 maps
strings to ids), our tokenizer's file (so the directory alone tokenizes) and our config.yaml (so `load_ct2`
knows the context length). CTranslate2 is an optional dependency, the `ct2` extra: `pip install ctranslate2`.

B batch, n source length, d width.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tformer.checkpoints import load_model, tokenizer_dir, verify_source
from tformer.config import GPTConfig, Seq2SeqConfig, TransformerConfig, family_of
from tformer.configio import dump_yaml, to_dict
from tformer.decoding.generate import check_prompts
from tformer.errors import UserError, install_hint
from tformer.files import atomic_directory
from tformer.models import GPT, EncoderDecoder
from tformer.nn.mlp import GATED
from tformer.tokenization import Tokenizer, check_vocabulary, load_tokenizer

# CTranslate2's weight types (`quantization=`; `compute_type=` when loading takes these too).
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
# Our activation -> the name in ctranslate2.specs.common_spec.Activation (a gated one uses it on the gate).
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH", "swiglu": "SWISH",
               "geglu": "GELU"}
MODEL_FILE = "model.bin"  # what makes a directory a CTranslate2 model (one we may replace)
CONFIG_FILE = "config.yaml"  # ours, beside CTranslate2's config.json
INSTALL_HINT = install_hint("ct2")


def ctranslate2() -> Any:
    """The `ctranslate2` package, or a RuntimeError saying how to install it."""
    try:
        import ctranslate2 as module
    except ImportError:
        raise UserError(f"the CTranslate2 export needs the ctranslate2 package: {INSTALL_HINT}") from None
    return module


# --- export ---------------------------------------------------------------------------------------------


def unsupported(model: nn.Module) -> list[str]:
    """What in `model` CTranslate2 cannot compute as we do ([] = nothing)."""
    if not isinstance(model, EncoderDecoder | GPT):
        return [f"{type(model).__name__} (CTranslate2 export writes EncoderDecoder and GPT models)"]
    cfg, problems = model.config, []
    if not cfg.attention.exact:
        problems.append(f"attention.kind={cfg.attention.kind} (CTranslate2 has exact attention only)")
    if cfg.activation not in ACTIVATIONS:
        problems.append(f"activation={cfg.activation} (CTranslate2 has {', '.join(ACTIVATIONS)})")
    if cfg.norm.final and cfg.norm.placement == "post":
        problems.append("norm.final=True with norm.placement=post (CTranslate2 has a final norm in pre-LN stacks only)")
    if isinstance(cfg, Seq2SeqConfig) and cfg.positions.kind == "alibi":
        problems.append("positions.kind=alibi in an encoder-decoder (CTranslate2's encoder has no ALiBi)")
    return problems


def check_quantization(quantization: str | None) -> None:
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UserError(f"quantization={quantization!r} is not a CTranslate2 weight type; choose one of "
                         f"{', '.join(QUANTIZATIONS)}")


def to_ct2(model: nn.Module, path: str | Path, *, tokenizer: Tokenizer | None = None,
           quantization: str | None = None) -> None:
    """Write `model` (an EncoderDecoder or a GPT) as the CTranslate2 model directory `path`, its weights
    stored as `quantization` (one of QUANTIZATIONS; None: float32). `tokenizer` gives the vocabulary's
    strings and is saved beside (without one, token i is named `<id:i>`). The write is atomic; an existing
    CTranslate2 model at `path` is replaced whole, a directory of other files is refused."""
    problems = unsupported(model)
    if problems:
        raise UserError(f"this model has no CTranslate2 equivalent: {'; '.join(problems)}")
    check_quantization(quantization)
    check_out(path)
    ct2 = ctranslate2()
    config = model.config
    if tokenizer is not None:
        check_vocabulary(tokenizer, config.vocab_size, where=f"to_ct2 {path}")
    spec = build_spec(model, ct2.specs)
    src_tokens = vocabulary(tokenizer, config.src_vocab_size or config.vocab_size) \
        if isinstance(config, Seq2SeqConfig) else None
    tokens = vocabulary(tokenizer, config.vocab_size)
    set_vocabulary(spec, config, src_tokens, tokens, tokenizer)
    spec.validate()
    spec.optimize(quantization=quantization)
    write_model(path, spec, config, model, tokenizer)


def checkpoint_to_ct2(checkpoint: str | Path, path: str | Path, *, quantization: str | None = None) -> nn.Module:
    """Write a checkpoint of ours as a CTranslate2 model directory (`tformer convert --to-ct2`), with its
    tokenizer; return the model."""
    check_quantization(quantization)
    check_out(path)
    ctranslate2()  # installed? (all before reading the checkpoint)
    verify_source(checkpoint)
    model, _ = load_model(checkpoint)
    if problems := unsupported(model):  # before loading anything else
        raise UserError(f"{checkpoint}: this model has no CTranslate2 equivalent: {'; '.join(problems)}")
    to_ct2(model, path, tokenizer=load_tokenizer(checkpoint) if tokenizer_dir(checkpoint) else None,
           quantization=quantization)
    return model


def build_spec(model: nn.Module, specs: Any) -> Any:
    """CTranslate2's description of `model` with every weight set: float32 copies (CTranslate2 quantizes in
    place, so it must not see the model's own tensors)."""
    cfg = model.config
    sd = {k: v.detach().to("cpu", torch.float32, copy=True) for k, v in model.state_dict().items()}
    activation = specs.common_spec.Activation[ACTIVATIONS[cfg.activation]]
    options = dict(num_layers=cfg.n_layers, num_heads=cfg.n_heads, pre_norm=cfg.norm.placement == "pre",
                   no_final_norm=not cfg.norm.final, activation=activation,
                   ffn_glu=cfg.activation in GATED, rms_norm=cfg.norm.kind == "rmsnorm",
                   num_heads_kv=cfg.n_kv_heads if cfg.n_kv_heads != cfg.n_heads else None,
                   head_dim=cfg.head_dim if cfg.head_dim * cfg.n_heads != cfg.d_model else None)
    if cfg.positions.kind == "rope":  # all dims, paired i with i + D/2 ("rotate half", not interleaved)
        options.update(rotary_dim=0, rotary_interleave=False, rotary_base=cfg.positions.rope_theta)
    t = specs.transformer_spec
    if isinstance(cfg, Seq2SeqConfig):
        encoder = t.TransformerEncoderSpec(**options)
        decoder = t.TransformerDecoderSpec(**{**options, "num_layers": cfg.n_decoder_layers})
        spec = t.TransformerSpec(encoder, decoder)
        fill_stack(spec.encoder, sd, "encoder", model, "src_embed", embeddings=spec.encoder.embeddings[0])
        fill_stack(spec.decoder, sd, "decoder", model, "tgt_embed", embeddings=spec.decoder.embeddings)
    else:
        decoder = t.TransformerDecoderSpec(**options, with_encoder_attention=False, alibi=cfg.positions.kind == "alibi")
        spec = t.TransformerDecoderModelSpec(decoder)
        fill_stack(spec.decoder, sd, "decoder", model, "embed", embeddings=spec.decoder.embeddings)
    linear(spec.decoder.projection, sd, "lm_head")
    return spec


def fill_stack(stack: Any, sd: dict[str, Tensor], name: str, model: nn.Module, embed: str, *,
               embeddings: Any) -> None:
    """One stack's weights: its embeddings and positions (from our `Embeddings` module `model.<embed>`), its
    layers and its final norm. CTranslate2 names the parts of a layer `self_attention`, `attention` (the
    cross-attention), `ffn`, each with the norm that goes with it."""
    cfg = model.config
    embeddings.weight = sd[f"{embed}.tokens.weight"]
    module = model.get_submodule(embed)
    stack.scale_embeddings = module.scale  # sqrt(d) or 1: a float multiplies the token embeddings
    if hasattr(stack, "position_encodings"):  # ours exactly, or zeros where we add none (RoPE in an encoder)
        stack.position_encodings.encodings = position_table(module, cfg)
    if cfg.norm.final:
        norm(stack.layer_norm, sd, f"{name}.final_norm")
    for i, layer in enumerate(stack.layer):
        at = f"{name}.layers.{i}"
        attention(layer.self_attention, sd, f"{at}.mixer", fused=3)
        norm(layer.self_attention.layer_norm, sd, f"{at}.mixer_norm")
        if hasattr(layer, "attention"):
            attention(layer.attention, sd, f"{at}.cross_attn", fused=2)
            norm(layer.attention.layer_norm, sd, f"{at}.cross_norm")
        if cfg.activation in GATED:  # linear_0 is activated, linear_0_noact multiplies it
            linear(layer.ffn.linear_0, sd, f"{at}.mlp.gate_proj")
            linear(layer.ffn.linear_0_noact, sd, f"{at}.mlp.up_proj")
            linear(layer.ffn.linear_1, sd, f"{at}.mlp.down_proj")
        else:
            linear(layer.ffn.linear_0, sd, f"{at}.mlp.fc_in")
            linear(layer.ffn.linear_1, sd, f"{at}.mlp.fc_out")
        norm(layer.ffn.layer_norm, sd, f"{at}.mlp_norm")


def position_table(embed: nn.Module, cfg: TransformerConfig) -> Tensor:
    """(max_len, d): what `embed` adds at each position (our sinusoids or learned rows), zeros if nothing."""
    if embed.positions is None:
        return torch.zeros(cfg.max_len, cfg.d_model)
    with torch.no_grad():
        return embed.positions(torch.arange(cfg.max_len)[None])[0].to("cpu", torch.float32, copy=True)  # (n, d)


def attention(spec: Any, sd: dict[str, Tensor], name: str, *, fused: int) -> None:
    """Self-attention (`fused`=3): one linear q|k|v, then out. Cross-attention (2): q, one linear k|v, out."""
    parts = [f"{name}.{p}_proj" for p in ("q", "k", "v")]
    groups = [parts] if fused == 3 else [parts[:1], parts[1:]]
    for target, group in zip(spec.linear, groups, strict=False):
        target.weight = torch.cat([sd[f"{p}.weight"] for p in group])  # (rows of q | k | v, d)
        if f"{group[0]}.bias" in sd:
            target.bias = torch.cat([sd[f"{p}.bias"] for p in group])
    linear(spec.linear[-1], sd, f"{name}.out_proj")


def linear(spec: Any, sd: dict[str, Tensor], name: str) -> None:
    spec.weight = sd[f"{name}.weight"]  # (out, in), as torch
    if f"{name}.bias" in sd:
        spec.bias = sd[f"{name}.bias"]


def norm(spec: Any, sd: dict[str, Tensor], name: str) -> None:
    """LayerNorm (CTranslate2 needs a beta: zeros for one without bias) or RMSNorm (gamma only)."""
    spec.gamma = sd[f"{name}.weight"]
    if hasattr(spec, "beta"):
        spec.beta = sd.get(f"{name}.bias", torch.zeros_like(spec.gamma))


# --- vocabulary and files -------------------------------------------------------------------------------


def vocabulary(tokenizer: Tokenizer | None, size: int) -> list[str]:
    """The `size` strings CTranslate2 knows our ids by: the tokenizer's token for each id it has
    (`tokenizer.token(i)`), `<id:i>` for the others. They must be distinct: CTranslate2 maps them back."""
    tokens = [(tokenizer.token(i) if tokenizer is not None and i < tokenizer.vocab_size else None) or f"<id:{i}>"
              for i in range(size)]
    if len(set(tokens)) != len(tokens):
        twice = next(t for t in tokens if tokens.count(t) > 1)
        raise UserError(f"the tokenizer names two ids {twice!r}; CTranslate2 needs one string per id")
    return tokens


def set_vocabulary(spec: Any, config: TransformerConfig, src_tokens: list[str] | None, tokens: list[str],
                   tokenizer: Tokenizer | None) -> None:
    """Register the vocabularies and name the special tokens in CTranslate2's config.json by our ids: the
    decoder starts from ours, decoding ends at ours. A role with no id of its own (a GPT without an
    end-of-text token, a tokenizer without <unk>) is given token 0: CTranslate2 needs a name for each."""
    unk = None if tokenizer is None else tokenizer.unk_id
    ids = {"unk_token": unk, "bos_token": getattr(config, "bos_id", None), "eos_token": getattr(config, "eos_id", None)}
    for role, i in ids.items():
        setattr(spec.config, role, tokens[i if i is not None else 0])
    spec.config.layer_norm_epsilon = config.norm.eps
    if src_tokens is None:
        spec.register_vocabulary(tokens)
        return
    spec.config.decoder_start_token = tokens[config.decoder_start_id]
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tokens)


def check_out(path: str | Path) -> None:
    """A ValueError unless `path` is free for a model directory: nothing there, an empty directory, or a
    CTranslate2 model (which the export replaces whole). A directory of other files is never replaced."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{path} is a file; the CTranslate2 export writes a model directory there")
    if path.is_dir() and any(path.iterdir()) and not (path / MODEL_FILE).is_file():
        raise UserError(f"{path} is a directory of other files (no {MODEL_FILE}: not a CTranslate2 model); export "
                         "to a new or empty directory, or over a CTranslate2 model to replace it")


def write_model(path: str | Path, spec: Any, config: TransformerConfig, model: nn.Module,
                tokenizer: Tokenizer | None) -> None:
    """CTranslate2's files, our config.yaml and the tokenizer's file, as the directory `path`, atomically
    (`files.atomic_directory`)."""
    path = Path(path)
    existed = path.exists()
    meta = {"family": family_of(config), "model": type(model).__name__, "config": to_dict(config)}
    try:
        with atomic_directory(path) as tmp:
            spec.save(str(tmp))
            (tmp / CONFIG_FILE).write_text(dump_yaml(meta), encoding="utf-8")
            if tokenizer is not None:
                tokenizer.save(tmp)
    except OSError as e:  # a full disk, no permission: said as to_hf says it
        kept = " (what was there is kept)" if existed else ""
        raise UserError(f"cannot write {path}: {e.strerror or e}{kept}") from None


# --- running --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CT2Model:
    """A model written by `to_ct2`, loaded: CTranslate2's runner and what maps our ids to its strings."""

    engine: Any  # ctranslate2.Translator (a translator) or ctranslate2.Generator (a GPT)
    config: Seq2SeqConfig | GPTConfig
    src_tokens: list[str]  # source vocabulary by id (the target's for a GPT)
    tokens: list[str]  # target vocabulary by id
    ids: dict[str, int]  # target string -> our id
    bos_id: int  # the id of CTranslate2's bos_token, which a Generator leaves out of its results


def load_ct2(path: str | Path, *, device: str = "cpu", compute_type: str = "default", threads: int = 0) -> CT2Model:
    """Load a directory written by `to_ct2`. `compute_type`: "default" (the weights' type as written) or one
    of QUANTIZATIONS (CTranslate2 converts on loading); `threads`: CTranslate2's intra_threads (0: its
    default)."""
    from tformer.checkpoints import load_config  # here: `import tformer` loads no checkpoint code

    ct2, path = ctranslate2(), Path(path)
    if not (path / MODEL_FILE).is_file() or not (path / CONFIG_FILE).is_file():
        raise UserError(f"{path} is not a CTranslate2 model written by tformer (needs {MODEL_FILE} and {CONFIG_FILE})")
    config, _ = load_config(path)  # the format of our checkpoints' config.yaml
    seq2seq = isinstance(config, Seq2SeqConfig)
    runner = ct2.Translator if seq2seq else ct2.Generator
    engine = runner(str(path), device=device, compute_type=compute_type, intra_threads=threads)
    names = ("source_vocabulary", "target_vocabulary") if seq2seq else ("vocabulary", "vocabulary")
    if seq2seq and (path / "shared_vocabulary.json").is_file():
        names = ("shared_vocabulary", "shared_vocabulary")
    src, tgt = (json.loads((path / f"{n}.json").read_text(encoding="utf-8")) for n in names)
    ids = {t: i for i, t in enumerate(tgt)}
    bos = json.loads((path / "config.json").read_text(encoding="utf-8"))["bos_token"]
    return CT2Model(engine, config, src, tgt, ids, ids[bos])


def names(tokens: list[str], ids: Sequence[int], what: str) -> list[str]:
    """CTranslate2's strings for our ids; a ValueError naming `what` for an id outside the vocabulary."""
    bad = next((i for i in ids if not 0 <= i < len(tokens)), None)
    if bad is not None:
        raise UserError(f"{what} has token id {bad}; the vocabulary has ids 0..{len(tokens) - 1}")
    return [tokens[i] for i in ids]


def translate_ids(ct2: CT2Model, sources: Sequence[Sequence[int]], *, beam: int = 1, lenpen: float = 1.0,
                  max_len_a: float = 1.5, max_len_b: int = 10, batch_size: int = 64,
                  patience: float = 1.0) -> list[list[int]]:
    """Translations of token-id lists (no padding, no <s> or </s>), as our `greedy` (beam 1) and
    `beam_search` make them: from our start token, ended by our end token (not returned), never proposing
    <pad>, at most int(max_len_a * n + max_len_b) tokens for a source of n (capped by max_len); hypotheses
    scored log p / len ** lenpen, len counting </s>, as ours. CTranslate2 takes one maximum length per call:
    the longest limit is asked for and each row cut at its own (exact for greedy; a beam may have preferred
    another hypothesis). `batch_size`: sentences per CTranslate2 batch (it sorts by length first).

    Beam search stops where ours does by default: CTranslate2 once beam * `patience` hypotheses have
    finished (Kasai et al. 2022), ours (stopping="finished") once `beam` have: patience 1. Our
    stopping="best" searches on until no live hypothesis can beat the finished ones; a patience of `beam` or
    so comes close to it, at the cost of more steps."""
    config = ct2.config
    n_max = config.max_len
    bad = next((i for i, s in enumerate(sources) if not 0 < len(s) <= n_max), None)
    if bad is not None:
        raise UserError(f"source {bad} has {len(sources[bad])} tokens; each needs 1..max_len={n_max}")
    limits = [min(int(max_len_a * len(s) + max_len_b), n_max) for s in sources]
    no_pad = [[ct2.tokens[config.pad_id]]] if config.pad_id != config.eos_id else None  # as `next_log_probs`
    strings = [names(ct2.src_tokens, s, f"source {k}") for k, s in enumerate(sources)]
    results = ct2.engine.translate_batch(
        strings, max_batch_size=batch_size, beam_size=beam, length_penalty=lenpen, patience=patience,
        max_decoding_length=max(limits, default=1), min_decoding_length=0, max_input_length=0,
        suppress_sequences=no_pad)
    return [[ct2.ids[t] for t in r.hypotheses[0]][:limit] for r, limit in zip(results, limits, strict=True)]


def generate_ids(ct2: CT2Model, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                 stop_tokens: Sequence[int] = ()) -> list[list[int]]:
    """Greedy continuations of token-id prompts, as our `generate_greedy`: the new tokens only, each row
    ended by any of `stop_tokens` (not returned) or after `max_new_tokens`. CTranslate2 is called as its
    documentation shows for continuing prompts, `include_prompt_in_result=False`, which forwards a batch's
    prompts at once (as our prefill does) up to the shortest one's length; so prompts are batched by length,
    and none has a token forced one step at a time."""
    check_prompts(prompts, max_new_tokens=max_new_tokens, max_len=ct2.config.max_len)
    out: list[list[int]] = [[] for _ in prompts]
    if max_new_tokens == 0:
        return out
    by_length: dict[int, list[int]] = {}
    for k, p in enumerate(prompts):
        by_length.setdefault(len(p), []).append(k)
    for rows in by_length.values():
        strings = [names(ct2.tokens, prompts[k], f"prompt {k}") for k in rows]
        results = ct2.engine.generate_batch(strings, max_length=max_new_tokens, sampling_topk=1,
                                            end_token=[int(t) for t in stop_tokens], include_prompt_in_result=False)
        for k, r in zip(rows, results, strict=True):
            out[k] = r.sequences_ids[0][:max_new_tokens]
    return out


__all__ = ["QUANTIZATIONS", "CT2Model", "checkpoint_to_ct2", "generate_ids", "load_ct2", "to_ct2", "translate_ids",
           "unsupported"]
