"""Beam search's decoder steps, two ways: `EagerSteps`, where the batch holds the live rows only (N * k,
finished sentences dropped, caches reordered to match), and `FixedSteps`, captured decoding's (`captured.py`):
every sentence keeps its K rows from the first step to the last, at fixed places (sentence s, beam j at row
s * K + j), so that one step, the caches' reorder included, is recorded once as a CUDA graph and replayed.

Both give `beam.beam_search` the same log-probabilities (N * k, V) of the live rows, in the same order, and
take the same moves (which live row each new row continues, with which token); the search itself, its
candidates and its finished hypotheses, stays on the host, outside the graph.

B batch (sentences), K beam, N live sentences, k rows a live sentence has now (1 at the first step), t tokens
so far, S source length, V vocabulary, d width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tformer.decoding.captured import DecodeGraphs
from tformer.decoding.static import first_step, fixed_caches
from tformer.decoding.steps import last_log_probs, next_log_probs, reorder_rows, reorder_sources


class EagerSteps:
    """The dynamic steps: caches and rows shrink and move with the live rows. With caches, the source's side
    (memory, its mask, the cross-attention keys and values) is kept once per live sentence, and the decoder
    reads it for all the sentence's beams at once (`nn.attention.Attention`, `nn.alignment.Alignment`): it
    moves only when a sentence ends. Without caches (every step re-runs the whole prefix), once per row."""

    def __init__(self, model: nn.Module, memory: Tensor, src_valid: Tensor, *, slots: int, use_cache: bool) -> None:
        self.model, self.memory, self.src_valid = model, memory, src_valid  # (N or N * k, S, d), (N or N * k, S)
        self.caches = model.new_caches(memory.shape[0], slots) if use_cache else None

    def log_probs(self, prefix: Tensor, sentence: Tensor, k: int) -> Tensor:
        """(N * k, V) for the live rows: k of each live sentence `sentence` (N,), whose tokens so far are
        prefix (N * k, t)."""
        return next_log_probs(self.model, prefix, self.memory, self.src_valid, caches=self.caches)

    def move(self, index: Tensor, tokens: Tensor, prefix: Tensor, *, was: Tensor, k: int, now: Tensor) -> Tensor:
        """New live rows: row i continues old live row index[i] (N' * K,) with tokens[i]; returns their
        prefixes (N' * K, t + 1). `was` (N,) and `k`: the live sentences and their rows each before the move;
        `now` (N',) the live sentences after it."""
        if self.caches is None:  # the sources are re-read at every step, one per row
            prefix, self.memory, self.src_valid = reorder_rows(index, None, prefix, self.memory, self.src_valid)
        else:
            (prefix,) = reorder_rows(index, self.caches, prefix, same_sources=True)  # the rows' own caches move
            if now.numel() != was.numel():  # sentences ended: their sources leave
                sources = index.view(now.numel(), -1)[:, 0] // k  # (N',) each live sentence's place before
                self.memory, self.src_valid = reorder_sources(sources, self.caches, self.memory, self.src_valid)
        return torch.cat([prefix, tokens[:, None]], dim=1)


class FixedSteps:
    """The fixed-shape steps: B * K rows throughout; a move writes which row each row continues (`order`) and
    its token, and the replayed step reorders the self-attention caches in place, then decodes one token."""

    def __init__(self, model: nn.Module, graphs: DecodeGraphs, *, rows: int, beam: int, source: int,
                 slots: int) -> None:
        p = next(model.parameters())
        config = model.config
        n = rows * beam
        self.model, self.rows, self.beam = model, rows, beam
        self.pad_id, self.eos_id, self.start_id = config.pad_id, config.eos_id, config.decoder_start_id
        self.position = torch.zeros(1, dtype=torch.long, device=p.device)  # slot of the token fed next
        self.token = torch.zeros(n, 1, dtype=torch.long, device=p.device)  # (B * K, 1)
        self.order = torch.arange(n, device=p.device)  # (B * K,) the row each row continues
        self.valid = torch.zeros(n, slots, dtype=torch.bool, device=p.device)  # (B * K, S_max)
        self.src_valid = torch.zeros(n, source, dtype=torch.bool, device=p.device)  # (B * K, S)
        self.memory = torch.zeros(n, source, config.d_model, dtype=p.dtype, device=p.device)  # (B * K, S, d)
        self.out = torch.zeros(n, config.vocab_size, device=p.device)  # (B * K, V) float32 log-probabilities
        self.caches = fixed_caches(model, n, slots, self.position)
        self.cross: list[tuple[Tensor, Tensor]] = []
        self.graph = graphs.step_graph(self.step)

    def step(self) -> None:
        for cache in self.caches:
            cache.mixer_state.reorder(self.order)
        self.valid.index_fill_(1, self.position, True)
        logits = self.model.decode(self.token, self.memory, self.src_valid, tgt_valid=self.valid,
                                   caches=self.caches)  # (B * K, 1, V)
        self.out.copy_(last_log_probs(logits, pad_id=self.pad_id, eos_id=self.eos_id))
        self.position.add_(1)

    def start(self, memory: Tensor, src_valid: Tensor) -> None:
        """A new batch: memory (B, S, d) and src_valid (B, S) repeated for the beams, and the first step run
        eagerly (it fills the cross-attention keys/values, then kept where the graph reads them)."""
        self.memory.copy_(memory.repeat_interleave(self.beam, dim=0))
        self.src_valid.copy_(src_valid.repeat_interleave(self.beam, dim=0))
        self.valid.zero_()
        self.position.zero_()
        self.token.fill_(self.start_id)
        torch.arange(self.order.numel(), out=self.order)
        self.cross = first_step(self.caches, self.cross, self.step)

    def log_probs(self, prefix: Tensor, sentence: Tensor, k: int) -> Tensor:
        """(N * k, V) of the live rows: the first k of each live sentence `sentence` (N,)."""
        return self.out.view(self.rows, self.beam, -1)[sentence, :k].flatten(0, 1)

    def move(self, index: Tensor, tokens: Tensor, prefix: Tensor, *, was: Tensor, k: int, now: Tensor) -> Tensor:
        """As `EagerSteps.move`, then the step replayed. `now` (N',): the live sentences after the move."""
        parent = was[index // k] * self.beam + index % k  # (N' * K,) each new row's parent, as a fixed row
        place = (now[:, None] * self.beam + torch.arange(self.beam, device=now.device)).flatten()  # (N' * K,)
        order = torch.arange(self.order.numel(), device=now.device)
        self.order.copy_(order.index_copy(0, place, parent))
        self.token.index_copy_(0, place, tokens[:, None])
        self.graph()
        return torch.cat([prefix.index_select(0, index), tokens[:, None]], dim=1)


__all__ = ["EagerSteps", "FixedSteps"]
