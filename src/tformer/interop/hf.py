"""Hugging Face checkpoints in and out, without importing `transformers`.

A checkpoint is a directory: `config.json` (with `model_type`) and the weights, `model.safetensors` (also
read: a sharded `model.safetensors.index.json`, and the older `pytorch_model.bin`).

    from_hf(path) -> (model, config)   read; map the config and the weight names; build our model; load
    to_hf(model, path, tokenizer=)     map back and write config.json + model.safetensors, which
                                       `transformers`' `AutoModel...from_pretrained(path)` loads, and the
                                       tokenizer's files, which `AutoTokenizer.from_pretrained(path)` loads
    checkpoint_to_hf(ckpt, path)       `tformer convert --to-hf`: a checkpoint's model and tokenizer

One small mapping module per Hugging Face `model_type` (gpt2, bert, marian, pegasus, llama) holds what
differs; each provides

    MODEL_TYPE, ARCHITECTURE, FAMILY    "gpt2", "GPT2LMHeadModel", and our family ("gpt", "bert", "seq2seq")
    mismatches(cfg) -> [str]            our config values it cannot express ([] = it can)
    config_from_hf(d) / config_to_hf(cfg)
    state_from_hf(sd, cfg) / state_to_hf(sd, cfg)

Export picks, for the model's family, the first mapping with no mismatches (a GPT with RoPE, RMSNorm and
SwiGLU is a Llama; one with learned positions and LayerNorm is a GPT-2; a post-LN encoder-decoder is a
Marian, a pre-LN one a Pegasus). The helpers the mapping modules share live in `common.py`, below them:
this file imports the mapping modules, and none of them imports it. Every file of a directory read is
reached through `hffiles.py` (confined to the directory; an index's shards too) and read with one-line errors.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Protocol

from safetensors.torch import save_file
from torch import Tensor, nn

from tformer.checkpoints import load_model, tokenizer_dir, verify_source
from tformer.config import TransformerConfig, family_of
from tformer.errors import UserError
from tformer.files import atomic_directory
from tformer.interop import bert, gpt2, llama, marian, pegasus
from tformer.interop.hffiles import CONFIG, WEIGHTS, hf_file, load_tensors, read_config, weight_files
from tformer.ioerrors import writing
from tformer.models import GPT, BertForPretraining, EncoderDecoder
from tformer.models.presets import build_model
from tformer.tokenization import check_vocabulary, load_tokenizer
from tformer.tokenization.backend import BackendTokenizer

TOKENIZER_FILE = "tokenizer.json"
# The special tokens `transformers` names by role (pad_token, ...); our tokenizers give their ids (pad_id, ...).
SPECIAL_ROLES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
EXPORTABLE = (GPT, BertForPretraining, EncoderDecoder)


class Mapping(Protocol):
    """What a mapping module provides (modules satisfy this structurally)."""

    MODEL_TYPE: str
    ARCHITECTURE: str
    FAMILY: str

    def mismatches(self, cfg: Any) -> list[str]: ...
    def config_from_hf(self, d: dict) -> TransformerConfig: ...
    def config_to_hf(self, cfg: Any) -> dict: ...
    def state_from_hf(self, sd: dict[str, Tensor], cfg: Any) -> dict[str, Tensor]: ...
    def state_to_hf(self, sd: dict[str, Tensor], cfg: Any) -> dict[str, Tensor]: ...


# The mapping modules by Hugging Face `model_type`; export tries them in this order.
MAPPINGS: dict[str, Mapping] = {m.MODEL_TYPE: m for m in (gpt2, bert, marian, pegasus, llama)}


# --- the public API -----------------------------------------------------------------------------------


def from_hf(path: str | Path) -> tuple[nn.Module, TransformerConfig]:
    """Read a Hugging Face checkpoint directory into our model (in eval mode, float32) and its config."""
    hf_config, tensors = read_checkpoint(path)
    mapping = MAPPINGS[hf_config["model_type"]]
    try:
        config = mapping.config_from_hf(hf_config)
        state = mapping.state_from_hf(tensors, config)
    except ValueError as e:  # a missing or unexpected weight, an option we lack: say which directory
        raise UserError(f"{path}: {e}") from None
    except (TypeError, KeyError, AttributeError) as e:  # a value of config.json of the wrong type ("12", [12])
        raise UserError(f"{path}: config.json holds a value of the wrong type for a {hf_config['model_type']} "
                         f"config ({type(e).__name__}: {e})") from None
    model = build_model(config)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:  # torch lists every mismatch, over many lines; name the count and the first
        raise UserError(f"{path}: the weights do not fit config.json ({_mismatches(str(e))})") from None
    return model.eval(), config


def _mismatches(message: str) -> str:
    """torch's load_state_dict error, short: 'N size mismatches, the first: name is [a, b] in the weights but
    [c, d] by config.json', or the message on one line."""
    found = re.findall(r"size mismatch for ([\w.]+): copying a param with shape torch\.Size\(\[([\d, ]*)\]\) "
                       r"from checkpoint, the shape in current model is torch\.Size\(\[([\d, ]*)\]\)", message)
    if not found:
        return " ".join(message.split())
    name, weights, ours = found[0]
    return (f"{len(found)} size mismatch{'es' if len(found) > 1 else ''}, the first: {name} is [{weights}] in the "
            f"weights but [{ours}] by config.json")


def to_hf(model: nn.Module, path: str | Path, *, tokenizer: BackendTokenizer | None = None) -> None:
    """Write `model` as a Hugging Face checkpoint directory (config.json + model.safetensors), with the
    files of `tokenizer` if given (`tokenizer_files`). The write is atomic: on any failure nothing new is
    left at `path`."""
    if not isinstance(model, EXPORTABLE):
        raise UserError(f"to_hf writes {', '.join(c.__name__ for c in EXPORTABLE)} models, "
                         f"not {type(model).__name__}")
    config = model.config
    mapping = mapping_for(config)
    hf_config = mapping.config_to_hf(config)
    hf_config["dtype"] = str(next(model.parameters()).dtype).removeprefix("torch.")
    tensors = mapping.state_to_hf(model.state_dict(), config)
    files = {}
    if tokenizer is not None:
        check_vocabulary(tokenizer, config.vocab_size, where=f"to_hf {path}")
        files = tokenizer_files(tokenizer, max_len=config.max_len)
    write_checkpoint(path, hf_config, {k: v.detach().cpu().contiguous() for k, v in tensors.items()}, files=files)


def checkpoint_to_hf(checkpoint: str | Path, path: str | Path) -> nn.Module:
    """Write a checkpoint of ours as a Hugging Face directory (`tformer convert --to-hf`) and return its
    model. Its tokenizer goes along when `transformers` can read it, i.e. when it is built on Hugging Face
    `tokenizers` (BPE, WordPiece, an imported tokenizer.json); a character tokenizer has no such form."""
    verify_source(checkpoint)
    model, _ = load_model(checkpoint)
    tokenizer = load_tokenizer(checkpoint) if tokenizer_dir(checkpoint) else None
    to_hf(model, path, tokenizer=tokenizer if isinstance(tokenizer, BackendTokenizer) else None)
    return model


def tokenizer_files(tokenizer: BackendTokenizer, *, max_len: int) -> dict[str, str]:
    """The files that make `transformers.AutoTokenizer.from_pretrained` give a fast tokenizer equal to
    ours: tokenizer.json as it is, and the special tokens by role. It encodes as our `encode` does (our
    tokenizers have no post-processor, so no <s> or </s> is added: the source of our translators has
    none), and decodes with `skip_special_tokens=True` as our `decode` does (no clean-up of spaces)."""
    special = {f"{role}_token": tokenizer.backend.id_to_token(i) for role in SPECIAL_ROLES
               if (i := getattr(tokenizer, f"{role}_id", None)) is not None}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len, "padding_side": "right",
              "clean_up_tokenization_spaces": False, **special}
    return {"tokenizer.json": tokenizer.backend.to_str(pretty=True),
            "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
            "special_tokens_map.json": json.dumps(special, indent=2) + "\n"}


def mapping_for(config: TransformerConfig) -> Mapping:
    """The Hugging Face mapping that can express `config`, or a ValueError naming the values that stop
    each candidate."""
    family = family_of(config)
    if not config.attention.exact:
        raise UserError(f"this {type(config).__name__} has no Hugging Face equivalent: attention.kind="
                         f"{config.attention.kind} is not exact attention, and the exported model would compute "
                         "something else")
    reasons = []
    for mapping in MAPPINGS.values():
        if mapping.FAMILY != family:
            continue
        problems = mapping.mismatches(config)
        if not problems:
            return mapping
        reasons.append(f"as {mapping.MODEL_TYPE}: {', '.join(problems)}")
    raise UserError(f"this {type(config).__name__} has no Hugging Face equivalent ({'; '.join(reasons)})")


# --- files --------------------------------------------------------------------------------------------


def read_checkpoint(path: str | Path) -> tuple[dict, dict[str, Tensor]]:
    """-> (config.json as a dict, weights by name), every file reached through `hffiles` (confined to the
    directory, read with one-line errors naming the file)."""
    hf_config = read_config(path, supported=tuple(MAPPINGS))
    tensors: dict[str, Tensor] = {}
    for file in weight_files(path):
        tensors.update(load_tensors(file))
    return hf_config, tensors


def tokenizer_file(path: str | Path) -> Path | None:
    """The directory's tokenizer.json (confined like every file read here), or None if it has none."""
    if not (Path(path) / TOKENIZER_FILE).exists() and not (Path(path) / TOKENIZER_FILE).is_symlink():
        return None
    return hf_file(path, TOKENIZER_FILE)


def write_checkpoint(path: str | Path, hf_config: dict, tensors: dict[str, Tensor], *,
                     files: dict[str, str] | None = None) -> None:
    """Write the weights, config.json and `files` (name -> text) as the directory `path`, atomically
    (`files.atomic_directory`): a temporary directory beside it, fsync'd, swapped into place whole. Files
    of an existing `path` that this does not write (a README, a tokenizer written before) are kept."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{path} is a file; to_hf writes a checkpoint directory there")
    if path.is_dir() and any(path.iterdir()) and not (path / CONFIG).is_file():
        raise UserError(f"{path} is a directory of other files (no {CONFIG}: not a Hugging Face model); export "
                         "to a new or empty directory, or to a model directory to update")
    existed = path.exists()
    try:
        with atomic_directory(path, keep_other_files=True) as tmp:
            for name, text in (files or {}).items():
                (tmp / name).write_text(text, encoding="utf-8")
            with writing(tmp / WEIGHTS):  # safetensors' own error for a full disk, as the OSError it is
                save_file(tensors, tmp / WEIGHTS, metadata={"format": "pt"})
            (tmp / CONFIG).write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    except OSError as e:  # a full disk, no permission: said as save_checkpoint says it
        kept = " (what was there is kept)" if existed else ""
        raise UserError(f"cannot write {path}: {e.strerror or e}{kept}") from None
