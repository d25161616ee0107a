"""Text generation with a decoder-only model (GPT): the NADE p(x_t | x_<t) sampled one token at a time.

    prefill:  logits = model(prompt)                    the whole left-padded prompt batch, once
    decode:   x_t ~ p(. | x_<t); logits = model(x_t)    one new token per row per step

Batches: prompts of different lengths are left-padded, so every row's newest token sits in the last
column. Each row's positions count from its own first real token (`left_padded_positions`), and a
key-padding mask `valid` (B, S) over all keys so far (prompt + generated) hides the padding.

Incremental decoding (`use_cache=True`): the keys/values of earlier positions come from preallocated
`KVCache`s sized prompt + max_new_tokens, so each step feeds only the newest token. Without caches every
step re-runs the whole sequence: the reference the cached path is tested against (same logits, same
tokens). A row stops at any of `stop_tokens` (which is not returned); finished rows leave the batch, their
caches with them; the batch ends when every row has stopped or after `max_new_tokens`.

B batch (prompts), P padded prompt length, S keys so far, N rows still generating, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from tformer.configio import shown
from tformer.data.device import device_of
from tformer.data.padding import pad, valid_mask
from tformer.decoding.constraints import NONE, Repetition
from tformer.decoding.decoder import Decoder, decoder_of
from tformer.decoding.sampling import check_sampling, sample_next
from tformer.decoding.static import Sampler, generate_fixed
from tformer.decoding.steps import eval_mode, next_logits, reorder_rows
from tformer.errors import UserError


def left_pad(prompts: Sequence[Sequence[int]], *, pad_id: int, device: torch.device | None = None
             ) -> tuple[Tensor, Tensor]:
    """Token lists -> ids (B, P) left-padded with `pad_id`, and valid (B, P) True at real tokens."""
    ids = pad(prompts, pad_id, "left", device=device)  # (B, P)
    return ids, valid_mask([len(p) for p in prompts], width=ids.shape[1], side="left", device=device)  # (B, P)


def check_max_new_tokens(n: int, *, what: str = "max_new_tokens", most: int | None = None, limit: str = "") -> None:
    """The one check of a number of tokens to generate (`tformer generate --max-new-tokens`, the server's
    max_new_tokens, the library's): from 0 (`most`: up to that, `limit` naming where that bound comes from); a
    ValueError naming it as `what` otherwise."""
    if n < 0:
        raise UserError(f"{what}={n} must be >= 0")
    if most is not None and n > most:
        raise UserError(f"{what}={shown(n)} is not allowed; give 0 to {most}{f' ({limit})' if limit else ''}")


def check_prompts(prompts: Sequence[Sequence[int]], *, max_new_tokens: int, max_len: int) -> None:
    """A ValueError for no prompts, an empty prompt, or more tokens than the model has positions for."""
    if len(prompts) == 0:
        raise UserError("prompts is empty; give at least one prompt (a list of token ids)")
    empty = [i for i, p in enumerate(prompts) if len(p) == 0]
    if empty:
        raise UserError(f"prompt(s) {empty} are empty; each needs at least one token (e.g. a start token)")
    check_max_new_tokens(max_new_tokens)
    longest = max(len(p) for p in prompts)
    if longest + max_new_tokens > max_len:
        raise UserError(f"the longest prompt ({longest} tokens) + max_new_tokens={max_new_tokens} = "
                         f"{longest + max_new_tokens} is more than the model's max_len={max_len}")


@torch.inference_mode()
def generate(model: nn.Module | Decoder, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             stop_tokens: Sequence[int] = (), seed: int | None = None, use_cache: bool = True, pad_id: int = 0,
             on_token: Callable[[int, int], None] | None = None,
             repetition: Repetition | None = None) -> list[list[int]]:
    """Continue each prompt (a list of token ids) by up to `max_new_tokens` tokens.

    Returns the new tokens only, one list per prompt, without the stop token that ended it. Sampling:
    temperature 0 is greedy (argmax), otherwise top-k / top-p filtered sampling (see `sampling.py`);
    `seed` makes the draws reproducible (None: torch's global generator). `pad_id` fills the left padding
    (masked out; any id in the vocabulary). `on_token(row, token_id)` is called for each returned token
    as it is produced, e.g. to stream text to a terminal. The model runs in eval mode and gets its mode
    back afterwards. `model`: a model, or a `Decoder` holding it with its decoding layout and captured steps
    across calls (`decoding.decoder`). `repetition`: repeats of the prompt's and the new tokens penalised or banned
    (`constraints.py`), before temperature and filters. The decoder says whether to decode with fixed-shape
    steps captured as a CUDA graph (on the CPU the same steps run eagerly); a bare model does where it pays
    (on CUDA, when the model allows it: `captured.capture_problem`)."""
    decoder = decoder_of(model)
    model = decoder.model
    check_prompts(prompts, max_new_tokens=max_new_tokens, max_len=model.config.max_len)
    check_sampling(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    out: list[list[int]] = [[] for _ in prompts]
    if max_new_tokens == 0:
        return out
    device = device_of(model)
    if decoder.fixed(use_cache=use_cache):
        with eval_mode(model, rows=len(prompts), layout=decoder.layout):
            ids, valid = left_pad(prompts, pad_id=pad_id, device=device)  # (B, P)
            return generate_fixed(model, ids, valid, max_new_tokens=max_new_tokens,
                                  sampler=Sampler(temperature=temperature, top_k=top_k, top_p=top_p),
                                  stop_tokens=stop_tokens, seed=seed, repetition=repetition, on_token=on_token,
                                  graphs=decoder.graphs)
    generator = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    stops = torch.tensor(list(stop_tokens), dtype=torch.long, device=device)  # (number of stop tokens,)
    with eval_mode(model, rows=len(prompts), layout=decoder.layout):
        ids, valid = left_pad(prompts, pad_id=pad_id, device=device)  # (B, P)
        if len({len(p) for p in prompts}) == 1:
            valid = None  # no padding: no mask in any layer at any step
        caches = model.new_caches(len(prompts), ids.shape[1] + max_new_tokens) if use_cache else None
        row = torch.arange(len(prompts), device=device)  # (N,) prompt of each live row
        for step in range(max_new_tokens):
            logits = next_logits(model, ids, valid, caches=caches)  # (N, V)
            if repetition is not None:
                logits = repetition.apply(logits, ids if valid is None else ids.masked_fill(~valid, NONE))
            token = sample_next(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
            stopped = torch.isin(token, stops)  # (N,)
            for r, t, s in zip(row.tolist(), token.tolist(), stopped.tolist(), strict=True):
                if not s:
                    out[r].append(t)
                    if on_token is not None:
                        on_token(r, t)
            if step == max_new_tokens - 1 or bool(stopped.all()):
                break
            ids = torch.cat([ids, token[:, None]], dim=1)  # (N, S + 1)
            if valid is not None:
                valid = torch.cat([valid, valid.new_ones(valid.shape[0], 1)], dim=1)  # (N, S + 1)
            if bool(stopped.any()):  # drop finished rows, caches included
                keep = (~stopped).nonzero().flatten()
                row, ids = reorder_rows(keep, caches, row, ids)
                valid = None if valid is None else valid.index_select(0, keep)
    return out


def generate_greedy(model: nn.Module | Decoder, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                    stop_tokens: Sequence[int] = (), use_cache: bool = True, pad_id: int = 0,
                    on_token: Callable[[int, int], None] | None = None,
                    repetition: Repetition | None = None) -> list[list[int]]:
    """`generate` with temperature 0: the most likely token at every step (lowest id on ties)."""
    return generate(model, prompts, max_new_tokens=max_new_tokens, temperature=0.0, stop_tokens=stop_tokens,
                    use_cache=use_cache, pad_id=pad_id, on_token=on_token, repetition=repetition)


__all__ = ["check_max_new_tokens", "check_prompts", "generate", "generate_greedy", "left_pad", "next_logits"]
