"""Decoder-only Transformer (GPT, Radford et al. 2018/2019): a causal stack of self-attention layers and a
language-model head. As a density it is a NADE: p(x_t | x_<t) = softmax(logits_{t-1}).

B batch, T new length, S cached + new length, d width, V vocabulary.
"""

from __future__ import annotations

from torch import Tensor, nn

from tformer.config import GPTConfig
from tformer.models.builders import build_embeddings, build_stack
from tformer.models.init import init_weights
from tformer.models.stacks import positions_for
from tformer.nn.kv_cache import LayerCache


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed = build_embeddings(config, tokens)
        self.decoder = build_stack(config, n_layers=config.n_layers, causal=True)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        init_weights(self, config.init, n_layers=config.n_layers)
        if config.tie_embeddings:
            self.lm_head.weight = tokens.weight

    def forward(self, ids: Tensor, *, valid: Tensor | None = None, positions: Tensor | None = None,
                caches: list[LayerCache] | None = None, last: int | None = None) -> Tensor:
        """ids (B, T); valid (B, S) True at real tokens among all keys so far (None: all real);
        positions (B, T) (None: counted from each row's first real token, continuing from the cache; with
        neither `valid` nor `positions`, one row (1, T) shared by the batch). Without `valid` there is no
        mask, and causal self-attention takes the fused kernel's own causal path (flash attention on a GPU).
        `last`: the logits of the last `last` positions only (None: all). A prefill needs one position's, and
        the head over every prompt position is about an eighth of its time (d 512, 8,192 tokens).
        Returns logits (B, T, V), or (B, last, V)."""
        if last is not None and not 0 < last <= ids.shape[1]:
            raise ValueError(f"last={last}: the logits of 1 to {ids.shape[1]} last positions (the ids' length)")
        offset = 0 if caches is None else caches[0].mixer_state.length
        if positions is None:
            positions = positions_for(ids, offset, valid=valid)
        x = self.embed(ids, positions)  # (B, T, d)
        mask = None if valid is None else valid[:, None, None, :]  # (B, 1, 1, S)
        h = self.decoder(x, mask=mask, causal=True, positions=positions, caches=caches)  # (B, T, d)
        return self.lm_head(h if last is None else h[:, -last:])

    def new_caches(self, batch: int, max_len: int) -> list[LayerCache]:
        p = next(self.parameters())  # not lm_head's: an int8 one (tformer.quant) has no weight tensor
        return self.decoder.new_caches(batch=batch, max_len=max_len, dtype=p.dtype, device=p.device)


def left_padded_positions(valid: Tensor) -> Tensor:
    """(B, T) validity of a left-padded batch -> positions counting from each row's first real token."""
    return positions_for(valid, valid=valid)


__all__ = ["GPT", "left_padded_positions"]
