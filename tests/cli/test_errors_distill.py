"""The bad-input catalogue (docs/errors.md, "Distillation"): a language model's `distill:` section naming no
GPT checkpoint, a teacher whose context is shorter than the blocks, settings out of range, and the agreement
metric without a teacher. Each through `tformer.cli.main`: one line, exit 2, the disk as it was
(catalogue.run_case)."""

from __future__ import annotations

from catalogue import Case, case_tests

CASES = [
    Case("distill-teacher-missing", lambda c: c.lm(f"distill.teacher={c.tmp}/nowhere"),
         ("distill.teacher='{tmp}/nowhere' is not a directory; train the teacher first",
          "or set distill.teacher=DIR, a GPT checkpoint")),
    Case("distill-teacher-not-gpt", lambda c: c.lm(f"distill.teacher={c.w.s2s}"),
         ("holds a Seq2SeqConfig, not a GPT; a language model learns from a GPT",)),
    Case("distill-teacher-short-context",
         lambda c: c.lm(f"distill.teacher={c.w.gpt}", "data.block_size=64", "model.overrides.max_len=64"),
         ("has a context of max_len=32, shorter than data.block_size=64; lower data.block_size to at most 32",)),
    Case("distill-weight", lambda c: c.lm(f"distill.teacher={c.w.gpt}", "distill.weight=2"),
         ("distill.weight=2.0 must be in [0, 1]",)),
    Case("distill-tau", lambda c: c.lm(f"distill.teacher={c.w.gpt}", "distill.tau=0"),
         ("distill.tau=0.0 must be > 0 (the softening temperature)",)),
    Case("agreement-without-teacher", lambda c: c.lm("train.best_metric=agreement"),
         ("train.best_metric=agreement needs a teacher to agree with; set distill.teacher",)),
]


test_bad_input, test_every_case_is_in_the_catalogue = case_tests(CASES)
