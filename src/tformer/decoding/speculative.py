"""Speculative decoding (Leviathan et al. 2023, https://arxiv.org/abs/2211.17192; Chen et al. 2023,
https://arxiv.org/abs/2302.01318): a small draft GPT proposes K tokens one at a time, the target GPT scores
all of them in one forward pass, and as many as the target agrees with are kept, plus one token of the
target's own. The target's output distribution is unchanged; what changes is how many target passes it
takes (one per round rather than one per token), which pays when a target pass costs about as much for K + 1
tokens as for one (batch-1 decoding, bound by reading the weights) and the draft is far cheaper.

One round, with x the text so far, q the draft's next-token distribution and p the target's:

    propose:  d_i ~ q(. | x, d_<i)                         i = 1..K, the draft's own KV cache
    verify:   p(. | x, d_<i) for i = 1..K + 1               one target pass over the K new tokens
    accept:   d_i with probability min(1, p(d_i) / q(d_i)), in order, until the first rejection
    correct:  at a rejection at i, one token ~ norm(max(0, p_i - q_i)); if all K were accepted, the bonus
              token ~ p_{K+1}

Greedy (temperature 0): d_i is the draft's argmax and is accepted when it is the target's argmax; the
correction and the bonus are the target's argmax. The tokens are then those the target writes alone
(`generate.generate` at temperature 0), for any draft: every token kept is the target's argmax after the
text before it. (In floating point: the target scores K + 1 positions in one pass where it alone scores
one, so a near-tie between two logits, within their rounding, may break the other way.)

Sampling: p and q are the distributions the sampling pipeline defines (`sampling.filtered_probs`:
temperature, then top-k, then top-p; repetition control before them, as `generate` applies it), so the
tokens are distributed as the target alone would draw them; the draws themselves differ (the same seed gives
other tokens than `generate`'s).

Both models keep key/value caches; after a round each is truncated (`KVCache.truncate`) to the text kept, so
a rejected draft token leaves nothing behind. That needs softmax attention's cache in every layer: a mixer
with a recurrent state (linear attention, an SSM) cannot forget a token, and is refused. One prompt at a time
(batch size 1): that is where the method pays, and rows of a batch would accept different numbers of tokens.
The captured fixed-shape steps (`captured.py`) are not used: the rounds have varying shapes. The target
reads K + 1 tokens a pass, so it keeps its weights' ordinary layout; the draft, one token a step, decodes in
the one-row layout (`layout.py`: faster for one row, slower for a few).

The draft's acceptance is what the method rests on: a draft distilled from the target (`tasks.lm`,
`distill.teacher`; the gpt-bible-draft recipe) learns its choices rather than the text's.

V vocabulary, K draft tokens a round, S tokens so far.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from tformer.data.device import device_of
from tformer.decoding.constraints import Repetition
from tformer.decoding.decoder import Decoder, decoder_of
from tformer.decoding.generate import check_prompts
from tformer.decoding.sampling import check_sampling, filtered_probs
from tformer.decoding.steps import eval_mode
from tformer.errors import UserError
from tformer.nn.kv_cache import KVCache, LayerCache

DRAFT_TOKENS = 4  # K: draft tokens proposed a round, by default


def check_draft_tokens(k: int, *, what: str = "draft_tokens") -> None:
    """The one check of K, the draft tokens a round: a whole number from 1."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise UserError(f"{what}={k!r} is not allowed; give a whole number of draft tokens a round, at least 1")


@dataclass(frozen=True)
class Draft:
    """A draft model (a GPT, or a `Decoder` holding one with its decoding layout), the tokens it proposes a
    round (`tokens`, K), and where it was loaded from (`path`, for reports)."""

    model: nn.Module | Decoder
    tokens: int = DRAFT_TOKENS
    path: str | None = None

    def __post_init__(self) -> None:
        check_draft_tokens(self.tokens)


@dataclass
class SpeculativeStats:
    """What speculative decoding did, added up over its calls: the draft tokens proposed and accepted, the
    target passes after the prompt's (`rounds`) and the tokens written."""

    proposed: int = 0
    accepted: int = 0
    rounds: int = 0
    tokens: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens / proposed (None: none proposed)."""
        return self.accepted / self.proposed if self.proposed else None

    def add(self, other: SpeculativeStats) -> None:
        """Add `other`'s counts to these."""
        self.proposed += other.proposed
        self.accepted += other.accepted
        self.rounds += other.rounds
        self.tokens += other.tokens

    def summary(self) -> str:
        """One line: the acceptance rate and what it rests on."""
        rate = "-" if self.acceptance_rate is None else f"{self.acceptance_rate:.2f}"
        return (f"draft acceptance rate {rate} ({self.accepted} of {self.proposed} proposed tokens accepted; "
                f"{self.tokens} tokens in {self.rounds} target passes)")

    def as_dict(self) -> dict[str, int | float | None]:
        return {"proposed": self.proposed, "accepted": self.accepted, "acceptance_rate": self.acceptance_rate,
                "rounds": self.rounds, "tokens": self.tokens}


def check_pair(target: nn.Module, draft: nn.Module) -> None:
    """A UserError unless the draft can propose for the target: the same vocabulary size (the two
    distributions are compared id by id)."""
    vt, vd = target.config.vocab_size, draft.config.vocab_size
    if vt != vd:
        raise UserError(f"the draft's vocabulary has {vd} tokens and the target's {vt}; a draft must share the "
                         "target's tokenizer and vocabulary")


def _rolling_back(caches: list[LayerCache], name: str) -> list[LayerCache]:
    """`caches`, if every layer's is a key/value cache that can be truncated; a UserError naming the other."""
    for cache in caches:
        if not isinstance(cache.mixer_state, KVCache):
            raise UserError(f"speculative decoding rolls back key/value caches; the {name} keeps a "
                             f"{type(cache.mixer_state).__name__} (linear attention or an SSM), which cannot forget "
                             "a rejected token; use a GPT with softmax attention")
    return caches


def _truncate(caches: list[LayerCache], length: int) -> None:
    for cache in caches:
        cache.mixer_state.truncate(length)


class _Model:
    """One of the two models with its caches: the logits of the tokens it has not read yet."""

    def __init__(self, model: nn.Module, caches: list[LayerCache]) -> None:
        self.model, self.caches, self.device = model, caches, device_of(model)

    @property
    def length(self) -> int:
        return self.caches[0].mixer_state.length

    def read(self, seq: list[int], last: int) -> Tensor:
        """Logits (L, V) float32 after each of the `last` (L) last tokens of `seq`, reading the ones not cached."""
        new = torch.tensor(seq[self.length:], dtype=torch.long, device=self.device)[None]  # (1, T), T >= L
        return self.model(new, caches=self.caches, last=last)[0].float()  # (L, V)

    def keep(self, length: int) -> None:
        """Forget the cached tokens from `length` on (none if fewer are cached)."""
        if self.length > length:
            _truncate(self.caches, length)


class _Chooser:
    """Next-token distributions and choices as `generate` makes them: repetition control on the text so far,
    then argmax (greedy) or the sampling pipeline's probabilities."""

    def __init__(self, *, temperature: float, top_k: int | None, top_p: float | None,
                 repetition: Repetition | None, generator: torch.Generator | None) -> None:
        self.greedy = temperature == 0
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.repetition, self.generator = repetition, generator

    def scores(self, logits: Tensor, seq: list[int]) -> Tensor:
        """logits (V,) of the token after `seq` -> (V,) with the repetition control applied."""
        if self.repetition is None:
            return logits
        history = torch.tensor(seq, dtype=torch.long, device=logits.device)[None]  # (1, S)
        return self.repetition.apply(logits[None], history)[0]

    def probs(self, scores: Tensor) -> Tensor:
        """(V,) -> the sampling distribution (V,) (temperature > 0)."""
        return filtered_probs(scores[None], temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)[0]

    def draw(self, probs: Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def uniform(self, device: torch.device) -> float:
        return float(torch.rand((), device=device, generator=self.generator))


def _propose(draft: _Model, seq: list[int], k: int, choose: _Chooser) -> tuple[list[int], list[Tensor]]:
    """K draft tokens after `seq`, each chosen from the draft's distribution after the ones before it, and
    those distributions (V,) (none when greedy)."""
    proposal: list[int] = []
    qs: list[Tensor] = []
    for _ in range(k):
        context = seq + proposal
        scores = choose.scores(draft.read(context, 1)[0], context)  # (V,)
        if choose.greedy:
            proposal.append(int(scores.argmax()))
        else:
            qs.append(choose.probs(scores))
            proposal.append(choose.draw(qs[-1]))
    return proposal, qs


def _verify(logits: Tensor, seq: list[int], proposal: list[int], qs: list[Tensor],
            choose: _Chooser) -> tuple[int, int]:
    """The target's verdict on a proposal, from its logits (K + 1, V) after seq + proposal[:i] for i = 0..K:
    (how many draft tokens it accepts, the token it writes after them)."""
    for i, x in enumerate(proposal):
        context = seq + proposal[:i]
        scores = choose.scores(logits[i], context)  # (V,)
        if choose.greedy:
            best = int(scores.argmax())
            if best != x:
                return i, best
            continue
        p, q = choose.probs(scores), qs[i].to(logits.device)  # (V,), (V,)
        if choose.uniform(logits.device) * float(q[x]) >= float(p[x]):  # rejected: u >= p(x) / q(x)
            residual = (p - q).clamp(min=0)  # (V,)
            total = float(residual.sum())
            return i, choose.draw(residual / total if total > 0 else p)
    scores = choose.scores(logits[len(proposal)], seq + proposal)
    return len(proposal), int(scores.argmax()) if choose.greedy else choose.draw(choose.probs(scores))


@torch.inference_mode()
def speculative_generate(target: nn.Module | Decoder, draft: nn.Module | Decoder, prompts: Sequence[Sequence[int]],
                         *, max_new_tokens: int, draft_tokens: int = DRAFT_TOKENS, temperature: float = 1.0,
                         top_k: int | None = None, top_p: float | None = None, stop_tokens: Sequence[int] = (),
                         seed: int | None = None, on_token: Callable[[int, int], None] | None = None,
                         repetition: Repetition | None = None,
                         stats: SpeculativeStats | None = None) -> list[list[int]]:
    """`generate.generate` with a draft model proposing `draft_tokens` tokens a round for the target to verify:
    the same arguments and result (the new tokens of each prompt, without the stop token), for one prompt
    (batch size 1; a UserError for more). Greedy at temperature 0: the target's own tokens; sampled: the
    target's own distribution. `draft`: a GPT with the target's vocabulary (a `Decoder` keeps its layout
    across calls, as `target`'s does). `stats`: the counts of this call are added to it (`SpeculativeStats`:
    the acceptance rate)."""
    target_decoder, draft_decoder = decoder_of(target), decoder_of(draft)
    big, small = target_decoder.model, draft_decoder.model
    check_prompts(prompts, max_new_tokens=max_new_tokens, max_len=big.config.max_len)
    if len(prompts) != 1:
        raise UserError(f"speculative decoding takes one prompt at a time (batch size 1), got {len(prompts)}; "
                         "continue them one by one")
    check_draft_tokens(draft_tokens)
    check_sampling(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    check_pair(big, small)
    seq = list(prompts[0])
    if len(seq) + max_new_tokens > small.config.max_len:
        raise UserError(f"the prompt ({len(seq)} tokens) + max_new_tokens={max_new_tokens} = "
                         f"{len(seq) + max_new_tokens} is more than the draft's max_len={small.config.max_len}")
    stats = SpeculativeStats() if stats is None else stats
    out: list[int] = []
    if max_new_tokens == 0:
        return [out]
    device = device_of(big)
    generator = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    choose = _Chooser(temperature=temperature, top_k=top_k, top_p=top_p, repetition=repetition,
                      generator=generator)
    stops = set(stop_tokens)
    size = len(seq) + max_new_tokens
    with eval_mode(big), eval_mode(small, rows=1, layout=draft_decoder.layout):
        verifier = _Model(big, _rolling_back(big.new_caches(1, size), "target"))
        proposer = _Model(small, _rolling_back(small.new_caches(1, size), "draft"))
        while True:
            # the last round proposes fewer: the target never reads past prompt + max_new_tokens - 1
            k = min(draft_tokens, max_new_tokens - len(out) - 1)
            proposal, qs = _propose(proposer, seq, k, choose)
            logits = verifier.read(seq + proposal, k + 1)  # (K + 1, V): after seq + proposal[:i]
            accepted, token = _verify(logits, seq, proposal, qs, choose)
            stats.proposed += k
            stats.accepted += accepted
            stats.rounds += 1
            done = False
            for t in [*proposal[:accepted], token]:
                if t in stops:
                    done = True
                    break
                out.append(t)
                stats.tokens += 1
                if on_token is not None:
                    on_token(0, t)
                if len(out) == max_new_tokens:
                    done = True
                    break
            if done:
                return [out]
            seq += [*proposal[:accepted], token]
            verifier.keep(len(seq) - 1)  # the caches hold the text but its last token
            proposer.keep(len(seq) - 1)


__all__ = ["DRAFT_TOKENS", "Draft", "SpeculativeStats", "check_draft_tokens", "check_pair", "speculative_generate"]
