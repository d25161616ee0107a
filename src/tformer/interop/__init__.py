"""Hugging Face interop: `from_hf(path)` reads a checkpoint directory (config.json + model.safetensors)
into our model; `to_hf(model, path, tokenizer=...)` writes one that `transformers` loads with
`from_pretrained` (model and tokenizer); `checkpoint_to_hf` does so for a checkpoint of ours.
Supported Hugging Face types: gpt2, bert (pre-training heads), marian, pegasus (pre-LN
encoder-decoders), llama. CTranslate2 export (translators and GPTs, the optional `ctranslate2` package):
`tformer.interop.ct2`."""

from tformer.interop.hf import MAPPINGS, checkpoint_to_hf, from_hf, mapping_for, to_hf

__all__ = ["MAPPINGS", "checkpoint_to_hf", "from_hf", "mapping_for", "to_hf"]
