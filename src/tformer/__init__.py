"""tformer: the Transformer family end to end, on PyTorch."""

from tformer.config import BertConfig, GPTConfig, Seq2SeqConfig, TransformerConfig
from tformer.interop import from_hf, to_hf
from tformer.models import GPT, Bert, BertClassifier, BertForPretraining, EncoderDecoder
from tformer.models.presets import build_model, preset

__all__ = [
    "GPT", "Bert", "BertClassifier", "BertConfig", "BertForPretraining", "EncoderDecoder", "GPTConfig",
    "Seq2SeqConfig", "TransformerConfig", "build_model", "from_hf", "preset", "to_hf",
]
__version__ = "0.1.0"
