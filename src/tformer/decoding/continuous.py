"""Continuous batching of GPT generation: sequences join a running batch and leave it at token boundaries.

    batch = Running(model, rows=16)
    batch.admit(key, prompt, max_new_tokens=..., settings=..., on_token=...)   prefill alone, first token drawn
    batch.step()                                   one decode step: every live row's newest token fed at once
    batch.finished()                               [(key, Finished)] of the rows done since the last call

A new prompt is prefilled alone (batch 1, no padding: the very computation `generate` makes for it alone),
its first token drawn from those logits, and its keys/values copied into a row of the running batch's
caches. The caches are one buffer per layer, (R, Hk, C, D): every live row's tokens sit right-aligned in the
first C columns (left padding, as `generate` pads a batch), so each decode step writes one new column for all
rows. A row's positions count from its own first token and a key-padding mask hides the columns before it,
so each row attends to exactly its own keys at exactly the positions it has alone; ALiBi and windowed
attention see the same distances between its tokens, since its padding is all on the left. A prompt longer
than C shifts the other rows right (more padding); a row that finishes leaves at once: the last row moves
into its place, and columns no live row needs any more are dropped from the left.

Each row draws with its own settings and its own generator (seeded as its seed says, else torch's global
one), so a seeded row takes the random numbers it takes alone. The tokens equal those of `generate` for the
same prompt alone; the logits may differ from alone's in the last bits (a matmul over several rows, a masked
attention), which can change a token only where two are within rounding of each other.

Only models whose every layer keeps a key/value cache decode this way (`refuses`): a recurrent state (linear
attention, SSM) cannot take padding on the left.

R rows (buffer), N live rows, C columns in use, Hk key/value heads, D head width, P prompt length, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from tformer.decoding.decoder import Decoder, decoder_of
from tformer.decoding.generate import check_prompts
from tformer.decoding.sampling import best, sample_next
from tformer.decoding.settings import SampleConfig
from tformer.decoding.steps import eval_mode
from tformer.nn.kv_cache import KVCache, LayerCache


@dataclass
class Finished:
    """A row's end: its new tokens (without the stop token), why it ended ("stop", "length"), or the error
    that ended it alone."""

    tokens: list[int]
    finish: str
    error: Exception | None = None


@dataclass
class _Row:
    key: Hashable
    ids: list[int]  # the prompt
    max_new: int
    settings: SampleConfig
    stops: tuple[int, ...]
    on_token: Callable[[int], None] | None
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)  # drawn so far; the newest is not in the cache yet
    cached: int = 0  # positions in the cache


def refuses(model: nn.Module) -> str | None:
    """Why `model` cannot decode in a continuous batch (a layer whose state is no key/value cache), or None."""
    kinds = {type(c.mixer_state).__name__ for c in model.new_caches(1, 1)}
    return None if kinds == {"KVCache"} else f"its layers keep {', '.join(sorted(kinds))}, not only key/value caches"


class Running:
    """A running batch of at most `rows` sequences of `model` (or a `Decoder`, whose layout it uses).
    `eos_id`: the stop token of a row whose settings stop at the end of text. Not thread-safe: one thread
    admits and steps."""

    def __init__(self, model: nn.Module | Decoder, *, rows: int, eos_id: int | None = None) -> None:
        self.decoder = decoder_of(model)
        self.model, self.rows, self.eos_id = self.decoder.model, rows, eos_id
        self.device = next(self.model.parameters()).device
        self.live: list[_Row] = []  # row i of the buffers is live[i]
        self.columns = 0  # C: the longest live row's cached positions
        self.k: list[Tensor] = []  # per layer (R, Hk, C_max, D)
        self.v: list[Tensor] = []
        self._done: list[tuple[Hashable, Finished]] = []

    # --- joining ------------------------------------------------------------------------------------------

    @torch.inference_mode()
    def admit(self, key: Hashable, prompt: Sequence[int], *, max_new_tokens: int, settings: SampleConfig,
              on_token: Callable[[int], None] | None = None) -> None:
        """Start `prompt` (token ids): prefill it alone and draw its first token; it joins the batch unless
        that already ends it. An error (its checks, its prefill, its draw) ends this row alone, with the error."""
        if len(self.live) >= self.rows:
            raise RuntimeError(f"the running batch is full ({self.rows} rows); admit after a row has finished")
        stops = (self.eos_id,) if settings.stop and self.eos_id is not None else ()
        generator = (None if settings.seed is None else
                     torch.Generator(device=self.device).manual_seed(settings.seed))
        row = _Row(key, list(prompt), max_new_tokens, settings, stops, on_token, generator)
        try:
            check_prompts([row.ids], max_new_tokens=max_new_tokens, max_len=self.model.config.max_len)
            if max_new_tokens == 0:
                self._finish(row, "length")
                return
            caches = self.model.new_caches(1, len(row.ids))
            with eval_mode(self.model, rows=1, layout=self.decoder.layout):
                ids = torch.tensor([row.ids], dtype=torch.long, device=self.device)  # (1, P)
                logits = self.model(ids, caches=caches, last=1)[:, -1].float()  # (1, V): as `generate`'s prefill
            row.cached = len(row.ids)
            if self._draw(row, logits, None):
                self._join(row, caches)
        except Exception as e:  # noqa: BLE001 - this row's error, handed to its caller
            self._finish(row, "error", e)

    def _join(self, row: _Row, caches: list[LayerCache]) -> None:
        """Copy the prefilled keys/values (1, Hk, P, D) into the next row, right-aligned at column C."""
        n, p = len(self.live), row.cached
        if not self.k:
            self.k = [c.mixer_state.k.new_zeros(0, *c.mixer_state.k.shape[1:2], 0, c.mixer_state.k.shape[3])
                      for c in caches]
            self.v = [t.clone() for t in self.k]
        if p > self.columns:  # more left padding for the others
            self._reserve(n + 1, p)
            self._shift(p - self.columns)
        self._reserve(n + 1, self.columns)
        c = self.columns
        for k, v, cache in zip(self.k, self.v, caches, strict=True):
            k[n, :, c - p : c] = cache.mixer_state.k[0, :, :p]
            v[n, :, c - p : c] = cache.mixer_state.v[0, :, :p]
        self.live.append(row)

    # --- one step -----------------------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> None:
        """Feed every live row its newest token (one new column) and draw the next; rows that end leave. An
        error of the model's forward ends every live row with it (the batch is empty afterwards)."""
        if not self.live:
            return
        n, c = len(self.live), self.columns
        try:
            self._reserve(n, c + 1)
            lengths = torch.tensor([r.cached + 1 for r in self.live], device=self.device)  # (N,)
            valid = torch.arange(c + 1, device=self.device)[None] >= (c + 1 - lengths)[:, None]  # (N, C + 1)
            ids = torch.tensor([[r.tokens[-1]] for r in self.live], device=self.device)  # (N, 1)
            positions = (lengths - 1)[:, None]  # (N, 1): the real tokens before each row's newest
            caches = [LayerCache(_at(KVCache.sharing(k[:n], v[:n]), c)) for k, v in zip(self.k, self.v, strict=True)]
            with eval_mode(self.model, rows=n, layout=self.decoder.layout):
                logits = self.model(ids, valid=None if bool(valid.all()) else valid, positions=positions,
                                    caches=caches)[:, -1].float()  # (N, V)
        except Exception as e:  # noqa: BLE001 - a fault of the batch: every row ends with it
            for row in self.live:
                self._finish(row, "error", e)
            self.live, self.columns = [], 0
            return
        self.columns = c + 1
        greedy = best(logits).tolist()  # (N,): every greedy row's token at once
        ended = []
        for i, row in enumerate(self.live):
            row.cached += 1
            try:
                if not self._draw(row, logits[i : i + 1], greedy[i]):
                    ended.append(i)
            except Exception as e:  # noqa: BLE001 - this row's error alone
                self._finish(row, "error", e)
                ended.append(i)
        for i in reversed(ended):
            self._leave(i)
        self._trim()

    def _draw(self, row: _Row, logits: Tensor, argmax: int | None) -> bool:
        """Draw `row`'s next token from its logits (1, V) as `generate` does alone; hand it on. False when
        the row has ended (a stop token, or its max_new tokens)."""
        s = row.settings
        repetition = s.repetition
        if argmax is not None and s.temperature == 0 and repetition is None:
            token = argmax
        else:
            if repetition is not None:
                history = torch.tensor([row.ids + row.tokens], dtype=torch.long, device=self.device)  # (1, S)
                logits = repetition.apply(logits, history)
            token = int(sample_next(logits, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                                    generator=row.generator)[0])
        if token in row.stops:
            self._finish(row, "stop")
            return False
        row.tokens.append(token)
        if row.on_token is not None:
            row.on_token(token)
        if len(row.tokens) == row.max_new:
            self._finish(row, "length")
            return False
        return True

    # --- leaving ------------------------------------------------------------------------------------------

    def drop(self, key: Hashable) -> None:
        """End the live row of `key` now (its caller went away); nothing is reported for it."""
        for i, row in enumerate(self.live):
            if row.key == key:
                self._leave(i)
                self._trim()
                return

    def finished(self) -> list[tuple[Hashable, Finished]]:
        """The rows that ended since the last call, with their tokens or error, in the order they ended."""
        done, self._done = self._done, []
        return done

    def _finish(self, row: _Row, finish: str, error: Exception | None = None) -> None:
        self._done.append((row.key, Finished(row.tokens, finish, error)))

    def _leave(self, i: int) -> None:
        """Free row i: the last live row moves into its place."""
        last = len(self.live) - 1
        if i != last:
            for k, v in zip(self.k, self.v, strict=True):
                k[i, :, : self.columns] = k[last, :, : self.columns]
                v[i, :, : self.columns] = v[last, :, : self.columns]
            self.live[i] = self.live[last]
        self.live.pop()

    def _trim(self) -> None:
        """Drop the columns on the left that no live row uses (all of them when none is live)."""
        longest = max((r.cached for r in self.live), default=0)
        if longest < self.columns:
            self._shift(longest - self.columns)

    # --- the buffers --------------------------------------------------------------------------------------

    def _shift(self, by: int) -> None:
        """Move the live rows' columns right (`by` > 0: new padding on the left) or left (< 0: drop the first)."""
        n, c = len(self.live), self.columns
        for t in (*self.k, *self.v):
            if by > 0:
                t[:n, :, by : c + by] = t[:n, :, :c].clone()
            elif c + by > 0:
                t[:n, :, : c + by] = t[:n, :, -by:c].clone()
        self.columns = c + by

    def _reserve(self, rows: int, columns: int) -> None:
        """Buffers of at least `rows` x `columns` (doubling, up to `self.rows` and the model's max_len)."""
        have_rows, have_columns = self.k[0].shape[0], self.k[0].shape[2]
        if rows <= have_rows and columns <= have_columns:
            return
        new_rows = min(self.rows, max(rows, 2 * have_rows)) if rows > have_rows else have_rows
        limit = max(self.model.config.max_len, columns)
        new_columns = min(limit, max(columns, 2 * have_columns, 16)) if columns > have_columns else have_columns
        n, c = len(self.live), self.columns
        for buffers in (self.k, self.v):
            for j, old in enumerate(buffers):
                new = old.new_zeros(new_rows, old.shape[1], new_columns, old.shape[3])
                new[:n, :, :c] = old[:n, :, :c]
                buffers[j] = new


def _at(cache: KVCache, length: int) -> KVCache:
    cache.length = length
    return cache


__all__ = ["Finished", "Running", "refuses"]
