"""The bad-input catalogue (docs/errors.md, "Speculative decoding"): a draft model that cannot propose for the
target (not a GPT, another vocabulary, a shorter context), a bad --draft-tokens, --draft-tokens without a
draft, and --draft for a checkpoint that writes no text. Each through `tformer.cli.main`: one line, exit 2,
the disk as it was (catalogue.run_case)."""

from __future__ import annotations

from catalogue import TINY, Case, Ctx, case_tests

import tformer
from tformer.tokenization import CharTokenizer, load_tokenizer
from tformer.training.checkpoint import save_checkpoint


def a_draft(c: Ctx, *, tokenizer: object = None, **overrides: object) -> str:
    """A one-layer GPT checkpoint in the case's directory, with the world GPT's tokenizer unless another is
    given."""
    tokenizer = tokenizer or load_tokenizer(c.w.gpt)
    config = tformer.preset("gpt-tiny", {**TINY, "vocab_size": tokenizer.vocab_size, "bos_id": tokenizer.eos_id,
                                         "eos_id": tokenizer.eos_id, **overrides})
    save_checkpoint(c.tmp / "draft", model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    return str(c.tmp / "draft")


def other_chars(c: Ctx) -> str:
    """A draft whose character tokenizer has as many tokens as the target's, other characters among them."""
    target = load_tokenizer(c.w.gpt)
    chars = [target.token(i) for i in range(4, target.vocab_size)]
    chars[-1] = "\u00e9"
    return a_draft(c, tokenizer=CharTokenizer(chars))


def generate(c: Ctx, *extra: str) -> list[str]:
    return ["generate", "--checkpoint", str(c.w.gpt), "--prompt", "In", "--max-new-tokens", "2", *extra]


CASES = [
    Case("draft-not-a-gpt", lambda c: generate(c, "--draft", str(c.w.s2s)),
         ("draft checkpoint", "holds a Seq2SeqConfig, not a GPT; a draft is a small GPT trained with the "
          "target's tokenizer",)),
    Case("draft-other-vocabulary-size", lambda c: generate(c, "--draft", a_draft(c, vocab_size=40)),
         ("does not share the target's vocabulary: its model has vocab_size=40, the target's",
          "train the draft with the target's tokenizer")),
    Case("draft-other-tokens", lambda c: generate(c, "--draft", other_chars(c)),
         ("does not share the target's vocabulary: its id", "is '\u00e9', the target's")),
    Case("draft-shorter-context", lambda c: generate(c, "--draft", a_draft(c, max_len=16)),
         ("has a context of max_len=16, shorter than the target's max_len=32",)),
    Case("draft-tokens-zero", lambda c: generate(c, "--draft", str(c.w.gpt), "--draft-tokens", "0"),
         ("argument --draft-tokens: 0 is out of range",)),
    Case("draft-tokens-not-a-number", lambda c: generate(c, "--draft", str(c.w.gpt), "--draft-tokens", "four"),
         ("argument --draft-tokens:", "'four'")),
    Case("draft-tokens-without-draft", lambda c: generate(c, "--draft-tokens", "3"),
         ("--draft-tokens 3 needs --draft DIR",)),
    Case("serve-draft-for-a-translator",
         lambda c: ["serve", "--checkpoint", str(c.w.s2s), "--draft", str(c.w.gpt), "--port", "0"],
         ("--draft is for a GPT; checkpoint", "holds a Seq2SeqConfig")),
]


test_bad_input, test_every_case_is_in_the_catalogue = case_tests(CASES)
