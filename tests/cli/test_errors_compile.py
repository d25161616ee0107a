"""The bad-input catalogue (docs/errors.md, "Compiled generation"): `generate --compile` with a draft, with
int8 layers, or for a model whose decoding cannot take fixed shapes (ALiBi). Each through `tformer.cli.main`:
one line, exit 2, the disk as it was (catalogue.run_case)."""

from __future__ import annotations

from catalogue import TINY, Case, Ctx, case_tests

import tformer
from tformer.tokenization import load_tokenizer
from tformer.training.checkpoint import save_checkpoint


def alibi_gpt(c: Ctx) -> str:
    """A one-layer GPT with ALiBi positions and the world GPT's tokenizer, in the case's directory."""
    tokenizer = load_tokenizer(c.w.gpt)
    config = tformer.preset("gpt-tiny", {**TINY, "vocab_size": tokenizer.vocab_size, "bos_id": tokenizer.eos_id,
                                         "eos_id": tokenizer.eos_id, "positions": {"kind": "alibi"}})
    save_checkpoint(c.tmp / "alibi", model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    return str(c.tmp / "alibi")


def generate(checkpoint: object, *extra: str) -> list[str]:
    return ["generate", "--checkpoint", str(checkpoint), "--prompt", "In", "--max-new-tokens", "2", "--compile",
            *extra]


CASES = [
    Case("compile-with-draft", lambda c: generate(c.w.gpt, "--draft", str(c.w.gpt)),
         ("--compile and --draft cannot be combined: speculative decoding runs the dynamic steps; drop one",)),
    Case("compile-with-int8", lambda c: generate(c.w.gpt, "--int8"),
         ("--compile and --int8 cannot be combined: the int8 layers are not compiled; drop one",)),
    Case("compile-alibi", lambda c: generate(alibi_gpt(c)),
         ("--compile cannot compile this model's decoding: ALiBi biases scores by the query's index",
          "generate without --compile")),
]


test_bad_input, test_every_case_is_in_the_catalogue = case_tests(CASES)
