"""Writing text with a GPT: a prompt read as the start of a document, continued by sampling (or greedily),
the text streamed as it comes. The CLI (`tformer generate`) and the server call these.

B batch, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import NamedTuple

from torch import nn

from tformer.config import GPTConfig
from tformer.data.lines import CHARS_PER_TOKEN, normalise_text
from tformer.decoding.decoder import Decoder, decoder_of, model_of
from tformer.decoding.generate import check_max_new_tokens
from tformer.decoding.search import sample
from tformer.decoding.settings import SampleConfig, repetition_of
from tformer.decoding.speculative import Draft, SpeculativeStats
from tformer.errors import UserError, allocating
from tformer.tokenization import Tokenizer

DEFAULT = SampleConfig()  # frozen: one shared default


def prompt_ids(tokenizer: Tokenizer, config: GPTConfig, prompt: str) -> list[int]:
    """The ids a continuation of `prompt` starts from (`started`): the prompt's as `tokenizer` reads it, a
    leading byte-order mark no part of it (`data.lines.normalise_text`). A prompt longer than the context
    at any tokenization (`data.lines.CHARS_PER_TOKEN`) is refused before it is tokenized."""
    prompt = normalise_text(prompt)
    if len(prompt) > config.max_len * CHARS_PER_TOKEN:
        raise UserError(f"the prompt is {len(prompt)} characters, more than the model's context "
                        f"max_len={config.max_len} can hold ({config.max_len * CHARS_PER_TOKEN}, at "
                        f"{CHARS_PER_TOKEN} characters a token)")
    return started(config, tokenizer.encode(prompt))


def started(config: GPTConfig, ids: list[int]) -> list[int]:
    """A prompt's ids after the model's start token (bos_id, the token a document starts after), if it has
    one; a UserError if there are none, or if they fill the context and leave no room to generate."""
    start = [] if config.bos_id is None else [config.bos_id]
    ids = start + ids
    if not ids:
        raise UserError("the prompt is empty and the model has no bos_id to start from")
    if len(ids) >= config.max_len:
        raise UserError(f"the prompt is {len(ids)} tokens{' with the start token' if start else ''}; the "
                         f"model's context max_len={config.max_len} leaves no room to generate (give at most "
                         f"{config.max_len - 1 - len(start)} tokens)")
    return ids


class TextStream:
    """The text of tokens arriving one at a time: `push(token)` returns the text it adds, holding back a
    multi-byte character until it is whole (a byte-level BPE may split one over several tokens)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer, self.ids, self.shown = tokenizer, [], ""

    def push(self, token: int) -> str:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
            return ""
        piece, self.shown = text[len(self.shown):], text
        return piece

    @property
    def text(self) -> str:
        return self.tokenizer.decode(self.ids)


def continue_prompt(model: nn.Module | Decoder, tokenizer: Tokenizer, prompt: str,
                    settings: SampleConfig = DEFAULT, *, max_new_tokens: int,
                    on_text: Callable[[str], None] | None = None, draft: Draft | None = None,
                    stats: SpeculativeStats | None = None) -> str:
    """The text a GPT writes after `prompt` (read as the start of a document, `prompt_ids`), drawn as
    `settings` say: at most `max_new_tokens` tokens, fewer where the context ends, stopping at the end-of-text
    token unless the settings say not to. `on_text(piece)` gets the text as it appears, to stream it: the
    prompt, then the new text of each token (a multi-byte character once it is whole). `model`: a model, or a
    `decoding.Decoder` holding it with its decoding state (`Loaded.decoder`). The settings' repetition control
    counts the prompt: it is the start of the text. `draft`: decode speculatively with it (`decoding.speculative`:
    the same text greedily, the same distribution sampled), its acceptance counted in `stats`."""
    check_max_new_tokens(max_new_tokens)
    config = model_of(model).config
    prompt = normalise_text(prompt)
    ids = prompt_ids(tokenizer, config, prompt)
    produced = TextStream(tokenizer)
    if on_text is not None:
        on_text(prompt)

    def stream(row: int, token: int) -> None:
        piece = produced.push(token)
        if on_text is not None and piece:
            on_text(piece)

    sample(model, [ids], settings, max_new_tokens=min(max_new_tokens, config.max_len - len(ids)),
           eos_id=config.eos_id, on_token=stream, draft=draft, stats=stats)
    return produced.text


class Sample(NamedTuple):
    """One continuation `sample_prompts` wrote: of prompt number `prompt` (0-based), its `sample`-th
    (0-based), drawn with `seed` (None: unseeded); with a draft, what speculative decoding did (`stats`)."""

    prompt: int
    sample: int
    seed: int | None
    text: str
    stats: SpeculativeStats | None = None


def sample_prompts(model: nn.Module | Decoder, tokenizer: Tokenizer, prompts: list[str],
                   settings: SampleConfig = DEFAULT, *, num_samples: int = 1, max_new_tokens: int,
                   on_text: Callable[[int, int, str], None] | None = None,
                   draft: Draft | None = None) -> Iterator[Sample]:
    """`num_samples` continuations of each prompt (`continue_prompt`), prompt by prompt, as they are written.
    Every prompt is checked before the first is continued (a ValueError names the first that cannot be,
    counted from 1 when there are several). With a seed, the k-th continuation overall (from 0) is drawn with
    seed + k (mod 2**64), so the first is what `continue_prompt` writes with the same settings and the others
    differ. `on_text(prompt, sample, piece)`: the text as it appears, as `continue_prompt`'s. A bare model gets
    one `Decoder` for all the prompts. `draft`: each continuation decoded speculatively (`continue_prompt`), its
    `Sample.stats` saying how. The checks run at the call; the continuations as the iterator is read."""
    if num_samples < 1:
        raise UserError(f"num_samples={num_samples} must be a positive integer")
    if not prompts:
        raise UserError("there is no prompt to continue; give --prompt TEXT, or prompts one a line on stdin or in "
                         "--input FILE")
    check_max_new_tokens(max_new_tokens)
    for number, prompt in enumerate(prompts, 1):
        try:
            prompt_ids(tokenizer, model_of(model).config, prompt)
        except ValueError as e:
            raise UserError(f"prompt {number}: {e}" if len(prompts) > 1 else str(e)) from None
    return _samples(decoder_of(model), tokenizer, prompts, settings, num_samples=num_samples,
                    max_new_tokens=max_new_tokens, on_text=on_text, draft=draft)


def _samples(decoder: Decoder, tokenizer: Tokenizer, prompts: list[str], settings: SampleConfig, *,
             num_samples: int, max_new_tokens: int, on_text: Callable[[int, int, str], None] | None,
             draft: Draft | None) -> Iterator[Sample]:
    """`sample_prompts`' continuations, once its checks have passed (a generator of its own, so that the
    checks run when `sample_prompts` is called, before any caller's output)."""
    k = 0
    for i, prompt in enumerate(prompts):
        for j in range(num_samples):
            drawn = None if settings.seed is None else (settings.seed + k) % 2**64
            show = None if on_text is None else (lambda piece, i=i, j=j: on_text(i, j, piece))
            stats = None if draft is None else SpeculativeStats()
            with allocating(f"generating sample {j + 1} of prompt {i + 1}"):
                text = continue_prompt(decoder, tokenizer, prompt, dataclasses.replace(settings, seed=drawn),
                                       max_new_tokens=max_new_tokens, on_text=show, draft=draft, stats=stats)
            yield Sample(i, j, drawn, text, stats)
            k += 1


__all__ = ["Sample", "TextStream", "continue_prompt", "prompt_ids", "repetition_of", "sample_prompts", "started"]
