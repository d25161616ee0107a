"""A model held for decoding, with the state its decoding keeps from one call to the next.

    Decoder(model, capture=None)   the model; its CPU weight layout (`layout.DecodingLayout`); its captured
                                   steps and their fixed buffers (`captured.DecodeGraphs`); and whether to
                                   decode with fixed shapes: None, where it pays (CUDA, when the model allows)

Greedy search, beam search and generation take a `Decoder` (or a bare model, which gets one for that call
alone), so the layout and the graphs travel with the model they belong to, as a loaded checkpoint
(`inference.Loaded.decoder`) or a server holds them: a server or a file of batches makes each copy and
captures each shape once.
"""

from __future__ import annotations

from torch import nn

from tformer.decoding.captured import DecodeGraphs, use_capture
from tformer.decoding.layout import DecodingLayout


class Decoder:
    """`model` with its decoding layout and captured steps. `capture`: True decodes with fixed-shape steps
    (captured as CUDA graphs on a GPU, eager on the CPU; a UserError where the model cannot), False with the
    dynamic ones, None with the fixed ones where they pay. `sync_every`, `record` and `compile` are the
    captured steps' (`captured.DecodeGraphs`)."""

    def __init__(self, model: nn.Module, *, capture: bool | None = None, sync_every: int | None = None,
                 record: bool = True, compile: bool = False) -> None:
        self.model = model
        self.capture = capture
        self.layout = DecodingLayout(model)
        self.graphs = DecodeGraphs(model, sync_every=sync_every, record=record, compile=compile)

    def fixed(self, *, use_cache: bool = True) -> bool:
        """Whether this call decodes with the fixed-shape steps (`captured.use_capture`)."""
        return use_capture(self.capture, self.model, use_cache=use_cache)

    def clear(self) -> None:
        """Drop the layout's copies and the captured steps (the next call makes them again)."""
        self.layout.clear()
        self.graphs.clear()


def decoder_of(model: nn.Module | Decoder) -> Decoder:
    """`model`'s decoder: itself if it is one, else a new one for this call alone."""
    return model if isinstance(model, Decoder) else Decoder(model)


def model_of(model: nn.Module | Decoder) -> nn.Module:
    """The model itself, held by a decoder or not."""
    return model.model if isinstance(model, Decoder) else model


__all__ = ["Decoder", "decoder_of", "model_of"]
