"""What the serve tests share (conftest.py holds the fixtures built from it): tiny checkpoints of every kind a
server loads, real uvicorn servers for them on 127.0.0.1, and an HTTP client.

`build(root)`: an encoder-decoder with a BPE tokenizer in a run directory whose recipe.yaml sets decode.beam 2;
a GPT with a character tokenizer; a BERT classifier with WordPiece and named labels; a BERT pretraining
checkpoint; and a Hugging Face GPT-2 directory (with its tokenizer) imported by `tformer convert --from-hf`.
The models are untrained but their weights are drawn wide (normal, std 0.5) so that what they write depends
on their input, which the batching tests need to tell answers apart.

`start(checkpoint, **limits)`: a server of one's own (a context manager giving its URL); with
`sleep=until_full`, its batches wait until they hold --max-batch sentences, however long that takes. `call(url,
method, path, body)`: (status, parsed JSON) over http.client; `events(url, path, body)`: a stream's server-sent
events.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import torch
import yaml

import tformer
from tformer.cli import main
from tformer.interop import to_hf
from tformer.tokenization import BPETokenizer, CharTokenizer, WordPieceTokenizer
from tformer.training.checkpoint import save_checkpoint

WORDS = "the a house cat dog sees big small red blue runs sleeps".split()
TINY = {"d_model": 32, "d_ff": 64, "n_heads": 4, "n_layers": 2, "max_len": 48}
WIDE = {"kind": "normal", "std": 0.5}  # untrained weights whose outputs depend on the input
LABELS = ["sport", "politics", "tech"]


def sentences(n: int, seed: int = 0) -> list[str]:
    """`n` different made-up sentences of 2 to 8 words (different lengths: batches need padding)."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8)))
        if s not in out:
            out.append(s)
    return out


def build(root: Path) -> dict[str, Path]:
    torch.manual_seed(0)
    text = sentences(60, seed=1)
    bpe = BPETokenizer.train(text * 3, vocab_size=300)
    ids = dict(vocab_size=bpe.vocab_size, pad_id=bpe.pad_id, bos_id=bpe.bos_id, eos_id=bpe.eos_id)
    config = tformer.preset("transformer-tiny", {**TINY, **ids, "init": WIDE})
    run = root / "mt"
    save_checkpoint(run / "best", model=tformer.build_model(config), config=config, tokenizer=bpe)
    recipe = {"task": "translation", "out_dir": str(run), "data": {"corpus": "bible"},
              "decode": {"beam": 2, "max_len_b": 6, "max_len_a": 1.0}}
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe))

    chars = CharTokenizer.train(text)
    config = tformer.preset("gpt-tiny", {**TINY, "vocab_size": chars.vocab_size, "bos_id": chars.eos_id,
                                         "eos_id": chars.eos_id, "init": WIDE})
    save_checkpoint(root / "gpt", model=tformer.build_model(config), config=config, tokenizer=chars)

    pieces = WordPieceTokenizer.train(text * 3, vocab_size=100)
    config = tformer.preset("bert-tiny", {**TINY, "vocab_size": pieces.vocab_size, "n_labels": 3,
                                          "label_names": LABELS, "init": WIDE})
    save_checkpoint(root / "clf", model=tformer.BertClassifier(config), config=config, tokenizer=pieces)
    config = tformer.preset("bert-tiny", {**TINY, "vocab_size": pieces.vocab_size})
    save_checkpoint(root / "bert", model=tformer.build_model(config), config=config, tokenizer=pieces)

    gpt2 = tformer.GPTConfig(vocab_size=bpe.vocab_size, d_model=32, n_heads=2, d_ff=64, n_layers=2, max_len=48,
                             bos_id=bpe.eos_id, eos_id=bpe.eos_id)
    to_hf(tformer.GPT(gpt2), root / "hf-gpt2", tokenizer=bpe)
    assert main(["convert", "--from-hf", str(root / "hf-gpt2"), "--out", str(root / "hf")]) == 0
    return {"seq2seq": run / "best", "gpt": root / "gpt", "bert classifier": root / "clf", "bert": root / "bert",
            "hf gpt": root / "hf"}


async def until_full(seconds: float) -> None:
    """A batcher's wait for company that never ends by itself: a batch runs once it holds --max-batch
    sentences, never before, whenever its requests arrive."""
    await asyncio.get_running_loop().create_future()


@contextmanager
def start(checkpoint: Path, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
          **limits: Any) -> Iterator[str]:
    """A real uvicorn server for `checkpoint` on 127.0.0.1 (a free port), in a thread, its batches waiting for
    company with `sleep`; yields its URL."""
    from tformer.serve import Limits
    from tformer.serve.app import create_app
    from tformer.serve.endpoints import load_service
    from tformer.serve.server import ServerThread

    service = load_service(checkpoint, limits=Limits(**{"batch_wait_ms": 2.0, **limits}), device="cpu")
    with ServerThread(create_app(service, sleep=sleep)) as url:
        yield url


def call(url: str, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, the answer as JSON, or as text if it is not JSON) of one request; `body` is sent as JSON,
    `raw` as the bytes given."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        connection.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        payload = response.read().decode()
        try:
            return response.status, json.loads(payload)
        except json.JSONDecodeError:
            return response.status, payload
    finally:
        connection.close()


def events(url: str, path: str, body: Any) -> list[tuple[str, dict]]:
    """The server-sent events of one streamed request: [(event name, data)], in the order they came."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        connection.request("POST", path, body=json.dumps(body).encode(),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200, response.read()
        assert response.getheader("Content-Type").startswith("text/event-stream")
        out, name = [], None
        for line in response:  # "event: NAME", "data: JSON", "" between events
            line = line.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                out.append((name, json.loads(line[len("data: "):])))
        return out
    finally:
        connection.close()
