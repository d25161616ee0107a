"""The contracts of bad input, as properties (Hypothesis), shared by the tests that check them with a few
examples (tests/properties/test_config_properties.py, tests/serve/test_serve_properties.py) and the fuzzer that
checks them with many (`python -m benchmarks.fuzz`).

1. `tformer train RECIPE key=value...` with mutated overrides (`overrides(keys)`: the recipe's real keys, its
   model's, and bogus ones, each set to YAML of any kind: integers huge and negative, floats inf and nan, tags,
   strings, flow collections, broken syntax): exit 0 (it trained), or exit 2 with one line
   `tformer: error: ...` and the directory byte for byte as before (refused), or exit 2 with that line last
   after a run that started (a diverged one: its skipped steps are noted first, its log kept). Never a
   traceback, never another exit code (`check_train`).
2. A request to an endpoint of `tformer serve` (`requests_for(endpoint)`: bodies of right and wrong types,
   missing and extra keys, huge numbers, lone surrogates, byte-order marks, empty strings, nested objects,
   sent as escaped JSON, as UTF-8, or after a BOM): a 4xx answered {"error": one line}, or a 200 whose answer is
   the library's for the same input (`check_request`). Never a 5xx.

To stay fast, a run that trains stops after its first step, evaluating there as at its end
(`first_step_only`). Sizes that are valid but too big for the machine are drawn small for the keys that set
them (`COSTLY`): model.overrides.d_model=2**31 fills the memory while the model is built, before anything can
answer, and train.accum_steps=2**31 makes one step last for days.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import io
import json
import os
import re
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import pytest
import torch
from hypothesis import strategies as st

import tformer
from tests.cli.catalogue import build_world, snapshot
from tformer.cli import main
from tformer.configio import flat_keys, to_dict
from tformer.data.lines import normalise_text
from tformer.decoding import SampleConfig
from tformer.training import loop
from tformer.training.rundir import holds_run

# --- 1. tformer train with mutated overrides ------------------------------------------------------------


def recipe_keys(recipe: Path) -> dict[str, Any]:
    """The dotted keys of a recipe as loaded (its defaults included) and of its model's config, each with its
    value there; but out_dir, which the property sets itself, and train.compile (torch.compile takes minutes on
    a CPU)."""
    from tformer.tasks import load_recipe

    loaded = load_recipe(recipe)
    keys = {k: v for k, v in flat_keys(to_dict(loaded)).items() if k not in ("out_dir", "train.compile")}
    model = tformer.preset(loaded.model.preset)
    return {**{f"model.overrides.{k}": v for k, v in flat_keys(to_dict(model)).items()}, **keys}


BOGUS_KEYS = ["train.max_step", "data.vocab", "model.overrides.heads", "nonsense", "train", "model",
              "model.overrides", "model.overrides.attention", "model.overrides.norm", "train.optim", "task", ".",
              "train..lr", "train.", "train.optim.lr.more", "model.overrides.attention.kind.x", "data.src.x", "",
              "sample", "decode"]
# Keys whose valid values cost: sizes of the model (memory), the micro-batches of a step and the tries of a
# diverging one (time), threads; their integers are drawn from -3..64 (and beyond 64 bits, which is refused).
COSTLY = ("model.overrides.", "train.accum_steps", "train.threads", "train.max_bad_steps", "decode.beam")

INTEGERS = ["0", "-1", "2147483648", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
            "1" + "0" * 30, "9" * 5000, "0x1F", "0o17", "0b101", "1_000", "+5", "-0"]
BIG_INTEGERS = {"2147483648", "9223372036854775807", "1_000"}  # in range, so valid for COSTLY keys: left out there
FLOATS = [".inf", "-.inf", ".nan", ".NaN", "1e999", "-1e999", "-0.0", "1e-320", "1.5", "0.5", "1e300", "-1e300",
          "3.", ".5", "1e-9", "0.999999", "1.0"]
PLAIN = ["true", "false", "null", "~", "", "yes", "no", "on", "off", "True", "NULL", "y", "n"]
TAGS = ["!!bool maybe", "!!bool true", "!!int x", "!!int 7", "!!float y", "!!float 1", "!!binary aGVsbG8=",
        "!!binary !", "!!str 5", "!!timestamp 2024-13-45", "!!timestamp 2024-01-01", "!!set {a, b}",
        "!!omap [a: 1]", "!!python/object:os.system ls", "!custom x", "!!map [1]", "!!seq {a: 1}", "!!null x",
        "!!merge x", "2024-13-45", "2024-01-01"]
# what choice keys allow, so that a draw reaches past the type checks (no corpus that downloads, no big preset)
CHOICES = ["adam", "adamw", "cosine", "linear", "constant", "inverse_sqrt", "pre", "post", "rope", "alibi", "none",
           "learned", "sinusoidal", "windowed", "sparse", "lowrank", "linear", "lsh", "ssm", "eager", "sdpa",
           "layernorm", "rmsnorm", "gelu", "swiglu", "relu", "files", "char", "bpe", "translation", "lm", "bert",
           "classify", "cpu", "auto", "cuda", "cuda:7", "mps", "ddp", "fsdp", "valid_loss", "bleu", "chrf",
           "bits_per_char", "finished", "best", "transformer-tiny", "gpt-tiny", "llama-tiny", "bert-tiny",
           "normal", "xavier", "strided", "fixed", "split", "interleaved", ".", "nonexistent.tsv", "a,b", "/dev/null"]
BROKEN = ["[", "{", "]", "'unterminated", '"unterminated', "a: b: c", "- x", "? x", "%TAG ! x", "&a [*a]",
          "*undefined", "{a: 1, a: 2}", "[1, 2", "\t", "\x00", "x\ny", "|\n  block", "@x", "`x", "---", "...",
          "&a [1, 2]", "{<<: {a: 1}}"]
COLLECTIONS = ["[]", "{}", "[1, 2]", "[[[]]]", "{a: 1}", "[0.9, -.inf]", "[0.9, 0.98]", "[0.9, 0.98, 0.5]",
               "{kind: windowed, window: 0}", "{kind: windowed, window: 2}", "{kind: lowrank, rank: 3}",
               "{kind: sparse, block: 0}", "{kind: lsh, buckets: 3}", "{placement: pre}", "{kind: rope}",
               '["the cat", ""]', "[a, null]", "{name: adam}", "[1, [2, [3]]]", "{preset: gpt-tiny}"]

scalars = st.one_of(
    st.integers(-3, 70).map(str), st.sampled_from(INTEGERS), st.sampled_from(FLOATS),
    st.floats(allow_nan=True, allow_infinity=True).map(repr), st.sampled_from(PLAIN), st.sampled_from(TAGS),
    st.sampled_from(CHOICES), st.text(max_size=12), st.text(max_size=12).map(json.dumps),
    st.sampled_from(BROKEN))
flow = st.recursive(scalars.filter(lambda s: s.isalnum() or s in FLOATS),
                    lambda inner: st.one_of(st.lists(inner, max_size=3).map(lambda v: f"[{', '.join(v)}]"),
                                            st.dictionaries(st.sampled_from(["a", "kind", "window", "lr", "1"]), inner,
                                                            max_size=2).map(
                                                lambda d: "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}")),
                    max_leaves=5)
yaml_values = st.one_of(scalars, st.sampled_from(COLLECTIONS), flow)


def typed_values(example: Any) -> st.SearchStrategy[str]:
    """YAML of the type of a key's value `example` (so that a draw reaches past the type checks), or any."""
    if isinstance(example, bool):
        return st.sampled_from(["true", "false", "yes", "no"])
    if isinstance(example, int):
        return st.integers(-3, 70).map(str) | st.sampled_from(INTEGERS)
    if isinstance(example, float):
        return st.sampled_from(FLOATS) | st.floats(-2, 2).map(repr)
    if isinstance(example, str):
        return st.sampled_from(CHOICES)
    if isinstance(example, list | tuple):
        return st.sampled_from(COLLECTIONS)
    return yaml_values


@st.composite
def override(draw: st.DrawFn, keys: dict[str, Any]) -> str:
    key = draw(st.sampled_from(sorted(keys)) | st.sampled_from(BOGUS_KEYS))
    value = draw(typed_values(keys.get(key)) if draw(st.booleans()) else yaml_values)
    costly = key.startswith(COSTLY) or key in ("model", "train")
    if costly and (value in BIG_INTEGERS or re.fullmatch(r"[+-]?[0-9]{1,18}", value) and not -4 < int(value) < 65):
        value = "64"  # a size the machine holds
    return f"{key}={value}"


def overrides(keys: dict[str, Any]) -> st.SearchStrategy[list[str]]:
    """One to three `key=value` overrides over `keys` (a key -> its value, `recipe_keys`) and bogus keys."""
    return st.lists(override(keys), min_size=1, max_size=3)


@contextlib.contextmanager
def first_step_only() -> Iterator[None]:
    """Trainings stop after their first counted step, evaluating and saving there as at their end (so an
    evaluation's and a task's last part's refusals are met too)."""
    original = loop._evaluate_or_stop

    def stop(run: Any, task: Any, train: Any, **kwargs: Any) -> bool:
        return original(run, task, dataclasses.replace(train, max_steps=run.state["step"]), **kwargs)

    with mock.patch.object(loop, "_evaluate_or_stop", stop):
        yield


STEP_NOTE = "tformer: step "  # a diverged step's note on stderr, before the line that stops the run


def check_train(recipe: Path, mutated: list[str], root: Path) -> str:
    """Run `tformer train RECIPE *mutated out_dir=ROOT/run` in ROOT (its working directory, so a relative path
    lands there) and assert the contract; returns the outcome: "trained", "refused" or "stopped"."""
    root.mkdir(parents=True, exist_ok=True)
    argv = ["train", str(recipe), *mutated, f"out_dir={root}/run", "--no-progress"]
    before = snapshot(root)
    out, err = io.StringIO(), io.StringIO()
    cwd = Path.cwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), first_step_only():
            code = main(argv)
    finally:
        os.chdir(cwd)
    out, err = out.getvalue(), err.getvalue()
    where = f"tformer {' '.join(map(repr, argv))}"
    assert "Traceback" not in out + err, f"{where}: a traceback\n{err}"
    if code == 0:
        return "trained"
    assert code == 2, f"{where}: exit {code}\n{err}"
    lines = err.splitlines()
    assert lines and lines[-1].startswith("tformer: error: ") and len(lines[-1]) > len("tformer: error: "), \
        f"{where}: the last line of stderr is not the error\n{err}"
    notes = lines[:-1]
    if notes or holds_run(root / "run"):  # the run started: its notes and log stay
        assert all(n.startswith(STEP_NOTE) for n in notes), f"{where}: more than one line\n{err}"
        return "stopped"
    assert snapshot(root) == before, f"{where}: refused, but it left {sorted(set(snapshot(root)) - set(before))}"
    return "refused"


# --- 2. requests to tformer serve -------------------------------------------------------------------------

WORDS = ["the", "cat", "dog", "sees", "a", "big", "red", "house", "runs"]
sentence = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join)
SPECIAL_TEXTS = ["", " ", "\n", "\t", "the cat\nthe dog", "the\rcat", "\ud800", "the \udfff cat", "\ufeff",
                 "\ufeffthe cat", "\ufeff\ufeff", "\ufeff ", "\x00", "\u2028", "🐱 the cat", "e\u0301", "\u202ethe",
                 "the cat " * 300, "x" * 2001, "the " * 60, "[CLS] [SEP] [MASK]", "<s> </s> <pad> <unk>"]
texts = st.integers(0, 5).flatmap(lambda i: st.sampled_from(SPECIAL_TEXTS) if i == 0 else st.text(max_size=30)
                                   if i == 1 else sentence)
HUGE = [2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30, -(2**63) - 1, 10**400]
integers = st.integers(0, 9).flatmap(lambda i: st.sampled_from(HUGE) if i == 0 else st.integers(-2, 24 if i < 4 else 4))
floats = st.integers(0, 9).flatmap(
    lambda i: st.sampled_from([0.0, -0.0, 1e-320, 1e308, -1e308, 1.0000000001]) if i == 0 else st.floats(-2, 3))
json_scalars = st.one_of(st.none(), st.booleans(), integers, floats, texts)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3) |
                           st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)

FIELDS: dict[str, dict[str, st.SearchStrategy]] = {  # each endpoint's fields, with values of their right type
    "translate": {"text": texts, "texts": st.lists(texts, max_size=17), "beam": integers, "lenpen": floats},
    "generate": {"prompt": texts, "max_new_tokens": integers, "temperature": floats, "top_k": integers,
                 "top_p": floats, "seed": integers, "stop": st.booleans(), "stream": st.booleans()},
    "score": {"text": texts, "texts": st.lists(texts, max_size=17), "per_token": st.booleans()},
    "classify": {"text": texts, "texts": st.lists(texts, max_size=17), "top": integers},
    "attention": {"text": texts, "target": texts},
}
ENDPOINTS = tuple(FIELDS)
SERVED_BY = {"translate": ["seq2seq"], "generate": ["gpt", "hf gpt"], "score": ["gpt", "hf gpt"],
             "classify": ["bert classifier"], "attention": ["seq2seq", "gpt", "bert classifier", "bert"]}
RAW = [b"", b"null", b"[]", b'"text"', b"5", b"{", b'{"text": "a"', b'{"text": NaN}', b'{"text": "a", "top": Infinity}',
       b'{"text": "a", "text": "b"}', b'{"texts": ["a"], "x": {"y": 1, "y": 2}}', b"\xff\xfe", b'{"text": "\xff"}',
       b"[" * 5000 + b"]" * 5000, b'{"text": ' + b"[" * 5000 + b"]" * 5000 + b"}", b"\xef\xbb\xbf{}",
       b'{"text": "the cat"}\n{"text": "the dog"}', b'{"text": "the cat"} x', b" " * 10 + b'{"text": "the cat"}']


CORE = {"translate": ["text", "texts"], "score": ["text", "texts"], "classify": ["text", "texts"],
        "attention": ["text"], "generate": ["prompt"]}  # what a body needs, one of them


@st.composite
def body(draw: st.DrawFn, endpoint: str) -> Any:
    """A JSON value for `endpoint`: mostly an object with one of the fields it needs and some of the others
    (each of its type, or of any), perhaps an unknown one; sometimes any JSON at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    fields = FIELDS[endpoint]
    chosen = draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=3))
    if draw(st.integers(0, 4)):
        chosen = [draw(st.sampled_from(CORE[endpoint])), *(c for c in chosen if c not in CORE[endpoint])]
    out = {name: draw(fields[name] if draw(st.integers(0, 5)) else json_values) for name in chosen}
    if draw(st.integers(0, 9)) == 0:
        out[draw(st.sampled_from(["txt", "Text", "beams", "", "text ", "\ud800"]))] = draw(json_values)
    return out


@st.composite
def encoded(draw: st.DrawFn, endpoint: str) -> bytes:
    """A body as bytes: JSON with non-ASCII escaped (lone surrogates as \\ud800), as UTF-8 (a lone surrogate
    as the bytes no UTF-8 has), after a byte-order mark, or one of RAW's broken bodies."""
    how = draw(st.sampled_from(["escaped", "escaped", "utf-8", "bom", "raw"]))
    if how == "raw":
        return draw(st.sampled_from(RAW))
    value = draw(body(endpoint))
    if how == "escaped":
        return json.dumps(value).encode()
    text = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return b"\xef\xbb\xbf" + text if how == "bom" else text


def requests_for(endpoint: str) -> st.SearchStrategy[tuple[str, bytes]]:
    """(the kind of server, the body's bytes) of a request to /endpoint: mostly to a server that serves it."""
    others = sorted({k for v in SERVED_BY.values() for k in v})
    kinds = st.integers(0, 7).flatmap(lambda i: st.sampled_from(SERVED_BY[endpoint] if i else others))
    return st.tuples(kinds, encoded(endpoint))


def post(url: str, path: str, raw: bytes) -> tuple[int, str, str]:
    """(status, content type, text) of one POST with `raw` as its body."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        connection.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read().decode()
    finally:
        connection.close()


def server_events(text: str) -> list[tuple[str, Any]]:
    """[(event, data)] of a server-sent event stream's text."""
    out, name = [], None
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            out.append((name, json.loads(line[len("data: "):])))
    return out


@dataclasses.dataclass
class Library:
    """What the library answers, for the servers' checkpoints (kind -> `inference.Loaded`), with the servers'
    defaults: the translator's decoding settings (its run's recipe.yaml) and --max-new-tokens."""

    loaded: dict[str, Any]
    max_new_tokens: dict[str, int]

    @classmethod
    def of(cls, checkpoints: dict[str, Path], max_new_tokens: dict[str, int]) -> Library:
        from tformer.inference import load

        return cls({kind: load(path) for kind, path in checkpoints.items()}, max_new_tokens)

    def answer(self, kind: str, endpoint: str, b: dict[str, Any]) -> Callable[[Any], None]:
        """An assertion that a 200's answer to body `b` at /endpoint of the `kind` server is the library's."""
        return getattr(self, f"_{endpoint}")(self.loaded[kind], kind, b)

    def _translate(self, loaded: Any, kind: str, b: dict) -> Callable[[Any], None]:
        from tformer.inference import run_decode, translate, with_given

        decode = with_given(run_decode(loaded.path), beam=b.get("beam"), lenpen=b.get("lenpen"))
        many = b.get("texts") is not None
        texts = [normalise_text(t) for t in (b["texts"] if many else [b["text"]])]
        want = translate(loaded.model, loaded.tokenizer, texts, decode)

        def check(got: Any) -> None:
            assert got == ({"translations": want} if many else {"translation": want[0]})
        return check

    def _generate(self, loaded: Any, kind: str, b: dict) -> Callable[[Any], None]:
        from tformer.inference import continue_prompt

        settings = {k: b[k] for k in ("temperature", "top_k", "top_p", "seed") if b.get(k) is not None}
        most = b.get("max_new_tokens", self.max_new_tokens[kind])
        most = self.max_new_tokens[kind] if most is None else most
        fixed = settings.get("temperature", 1.0) == 0 or settings.get("seed") is not None
        sample = SampleConfig(stop=b.get("stop", True), **settings)
        want = continue_prompt(loaded.model, loaded.tokenizer, b.get("prompt", ""), sample,
                               max_new_tokens=most) if fixed else None

        def check(got: Any) -> None:
            assert set(got) == {"text", "tokens", "finish"} and got["finish"] in ("stop", "length")
            assert 0 <= got["tokens"] <= most
            if want is not None:  # greedy, or seeded: one answer; an unseeded draw is any
                assert got["text"] == want
        return check

    def _score(self, loaded: Any, kind: str, b: dict) -> Callable[[Any], None]:
        from tformer.inference import score_lines

        many = b.get("texts") is not None
        texts = [normalise_text(t) for t in (b["texts"] if many else [b["text"]])]
        want = score_lines(loaded.model, loaded.tokenizer, texts)

        def check(got: Any) -> None:
            scores = got["scores"] if many else [got["score"]]
            assert len(scores) == len(want)
            for g, w in zip(scores, want, strict=True):
                assert g["tokens"] == w.n_tokens and g["log_prob"] == pytest.approx(w.log_prob, rel=1e-4, abs=1e-4)
                assert ("token_log_probs" in g) == b.get("per_token", True)
        return check

    def _classify(self, loaded: Any, kind: str, b: dict) -> Callable[[Any], None]:
        from tformer.inference import top_labels

        many = b.get("texts") is not None
        texts = [normalise_text(t) for t in (b["texts"] if many else [b["text"]])]
        top = b.get("top", 1)
        want = top_labels(loaded.model, loaded.tokenizer, texts, top=loaded.config.n_labels)

        def check(got: Any) -> None:
            ranked = got["classifications"] if many else [got["classification"]]
            for g, w in zip(ranked, want, strict=True):
                assert [x["label"] for x in g] == [name for name, _ in w[:top]]
                assert [x["probability"] for x in g] == pytest.approx([p for _, p in w[:top]], rel=1e-4, abs=1e-6)
        return check

    def _attention(self, loaded: Any, kind: str, b: dict) -> Callable[[Any], None]:
        from tformer.viz.attention import attention_maps

        target = b.get("target")
        want = attention_maps(loaded.model, loaded.tokenizer, normalise_text(b["text"]),
                              target=None if target is None else normalise_text(target))

        def check(got: Any) -> None:
            assert [(m["part"], m["queries"], m["keys"]) for m in got["maps"]] == \
                [(m.part, m.queries, m.keys) for m in want]
            for g, w in zip(got["maps"], want, strict=True):
                assert torch.allclose(torch.tensor(g["weights"]), w.weights.float(), atol=1e-5)
        return check


def read_json(raw: bytes) -> Any:
    """A body as the server reads it, for a 200's expected answer: JSON, after a byte-order mark if any."""
    return json.loads(raw.decode("utf-8-sig"))


def check_request(servers: dict[str, str], library: Library, kind: str, endpoint: str, raw: bytes) -> str:
    """POST `raw` to /endpoint of the `kind` server and assert the contract; returns the outcome: the status
    ("200", "422", ...)."""
    status, content_type, text = post(servers[kind], f"/{endpoint}", raw)
    where = f"POST /{endpoint} to the {kind} server, body {raw[:300]!r}"
    assert status < 500, f"{where}: {status} {text[:500]}"
    if status != 200:
        assert 400 <= status < 500, f"{where}: {status} {text[:500]}"
        answer = json.loads(text)
        assert isinstance(answer, dict) and list(answer) == ["error"], f"{where}: {status} {text[:500]}"
        message = answer["error"]
        assert isinstance(message, str) and message and "\n" not in message and "\r" not in message, \
            f"{where}: {status} {message!r}"
        return str(status)
    value = read_json(raw)
    if content_type.startswith("text/event-stream"):  # a streamed generation: its pieces, then the answer
        events = server_events(text)
        assert events and events[-1][0] == "done", f"{where}: {events[-3:]}"
        assert all(name == "token" and isinstance(e["text"], str) for name, e in events[:-1]), f"{where}: {events}"
        answer = events[-1][1]
    else:
        answer = json.loads(text)
    warnings = answer.pop("warnings", []) if isinstance(answer, dict) else []  # notes beside the answer
    assert isinstance(warnings, list) and all(isinstance(w, str) and w and "\n" not in w for w in warnings), \
        f"{where}: warnings {warnings!r}"
    try:
        library.answer(kind, endpoint, value)(answer)
    except AssertionError as e:
        raise AssertionError(f"{where}: 200 {str(answer)[:300]} is not the library's answer ({e})") from None
    return "200"


# --- running the properties many times (benchmarks/fuzz.py) -------------------------------------------------


def tally(check: Callable[..., str], counts: Counter, failures: list[str]) -> Callable[..., None]:
    """`check` that counts its outcomes in `counts` and, instead of raising, keeps each failure (its message
    or traceback) in `failures`: for a run of many examples that reports them all."""

    def run(*args: Any) -> None:
        try:
            counts[check(*args)] += 1
        except AssertionError as e:
            counts["failed"] += 1
            failures.append(str(e).strip())
        except Exception:  # a traceback out of main: the contract's worst breach
            counts["failed"] += 1
            failures.append(traceback.format_exc(limit=-8).strip())
    return run


def world(root: Path) -> Any:
    """The catalogue's tiny recipes (a translation and a language model over tiny files), built in `root`."""
    root.mkdir(parents=True, exist_ok=True)
    return build_world(root)



__all__ = ["COSTLY", "ENDPOINTS", "Library", "check_request", "check_train", "first_step_only", "overrides", "post",
           "recipe_keys", "requests_for", "tally", "world"]
