"""The bad-input contracts by property, with many examples: the properties of tests/properties/contracts.py
(`tformer train` with mutated overrides of the catalogue's tiny translation and language-model recipes; a
request of any body to each endpoint of `tformer serve`) run `--examples` times each, with a seed of their own
unless `--seed`, and summed up: the outcomes and every breach, where a property test stops at its first.

    python -m benchmarks.fuzz [--examples 500] [--only train|serve] [--seed S] [--out FILE] [--quick]

A breach: `tformer train` that shows a traceback, exits with a code other than 0 and 2, or refuses in more than
one line or leaving files behind; a request answered with a 5xx, a 4xx other than {"error": one line}, or a 200
that is not the library's answer. Prints a table (outcomes, examples/s) and the breaches; `--out` also writes
them as JSON; exits 1 if there was one. `--quick`: 5 examples each.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from benchmarks.common import apply_quick, write_json
from tests.properties.contracts import (
    ENDPOINTS,
    Library,
    check_request,
    check_train,
    overrides,
    recipe_keys,
    requests_for,
    tally,
    world,
)
from tests.serve.serving import build, start

MAX_NEW_TOKENS = 20  # the GPT servers' --max-new-tokens


def run_property(strategy: st.SearchStrategy, check: Callable[[Any], str], *, examples: int,
                 rng_seed: int) -> dict[str, Any]:
    """`check` of `examples` draws of `strategy`: {"outcomes": what `check` returned, counted; "seconds";
    "breaches": the message of each failure} (`tally`: a failure is kept, not raised, so nothing shrinks)."""
    counts: Counter = Counter()
    failures: list[str] = []
    counted = tally(check, counts, failures)
    wanted = settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))

    def example(drawn: Any) -> None:
        counted(drawn)

    start_s = time.perf_counter()
    seed(rng_seed)(wanted(given(strategy)(example)))()
    return {"outcomes": dict(counts), "seconds": time.perf_counter() - start_s, "breaches": failures}


def train_case(recipe: Path, folder: Path, items: list[str]) -> str:
    """One mutated training, in a fresh directory of `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    return check_train(recipe, items, Path(tempfile.mkdtemp(dir=folder)))


def request_case(servers: dict[str, str], library: Library, endpoint: str, sent: tuple[str, bytes]) -> str:
    kind, raw = sent
    return check_request(servers, library, kind, endpoint, raw)


def fuzz_train(root: Path, *, examples: int, rng_seed: int) -> dict[str, dict]:
    """Mutated overrides of each tiny recipe: {"train TASK": run_property's result}."""
    built = world(root / "world")
    results = {}
    for task, recipe in (("translation", built.recipe), ("lm", built.lm_recipe)):
        results[f"train {task}"] = run_property(overrides(recipe_keys(recipe)),
                                                partial(train_case, recipe, root / task), examples=examples,
                                                rng_seed=rng_seed)
        shutil.rmtree(root / task, ignore_errors=True)
    return results


def fuzz_serve(root: Path, *, examples: int, rng_seed: int) -> dict[str, dict]:
    """Requests to each endpoint, on one server per kind of checkpoint: {"serve /ENDPOINT": ...}."""
    checkpoints = build(root / "serve")
    with contextlib.ExitStack() as held:
        servers = {kind: held.enter_context(start(path, **({"max_new_tokens": MAX_NEW_TOKENS} if "gpt" in kind
                                                             else {})))
                   for kind, path in checkpoints.items()}
        library = Library.of(checkpoints, {k: MAX_NEW_TOKENS for k in checkpoints if "gpt" in k})
        return {f"serve /{endpoint}": run_property(requests_for(endpoint),
                                                    partial(request_case, servers, library, endpoint),
                                                    examples=examples, rng_seed=rng_seed)
                for endpoint in ENDPOINTS}


def table(results: dict[str, dict]) -> str:
    lines = ["| property | examples | outcomes | examples/s | breaches |", "|---|---|---|---|---|"]
    for name, r in results.items():
        n = sum(r["outcomes"].values())
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))
        lines.append(f"| {name} | {n} | {outcomes} | {n / max(r['seconds'], 1e-9):.1f} | {len(r['breaches'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=500, help="examples of each property")
    parser.add_argument("--only", choices=["train", "serve"], help="one of the two contracts (default: both)")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis's seed (default: a new one, printed)")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON there")
    parser.add_argument("--quick", action="store_true", help="5 examples of each property")
    args = parser.parse_args(argv)
    apply_quick(parser, args, {"examples": 5})
    rng_seed = random.randrange(2**32) if args.seed is None else args.seed
    print(f"fuzz: {args.examples} examples of each property, seed {rng_seed}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="tformer-fuzz-"))
    results: dict[str, dict] = {}
    try:
        if args.only in (None, "train"):
            results |= fuzz_train(root, examples=args.examples, rng_seed=rng_seed)
        if args.only in (None, "serve"):
            results |= fuzz_serve(root, examples=args.examples, rng_seed=rng_seed)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(table(results))
    for name, r in results.items():
        for breach in r["breaches"]:
            print(f"\n--- {name}: breach\n{breach}")
    summary = {"examples": args.examples, "seed": rng_seed, "results": results,
               "breaches": sum(len(r["breaches"]) for r in results.values())}
    if args.out is not None:
        write_json(args.out, summary)
    return summary


if __name__ == "__main__":
    sys.exit(1 if main()["breaches"] else 0)
