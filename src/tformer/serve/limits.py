"""What one server takes: the bounds on a request's size and on the batches the server forms.

Every request is checked against them before it waits for the model, so a request over a limit is refused
with a one-line 4xx (naming the value and the limit), and the batch it would have joined never sees it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tformer.errors import UserError

GENERATE_BATCHING = ("continuous", "micro")  # how /generate batches: `scheduler.py` or `batching.py`
MAX_BATCH_CAP = 1024  # sentences in one decoding batch: far above what one process decodes at once usefully


@dataclass(frozen=True, kw_only=True)
class Limits:
    max_chars: int = 2000  # characters of one text (a sentence, a prompt)
    max_tokens: int | None = None  # tokens of one text; None: the model's context (max_len) decides
    max_new_tokens: int = 256  # tokens /generate writes at most (the model's context may stop it sooner)
    max_batch: int = 16  # sentences decoded together; a request of `texts` may hold at most this many
    batch_wait_ms: float = 5.0  # how long the first request of a batch waits for others to join it
    generate_batching: str = "continuous"  # /generate: continuous (at token boundaries) or micro (whole requests)
    max_step_tokens: int = 512  # tokens one step of continuous batching feeds the model (live rows + prompts)

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_new_tokens", "max_batch", "max_step_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"--{name.replace('_', '-')}={value} must be a positive integer")
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int)
                                            or self.max_tokens < 1):
            raise UserError(f"--max-tokens={self.max_tokens} must be a positive integer (or left out: the model's "
                             "context)")
        if self.max_batch > MAX_BATCH_CAP:
            raise UserError(f"--max-batch={self.max_batch} is more than {MAX_BATCH_CAP}; give 1 to {MAX_BATCH_CAP}")
        if not 0 <= self.batch_wait_ms <= 10_000:  # also refuses nan
            raise UserError(f"--batch-wait-ms={self.batch_wait_ms} must be in [0, 10000]")
        if self.generate_batching not in GENERATE_BATCHING:
            raise UserError(f"--generate-batching={self.generate_batching!r} is not allowed; choose "
                             f"{' or '.join(GENERATE_BATCHING)}")

    @property
    def max_body_bytes(self) -> int:
        """The largest request body read: every text of a full batch at its longest (4 bytes a character in
        UTF-8, 6 as a JSON escape), with room for the other fields."""
        return 6 * self.max_chars * self.max_batch + 65_536


__all__ = ["GENERATE_BATCHING", "MAX_BATCH_CAP", "Limits"]
