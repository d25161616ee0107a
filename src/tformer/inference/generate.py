"""Writing text with a GPT: a prompt read as the start of a document, continued by sampling (or greedily),
the text streamed as it comes. The CLI (`tformer generate`) and the server call these.

B batch, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from torch import nn

from tformer.config import GPTConfig
from tformer.data.lines import normalise_text
from tformer.decoding import Repetition, generate
from tformer.decoding.captured import DecodeGraphs
from tformer.decoding.generate import check_max_new_tokens
from tformer.decoding.layout import DecodingLayout
from tformer.decoding.sampling import check_sampling
from tformer.errors import UserError


def prompt_ids(tokenizer: Any, config: GPTConfig, prompt: str) -> list[int]:
    """The ids a continuation of `prompt` starts from: the model's start token (bos_id, the token a document
    starts after), if it has one, then the prompt's; a ValueError if there are none, or if they fill the
    context and leave no room to generate. A leading byte-order mark is no part of the prompt
    (`data.lines.normalise_text`)."""
    start = [] if config.bos_id is None else [config.bos_id]
    ids = start + tokenizer.encode(normalise_text(prompt))
    if not ids:
        raise UserError("the prompt is empty and the model has no bos_id to start from")
    if len(ids) >= config.max_len:
        raise UserError(f"the prompt is {len(ids)} tokens{' with the start token' if start else ''}; the "
                         f"model's context max_len={config.max_len} leaves no room to generate (give at most "
                         f"{config.max_len - 1 - len(start)} tokens)")
    return ids


def repetition_of(no_repeat_ngram_size: int | None = None, penalty: float | None = None) -> Repetition | None:
    """The repetition control of a command's or a request's settings (None: each off), checked by
    `decoding.Repetition` (whose words the command line, a recipe and the server share); None when it is off."""
    rep = Repetition(no_repeat_ngram_size=0 if no_repeat_ngram_size is None else no_repeat_ngram_size,
                     penalty=1.0 if penalty is None else penalty)
    return None if rep.off else rep


class TextStream:
    """The text of tokens arriving one at a time: `push(token)` returns the text it adds, holding back a
    multi-byte character until it is whole (a byte-level BPE may split one over several tokens)."""

    def __init__(self, tokenizer: Any) -> None:
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


def continue_prompt(model: nn.Module, tokenizer: Any, prompt: str, *, max_new_tokens: int,
                    temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                    seed: int | None = None, stop_at_eos: bool = True,
                    on_text: Callable[[str], None] | None = None, layout: DecodingLayout | None = None,
                    repetition: Repetition | None = None, graphs: DecodeGraphs | None = None) -> str:
    """The text a GPT writes after `prompt` (read as the start of a document, `prompt_ids`): at most
    `max_new_tokens` tokens, fewer where the context ends, and it stops at the end-of-text token unless
    `stop_at_eos` is False. `on_text(piece)` gets the text as it appears, to stream it: the prompt, then
    the new text of each token (a multi-byte character once it is whole). `layout`: the model's decoding
    layout, kept by its holder (`Loaded.layout`); `graphs`: its captured decoding steps, the same
    (`Loaded.graphs`; None: made for this call). `repetition`: repeats of the prompt's and the new tokens
    penalised or banned (`decoding.Repetition`; the prompt is the start of the text, so it counts)."""
    check_max_new_tokens(max_new_tokens)
    check_sampling(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    config = model.config
    prompt = normalise_text(prompt)
    ids = prompt_ids(tokenizer, config, prompt)
    stop = () if not stop_at_eos or config.eos_id is None else (config.eos_id,)
    produced = TextStream(tokenizer)
    if on_text is not None:
        on_text(prompt)

    def stream(row: int, token: int) -> None:
        piece = produced.push(token)
        if on_text is not None and piece:
            on_text(piece)

    generate(model, [ids], max_new_tokens=min(max_new_tokens, config.max_len - len(ids)), temperature=temperature,
             top_k=top_k, top_p=top_p, stop_tokens=stop, seed=seed, on_token=stream, layout=layout,
             repetition=repetition, graphs=graphs)
    return produced.text


class Sample(NamedTuple):
    """One continuation `sample_prompts` wrote: of prompt number `prompt` (0-based), its `sample`-th
    (0-based), drawn with `seed` (None: unseeded)."""

    prompt: int
    sample: int
    seed: int | None
    text: str


def sample_prompts(model: nn.Module, tokenizer: Any, prompts: list[str], *, num_samples: int = 1,
                   max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None, seed: int | None = None, stop_at_eos: bool = True,
                   on_text: Callable[[int, int, str], None] | None = None,
                   layout: DecodingLayout | None = None, repetition: Repetition | None = None,
                   graphs: DecodeGraphs | None = None) -> Iterator[Sample]:
    """`num_samples` continuations of each prompt (`continue_prompt`), prompt by prompt, as they are written.
    Every prompt is checked before the first is continued (a ValueError names the first that cannot be,
    counted from 1 when there are several). With `seed`, the k-th continuation overall (from 0) is drawn with
    seed + k (mod 2**64), so the first is what `continue_prompt(seed=seed)` writes and the others differ.
    `on_text(prompt, sample, piece)`: the text as it appears, as `continue_prompt`'s `on_text`; `repetition`:
    as `continue_prompt`'s; `graphs`: as `continue_prompt`'s (None: made once for all the prompts). The
    checks run at the call; the continuations as the iterator is read."""
    if num_samples < 1:
        raise UserError(f"num_samples={num_samples} must be a positive integer")
    if not prompts:
        raise UserError("there is no prompt to continue; give --prompt TEXT, or prompts one a line on stdin or in "
                         "--input FILE")
    check_max_new_tokens(max_new_tokens)
    check_sampling(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    for number, prompt in enumerate(prompts, 1):
        try:
            prompt_ids(tokenizer, model.config, prompt)
        except ValueError as e:
            raise UserError(f"prompt {number}: {e}" if len(prompts) > 1 else str(e)) from None
    return _samples(model, tokenizer, prompts, num_samples=num_samples, max_new_tokens=max_new_tokens,
                    temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, stop_at_eos=stop_at_eos,
                    on_text=on_text, layout=layout, repetition=repetition,
                    graphs=graphs if graphs is not None else DecodeGraphs(model))


def _samples(model: nn.Module, tokenizer: Any, prompts: list[str], *, num_samples: int, max_new_tokens: int,
             temperature: float, top_k: int | None, top_p: float | None, seed: int | None, stop_at_eos: bool,
             on_text: Callable[[int, int, str], None] | None, layout: DecodingLayout | None,
             repetition: Repetition | None, graphs: DecodeGraphs) -> Iterator[Sample]:
    """`sample_prompts`' continuations, once its checks have passed (a generator of its own, so that the
    checks run when `sample_prompts` is called, before any caller's output)."""
    k = 0
    for i, prompt in enumerate(prompts):
        for j in range(num_samples):
            drawn = None if seed is None else (seed + k) % 2**64
            show = None if on_text is None else (lambda piece, i=i, j=j: on_text(i, j, piece))
            text = continue_prompt(model, tokenizer, prompt, max_new_tokens=max_new_tokens, temperature=temperature,
                                   top_k=top_k, top_p=top_p, seed=drawn, stop_at_eos=stop_at_eos, on_text=show,
                                   layout=layout, repetition=repetition, graphs=graphs)
            yield Sample(i, j, drawn, text)
            k += 1


__all__ = ["Sample", "TextStream", "continue_prompt", "prompt_ids", "repetition_of", "sample_prompts"]
