"""Hugging Face interop: `from_hf(path)` reads a checkpoint directory (config.json + model.safetensors)
into our model; `to_hf(model, path)` writes one that `transformers` loads with `from_pretrained`.
Supported Hugging Face types: gpt2, bert (pre-training heads), marian, llama."""

from tformer.interop.hf import from_hf, mapping_for, registry, to_hf

__all__ = ["from_hf", "mapping_for", "registry", "to_hf"]
