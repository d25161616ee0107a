"""tformer: the Transformer family end to end, on PyTorch.

"The notes", in docstrings here, are the lecture notes on Transformers this library implements: the
original encoder-decoder, the causal Transformer as an autoregressive density, BERT and GPT, their
hyperparameters (d, m, k, h, L, n, ...) and the fixes they list for attention's cost; and the road to the
Transformer, the RNN encoder-decoders with and without attention.
"""

try:  # a memory limit too low to load torch is said in one line (`errors.torch_failed_to_load`)
    from tformer.config import BertConfig, GPTConfig, RNNSeq2SeqConfig, Seq2SeqConfig, TransformerConfig
    from tformer.interop import from_hf, to_hf
    from tformer.models import GPT, Bert, BertClassifier, BertForPretraining, EncoderDecoder, RNNEncoderDecoder
    from tformer.models.presets import build_model, preset
except (ImportError, MemoryError, RuntimeError) as _failure:
    from tformer.errors import torch_failed_to_load

    torch_failed_to_load(_failure)

__all__ = [
    "GPT", "Bert", "BertClassifier", "BertConfig", "BertForPretraining", "EncoderDecoder", "GPTConfig",
    "RNNEncoderDecoder", "RNNSeq2SeqConfig", "Seq2SeqConfig", "TransformerConfig", "build_model", "from_hf",
    "preset", "to_hf",
]
__version__ = "0.1.0"
