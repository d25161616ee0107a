"""tformer: the Transformer family end to end, on PyTorch.

"The notes", in docstrings here, are the lecture notes on Transformers this library implements: the
original encoder-decoder, the causal Transformer as an autoregressive density, BERT and GPT, their
hyperparameters (d, m, k, h, L, n, ...) and the fixes they list for attention's cost; and the road to the
Transformer, the RNN encoder-decoders with and without attention.

The names below are imported on first use (PEP 562), so `import tformer` imports no torch: the command line
(`tformer.__main__`) installs its Ctrl-C handling before anything heavy is imported, and `--help` stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tformer.config import BertConfig, GPTConfig, RNNSeq2SeqConfig, Seq2SeqConfig, TransformerConfig
    from tformer.interop import from_hf, to_hf
    from tformer.models import GPT, Bert, BertClassifier, BertForPretraining, EncoderDecoder, RNNEncoderDecoder
    from tformer.models.presets import build_model, preset

_HOMES = {  # a public name -> the module that defines it
    **dict.fromkeys(("BertConfig", "GPTConfig", "RNNSeq2SeqConfig", "Seq2SeqConfig", "TransformerConfig"),
                    "tformer.config"),
    **dict.fromkeys(("from_hf", "to_hf"), "tformer.interop"),
    **dict.fromkeys(("GPT", "Bert", "BertClassifier", "BertForPretraining", "EncoderDecoder", "RNNEncoderDecoder"),
                    "tformer.models"),
    **dict.fromkeys(("build_model", "preset"), "tformer.models.presets"),
}

__all__ = [
    "GPT", "Bert", "BertClassifier", "BertConfig", "BertForPretraining", "EncoderDecoder", "GPTConfig",
    "RNNEncoderDecoder", "RNNSeq2SeqConfig", "Seq2SeqConfig", "TransformerConfig", "build_model", "from_hf",
    "preset", "to_hf",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """A public name, imported from its module when first asked for (`tformer.GPT`, `from tformer import
    preset`); a subpackage by its name (`tformer.interop`)."""
    try:
        if name in _HOMES:
            value = getattr(importlib.import_module(_HOMES[name]), name)
        else:
            try:
                value = importlib.import_module(f"tformer.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"tformer.{name}":
                    raise
                raise AttributeError(f"module 'tformer' has no attribute {name!r}") from None
    except (ImportError, MemoryError, RuntimeError) as e:  # torch under a memory limit too low: one line
        from tformer.errors import torch_failed_to_load

        torch_failed_to_load(e)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
