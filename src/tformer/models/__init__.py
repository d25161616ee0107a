"""The three Transformer families, assembled from the same parts: `EncoderDecoder` (the paper), `Bert`
(encoder-only) and `GPT` (decoder-only); and the road to them, `RNNEncoderDecoder` (with or without
attention). The two encoder-decoders share one interface, `protocols.Translator`, which decoding uses
(the package's exports are the model classes a checkpoint's config.yaml may name)."""

from tformer.models.bert import Bert, BertClassifier, BertForPretraining
from tformer.models.gpt import GPT
from tformer.models.rnn import RNNEncoderDecoder
from tformer.models.seq2seq import EncoderDecoder

__all__ = ["Bert", "BertClassifier", "BertForPretraining", "EncoderDecoder", "GPT", "RNNEncoderDecoder"]
