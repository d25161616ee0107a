"""The fixed-shape decoding loops behind `capture` (`captured.py` says why the shapes are fixed): GPT
generation (`generate` calls `generate_fixed`) and the encoder-decoder's greedy search (`greedy` calls
`greedy_fixed`); beam search's fixed steps are `beam_steps.FixedSteps`, built from the parts here. Each
gives the tokens of the dynamic loop it stands for: the same prefill, the same positions, the same keys
attended (the mask hides the rest), the same draws from the same generator.

One step, on buffers that outlive it (`Generation`, `Translation`), all on the device:

    valid[:, position] = True                    the fed token's slot becomes a real key
    logits = model(token, positions, caches)     the FixedKVCaches write at `position`, read every slot
    token = argmax or race-draw(filtered softmax) after the repetition rule, over a right-aligned history
    out[:, column] = token; position += 1; positions += 1

B batch, P padded prompt length, S_max slots of the self-attention cache, S source length, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from tformer.decoding.captured import DecodeGraphs, bucket
from tformer.decoding.constraints import NONE, Repetition, force, forced_at
from tformer.decoding.sampling import best, filtered_probs, race, sample_next
from tformer.decoding.steps import last_log_probs, next_logits
from tformer.nn.kv_cache import FixedKVCache, KVCache, LayerCache


class Sampler:
    """How a step picks its token from float32 scores (B, V): argmax at temperature 0, else a race draw
    from the filtered softmax (`sample_next`'s draw, without its host checks)."""

    def __init__(self, *, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None) -> None:
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p

    def __call__(self, scores: Tensor, generator: torch.Generator | None) -> Tensor:
        if self.temperature == 0:
            return best(scores)  # (B,)
        probs = filtered_probs(scores, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)
        return race(probs, generator=generator)


def fixed_caches(model: nn.Module, rows: int, slots: int, position: Tensor) -> list[LayerCache]:
    """The model's caches for `rows` x `slots`, self-attention as FixedKVCaches writing at `position`."""
    caches = model.new_caches(rows, slots)
    return [LayerCache(FixedKVCache(c.mixer_state.k, c.mixer_state.v, position), c.cross_kv) for c in caches]


def prefill_caches(fixed: list[LayerCache]) -> list[LayerCache]:
    """Dynamic caches over the fixed caches' buffers, for the steps run outside the graph."""
    return [LayerCache(KVCache.sharing(c.mixer_state.k, c.mixer_state.v), c.cross_kv) for c in fixed]


def first_step(caches: list[LayerCache], kept: list[tuple[Tensor, Tensor]],
               step: Callable[[], None]) -> list[tuple[Tensor, Tensor]]:
    """An encoder-decoder's first step for a new batch, run eagerly: `step` with the cross-attention
    keys/values emptied computes them from the new memory; they are then copied into `kept` (the tensors a
    captured step reads: at the first batch, those just computed). Returns `kept`."""
    for c in caches:
        c.cross_kv.k = c.cross_kv.v = None
    step()
    kept = kept or [(c.cross_kv.k, c.cross_kv.v) for c in caches]
    for c, (k, v) in zip(caches, kept, strict=True):
        c.cross_kv.k, c.cross_kv.v = k.copy_(c.cross_kv.k), v.copy_(c.cross_kv.v)
    return kept


def push(history: Tensor, token: Tensor) -> None:
    """history (B, H) right-aligned, newest last <- token (B,), in place: the repetition rule's view of what a
    row holds, with a fixed shape (NONE where nothing is, as left padding)."""
    history.copy_(torch.cat([history[:, 1:], token[:, None]], dim=1))


class Generation:
    """The buffers and the step of GPT generation for one (rows, slots, settings)."""

    def __init__(self, model: nn.Module, graphs: DecodeGraphs, *, rows: int, slots: int, sampler: Sampler,
                 repetition: Repetition | None, seeded: bool) -> None:
        device = next(model.parameters()).device
        self.model, self.sampler, self.repetition = model, sampler, repetition
        self.position = torch.zeros(1, dtype=torch.long, device=device)  # slot of the token fed next
        self.column = torch.zeros(1, dtype=torch.long, device=device)  # its place in `out`
        self.token = torch.zeros(rows, 1, dtype=torch.long, device=device)  # (B, 1) the token fed next
        self.positions = torch.zeros(rows, 1, dtype=torch.long, device=device)  # (B, 1) its position in its row
        self.valid = torch.zeros(rows, slots, dtype=torch.bool, device=device)  # (B, S_max) real keys
        self.out = torch.zeros(rows, slots, dtype=torch.long, device=device)  # (B, S_max) new tokens
        self.history = torch.full((rows, slots), NONE, device=device) if repetition is not None else None
        self.generator = torch.Generator(device=device) if seeded else None
        self.caches = fixed_caches(model, rows, slots, self.position)
        self.graph = graphs.step_graph(self.step, generator=self.generator)

    def step(self) -> None:
        self.valid.index_fill_(1, self.position, True)
        logits = self.model(self.token, valid=self.valid, positions=self.positions, caches=self.caches)  # (B, 1, V)
        scores = logits[:, -1].float()  # (B, V)
        if self.history is not None:
            scores = self.repetition.apply(scores, self.history)
        token = self.sampler(scores, self.generator)  # (B,)
        self.token.copy_(token[:, None])
        self.out.index_copy_(1, self.column, token[:, None])
        if self.history is not None:
            push(self.history, token)
        self.position.add_(1)
        self.column.add_(1)
        self.positions.add_(1)

    def prefill(self, ids: Tensor, valid: Tensor, *, same_length: bool, seed: int | None) -> None:
        """The prompt (B, P) left-padded, valid (B, P): the dynamic path's prefill and first draw, then the
        buffers set for the steps."""
        p = ids.shape[1]
        if self.generator is not None:
            self.generator.manual_seed(seed)
        logits = next_logits(self.model, ids, None if same_length else valid, caches=prefill_caches(self.caches))
        history = ids.masked_fill(~valid, NONE)  # (B, P)
        if self.repetition is not None:
            logits = self.repetition.apply(logits, history)
        s = self.sampler
        token = sample_next(logits, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                            generator=self.generator)  # (B,)
        self.valid.zero_()
        self.valid[:, :p] = valid
        self.position.fill_(p)
        self.column.fill_(1)
        self.token.copy_(token[:, None])
        self.positions.copy_(valid.sum(dim=1, keepdim=True))
        self.out[:, 0] = token
        if self.history is not None:
            self.history.fill_(NONE)
            self.history[:, -p - 1:] = torch.cat([history, token[:, None]], dim=1)


@torch.inference_mode()
def generate_fixed(model: nn.Module, ids: Tensor, valid: Tensor, *, max_new_tokens: int, sampler: Sampler,
                   stop_tokens: Sequence[int], seed: int | None, repetition: Repetition | None,
                   on_token: Callable[[int, int], None] | None, graphs: DecodeGraphs) -> list[list[int]]:
    """`generate`'s loop with fixed shapes, over its left-padded prompts ids (B, P) and valid (B, P)."""
    rows, p = ids.shape
    graphs.check(model)
    repetition = None if repetition is None or repetition.off else repetition
    stops = tuple(stop_tokens)
    slots = bucket(p + max_new_tokens, cap=model.config.max_len)
    key = ("generate", rows, slots, sampler.temperature, sampler.top_k, sampler.top_p, repetition,
           seed is not None)
    state: Generation = graphs.get(key, lambda: Generation(model, graphs, rows=rows, slots=slots, sampler=sampler,
                                                         repetition=repetition, seeded=seed is not None))
    state.prefill(ids, valid, same_length=bool(valid.all()), seed=seed)
    out: list[list[int]] = [[] for _ in range(rows)]
    stopped = [False] * rows
    made = 1  # tokens in state.out so far
    read = 0  # of them, those handed out
    while True:
        for column in state.out[:, read:made].T.tolist():  # each step's tokens, rows in order
            for r, t in enumerate(column):
                if stopped[r]:
                    continue
                if t in stops:
                    stopped[r] = True
                    continue
                out[r].append(t)
                if on_token is not None:
                    on_token(r, t)
        read = made
        if made == max_new_tokens or all(stopped):
            return out
        for _ in range(min(graphs.sync_every, max_new_tokens - made)):
            state.graph()
            made += 1


class Translation:
    """The buffers and the step of greedy translation for one (rows, source length, slots, settings)."""

    def __init__(self, model: nn.Module, graphs: DecodeGraphs, *, rows: int, source: int, slots: int,
                 repetition: Repetition | None) -> None:
        device = next(model.parameters()).device
        config = model.config
        self.model, self.repetition = model, repetition
        self.pad_id, self.eos_id = config.pad_id, config.eos_id
        self.position = torch.zeros(1, dtype=torch.long, device=device)  # slot of the token fed next = its step
        self.token = torch.zeros(rows, 1, dtype=torch.long, device=device)  # (B, 1)
        self.valid = torch.zeros(rows, slots, dtype=torch.bool, device=device)  # (B, S_max) target keys so far
        self.src_valid = torch.zeros(rows, source, dtype=torch.bool, device=device)  # (B, S)
        self.memory = torch.zeros(rows, source, config.d_model, dtype=next(model.parameters()).dtype,
                                  device=device)  # (B, S, d)
        self.out = torch.zeros(rows, slots, dtype=torch.long, device=device)  # (B, S_max) y_t at column t
        self.history = torch.full((rows, slots), NONE, device=device) if repetition is not None else None
        self.caches = fixed_caches(model, rows, slots, self.position)
        self.cross: list[tuple[Tensor, Tensor]] = []  # the cross-attention keys/values the graph reads
        self.graph = graphs.step_graph(lambda: self.step(None))

    def step(self, forced: Tensor | None) -> None:
        """One target position; `forced` (B,) a token each row must take, or NONE (only outside the graph)."""
        self.valid.index_fill_(1, self.position, True)
        logits = self.model.decode(self.token, self.memory, self.src_valid, tgt_valid=self.valid,
                                   caches=self.caches)  # (B, 1, V); positions counted from `valid`
        log_probs = last_log_probs(logits, pad_id=self.pad_id, eos_id=self.eos_id)  # (B, V)
        scores = log_probs if self.history is None else self.repetition.apply(log_probs, self.history)
        token = best(force(scores, forced, log_probs))  # (B,)
        self.token.copy_(token[:, None])
        self.out.index_copy_(1, self.position, token[:, None])
        if self.history is not None:
            push(self.history, token)
        self.position.add_(1)

    def start(self, memory: Tensor, src_valid: Tensor, forced: Tensor | None, decoder_start_id: int) -> None:
        """Buffers set for a new batch, and its first step run eagerly: it fills the cross-attention
        keys/values, which are then copied where the graph reads them."""
        self.memory.copy_(memory)
        self.src_valid.copy_(src_valid)
        self.valid.zero_()
        self.position.zero_()
        self.token.fill_(decoder_start_id)
        if self.history is not None:
            self.history.fill_(NONE)
        self.cross = first_step(self.caches, self.cross, lambda: self.step(forced))


@torch.inference_mode()
def greedy_fixed(model: nn.Module, memory: Tensor, src_valid: Tensor, *, limits: list[int], forced: Tensor | None,
                 repetition: Repetition | None, graphs: DecodeGraphs) -> list[list[int]]:
    """`greedy`'s loop with fixed shapes, from the encoder output memory (B, S, d) and src_valid (B, S)."""
    config = model.config
    rows, source = src_valid.shape
    graphs.check(model)
    repetition = None if repetition is None or repetition.off else repetition
    longest = max(limits)
    slots = bucket(longest, cap=config.max_len)
    key = ("greedy", rows, source, slots, repetition)
    state: Translation = graphs.get(key, lambda: Translation(model, graphs, rows=rows, source=source, slots=slots,
                                                           repetition=repetition))
    sentence = torch.arange(rows, device=memory.device)
    state.start(memory, src_valid, forced_at(forced, sentence, 0), config.decoder_start_id)
    tokens: list[list[int]] = [[] for _ in range(rows)]
    done = [False] * rows
    made = 1  # steps run: state.out[:, :made] holds their tokens
    read = 0  # of them, those read on the host
    while True:
        for column in state.out[:, read:made].T.tolist():
            for r, token in enumerate(column):
                if not done[r]:
                    tokens[r].append(token)
                    done[r] = token == config.eos_id or len(tokens[r]) >= limits[r]
        read = made
        if all(done):
            return [t[:-1] if t[-1] == config.eos_id else t for t in tokens]
        steps = min(graphs.sync_every, longest - made)
        for _ in range(steps):
            step_forced = forced_at(forced, sentence, made)
            if step_forced is None:
                state.graph()
            else:  # a forced prefix: outside the graph, whose step forces nothing
                state.step(step_forced)
            made += 1


__all__ = ["Generation", "Sampler", "Translation", "first_step", "fixed_caches", "generate_fixed", "greedy_fixed"]
