"""The bad-input catalogue (docs/errors.md): what the property tests and `python -m benchmarks.fuzz` found
(tests/properties/contracts.py), each now one line and exit 2 with the disk as it was (catalogue.run_case).
Before, a thread count or a vocabulary size the machine cannot give aborted the process from OpenMP or Rust (no
Python exception, no message; or a PanicException's traceback), and a length penalty far from 0 made beam search
divide by zero or overflow (a traceback on the command line, a 500 from the server: tests/serve/
test_serve_properties.py)."""

from __future__ import annotations

from catalogue import Case, case_tests, some_input, translate

LENPEN = "must be in [-10, 10] (0: the raw log-probability; 1: per token; the usual values are 0 to 2)"

CASES = [
    Case("train-threads-beyond-any-machine", lambda c: c.train("train.threads=100000"),
         ("train.threads=100000 must be an integer in [1, 1024] or null (torch's default: one per core)",)),
    Case("train-vocabulary-beyond-the-trainer", lambda c: c.train("data.vocab_size=4294967296"),
         ("vocab_size=4294967296 must be in [260, 2097152] (at least 4 special tokens and 256 bytes)",)),
    Case("train-vocabulary-of-64-bits", lambda c: c.train("data.vocab_size=9223372036854775807"),
         ("vocab_size=9223372036854775807 must be in [260, 2097152]",)),
    Case("translate-lenpen-overflows", lambda c: translate(c, "--lenpen", "1000", *some_input(c)),
         (f"decode.lenpen=1000.0 {LENPEN}",)),
    Case("translate-lenpen-vanishes", lambda c: translate(c, "--lenpen=-1e300", *some_input(c)),
         (f"decode.lenpen=-1e+300 {LENPEN}",)),
    Case("recipe-lenpen-overflows", lambda c: c.train("decode.lenpen=1000"),  # demo's test decoding, after training
         (f"decode.lenpen=1000.0 {LENPEN}",)),
]


test_bad_input, test_every_case_is_in_the_catalogue = case_tests(CASES)


def test_the_case_ids_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)
