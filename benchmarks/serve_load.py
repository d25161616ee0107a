"""Load on `tformer serve`: throughput and latency of /translate under concurrent clients, with micro-batching
and without it, or of /generate with continuous batching and with micro-batching (`--mode generate`), and a
check that every request got its own answer.

    python -m benchmarks.serve_load [--checkpoint DIR] [--requests 96] [--clients 1,4,16] [--max-batch 16]
        [--batch-wait-ms 5] [--texts 1] [--beam N] [--sentences FILE] [--device cpu] [--out FILE] [--quick]

The server is the real command, `tformer serve` in a subprocess on 127.0.0.1 (a free port), so that the
clients (threads of this process, one keep-alive connection each) do not share its interpreter. Each load
sends the same `--requests` requests (each `--texts` sentences), spread over C clients that send their
share one after another, each request as soon as the client's previous one is answered:

    micro-batching   one server (--max-batch, --batch-wait-ms), loaded by 1, 4 and 16 clients in turn
    one at a time    one server with --max-batch = --texts (one request a batch), loaded by the largest number
                     of clients

Reported per load: requests/s and sentences/s (all the requests over the wall time from the first sent to
the last answered), p50 and p99 latency (send to answer), the mean batch the server formed (its /info,
before and after), and how many answers were right. Right means: status 200, and the translations equal
those of the same sentences decoded alone, one by one, by the library in this process (`translate` with
the server's decoding settings); a lost, failed or mixed-up answer counts as wrong. Both servers get two
warm-up requests first. The ratio is requests/s with micro-batching over one at a time, at the largest
number of clients.

Without --checkpoint a small translator is trained first (a made-up word-for-word English->German corpus,
a few hundred steps; --quick: a few steps) in a temporary directory. Sentences: --sentences FILE (one a
line), else the test split of the checkpoint's run (its recipe.yaml), else the made-up corpus's.

Generation (`--mode generate`): continuous batching against today's micro-batching, the same load on each

    python -m benchmarks.serve_load --mode generate [--checkpoint GPT] [--requests 256] [--clients 32,128]
        [--max-batch 32] [--new-tokens 16,256] [--think-ms 100] [--batching continuous,micro] [--device cpu]
        [--against DIR] [--rounds 1]

Each server is `tformer serve --generate-batching continuous` or `micro` in its own process (one after the
other, the same --max-batch, --batch-wait-ms and --max-new-tokens). C clients each send their share of
`--requests` streamed greedy requests, one after another, each after an exponential pause of mean
`--think-ms` (so each client's requests arrive as a Poisson process, at most C in flight); a request's prompt
is a made-up sentence and its max_new_tokens is drawn uniformly from `--new-tokens` LOW,HIGH (seeded: every
server gets the same requests, in the same order, with the same pauses). Reported per server and number of
clients: tokens/s (the tokens answered over the wall time from the first sent to the last answered), time to
first token (send to the first `token` event) and inter-token latency (between a stream's successive `token`
events) at p50 and p99, and how many answers were right: status 200, the `done` text equal to the same
request decoded alone by the library in this process (`inference.continue_prompt`, greedy), and the streamed
pieces the start of it (all of it, but for an unfinished character the stream holds back at the end). The
ratio is continuous over micro tokens/s at the largest C (`ratios`: over each other server, one a round;
`ratio`: over micro, the first round's). Both servers get two warm-up requests first.

`--against DIR` loads one more server, `micro@DIR`: the micro-batched /generate of another checkout of tformer
(DIR its root, as `git worktree add DIR COMMIT` makes one; the server runs with DIR/src first on its
PYTHONPATH), so that a change is measured against the code before it under the same load. A checkout from
before continuous batching, whose `tformer serve` has no --generate-batching, gets none of its options. Its
answers are checked against this checkout's library alone, like the others'. `--rounds N` starts the servers
in turn N times: the machine's speed drifts over minutes, so a comparison is a pair from one round, and the
ratios are printed per round.

The GPT: --checkpoint (a GPT checkpoint, such as `benchmarks.bench_models.gpt`'s trained one), else a randomly
initialised GPT of GPT-2's shape (6 layers, d 512, 8 heads, d_ff 2048, context 512) with a character
tokenizer, written to a temporary directory, so that the bench is self-contained (--quick: 1 layer, d 32).
Its weights are drawn wide (normal, std 0.5), so that its logits are spread out and a greedy tie, where
rounding alone could pick either token, is rare. An untrained model rarely writes its end-of-text token, so
most continuations run to their max_new_tokens: the mix of lengths is the draw's.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import torch

from benchmarks.common import apply_quick, device_arg, markdown_table, table_head, table_row, write_json

QUICK = dict(requests=12, clients="1,4", max_batch=4, train_steps=20)
GENERATE = dict(requests=256, clients="32,128", max_batch=32)  # --mode generate's defaults
QUICK_GENERATE = dict(requests=8, clients="4", max_batch=4, new_tokens="2,6", think_ms=5.0)
GPT_SHAPE = dict(n_layers=6, d_model=512, n_heads=8, d_ff=2048, max_len=512)
QUICK_GPT_SHAPE = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_len=64)
WORDS = "the a house cat dog sees big small red blue runs sleeps old man woman child".split()
GERMAN = dict(zip(WORDS, "der ein Haus Katze Hund sieht gross klein rot blau rennt schlaeft alt Mann Frau "
                         "Kind".split(), strict=True))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, default=None, help="a translator checkpoint (default: train one)")
    p.add_argument("--requests", type=int, default=96, help="requests per load")
    p.add_argument("--clients", default="1,4,16", help="numbers of concurrent clients, comma-separated")
    p.add_argument("--max-batch", type=int, default=16, help="the micro-batching server's --max-batch")
    p.add_argument("--batch-wait-ms", type=float, default=5.0, help="the micro-batching server's --batch-wait-ms")
    p.add_argument("--texts", type=int, default=1, help="sentences per request")
    p.add_argument("--beam", type=int, default=None, help="beam size (default: the run's recipe)")
    p.add_argument("--sentences", type=Path, default=None, help="source sentences, one a line")
    p.add_argument("--device", type=device_arg, default="cpu")
    p.add_argument("--train-steps", type=int, default=300, help="steps of the translator trained without --checkpoint")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--quick", action="store_true", help="a smoke run: a few requests, 1 and 4 clients")
    p.add_argument("--mode", choices=("translate", "generate"), default="translate")
    p.add_argument("--new-tokens", default="16,256", help="generate: max_new_tokens drawn from LOW,HIGH")
    p.add_argument("--think-ms", type=float, default=100.0, help="generate: a client's mean pause before a request")
    p.add_argument("--batching", default="continuous,micro", help="generate: the servers' --generate-batching")
    p.add_argument("--max-step-tokens", type=int, default=512, help="generate: the continuous server's cap")
    p.add_argument("--seed", type=int, default=0, help="generate: the draws of lengths, prompts and pauses")
    p.add_argument("--against", type=Path, default=None, help="generate: also another checkout's micro-batching")
    p.add_argument("--rounds", type=int, default=1, help="generate: the servers started in turn this many times")
    args = p.parse_args(argv)
    if args.mode == "generate":
        if args.quick:
            apply_quick(p, args, QUICK_GENERATE)
        apply_quick(p, args, GENERATE)
    elif args.quick:
        apply_quick(p, args, QUICK)
    args.client_counts = [int(c) for c in str(args.clients).split(",")]
    if args.requests < 1 or args.texts < 1 or args.rounds < 1 or min(args.client_counts) < 1:
        p.error("--requests, --texts, --rounds and every --clients count must be positive")
    if args.against is not None and not (args.against / "src" / "tformer").is_dir():
        p.error(f"--against {args.against}: not a checkout of tformer (no src/tformer in it)")
    low, _, high = str(args.new_tokens).partition(",")
    args.new_range = (int(low), int(high or low))
    if not 1 <= args.new_range[0] <= args.new_range[1]:
        p.error(f"--new-tokens {args.new_tokens}: give LOW,HIGH with 1 <= LOW <= HIGH")
    args.batchings = str(args.batching).split(",")
    if args.texts > args.max_batch:
        p.error(f"--texts {args.texts} is more than --max-batch {args.max_batch}: the server refuses such requests")
    return args


# --- the model and the sentences ------------------------------------------------------------------------


def made_up_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = [[rng.choice(WORDS) for _ in range(rng.randint(3, 9))] for _ in range(n)]
    return [(" ".join(w), " ".join(GERMAN[x] for x in w)) for w in words]


def train_small(root: Path, steps: int) -> Path:
    """A small translator trained on the made-up corpus; returns its checkpoint (RUN/last)."""
    from tformer.configio import from_dict
    from tformer.runs import RunDir
    from tformer.tasks.translation import TranslationRecipe, train_translation

    for split, n, seed in (("train", 2000, 0), ("valid", 50, 1), ("test", 200, 2)):
        (root / f"{split}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in made_up_pairs(n, seed)))
    recipe = from_dict(TranslationRecipe, {
        "out_dir": str(root / "run"),
        "data": {"corpus": "files", "train": str(root / "train.tsv"), "valid": str(root / "valid.tsv"),
                 "test": str(root / "test.tsv"), "vocab_size": 320, "max_tokens": 1500, "bleu_sentences": 20},
        "model": {"preset": "transformer-tiny", "overrides": {"d_model": 64, "d_ff": 128, "n_heads": 4,
                                                             "n_layers": 2, "max_len": 64}},
        "train": {"max_steps": steps, "eval_every": steps, "log_every": max(1, steps // 5),
                  "optim": {"lr": 2e-3}, "schedule": {"name": "constant", "warmup": min(50, steps)}},
        "decode": {"beam": 1}})
    train_translation(recipe, progress=False)
    return RunDir(root / "run").last


def source_sentences(args: argparse.Namespace, checkpoint: Path) -> list[str]:
    """--requests * --texts sentences (the source repeated if it has fewer)."""
    from tformer.tasks.translation import load_split, run_recipe

    if args.sentences is not None:
        lines = [line for line in args.sentences.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        recipe = run_recipe(checkpoint)
        if recipe is not None and (recipe.data.corpus == "bible" or recipe.data.test):
            lines = [s for s, _ in load_split(recipe.data, "test")]
        else:
            lines = [s for s, _ in made_up_pairs(200, 2)]
    need = args.requests * args.texts
    return [lines[i % len(lines)] for i in range(need)]


# --- the server ------------------------------------------------------------------------------------------


class Server:
    """`tformer serve` in a subprocess: `with Server(checkpoint, options) as url:`; stopped with Ctrl-C."""

    def __init__(self, checkpoint: Path, options: list[str], env: dict[str, str] | None = None) -> None:
        self.argv = [sys.executable, "-m", "tformer", "serve", "--checkpoint", str(checkpoint), "--port", "0",
                     *options]
        self.env = env  # None: this process's

    def __enter__(self) -> str:
        self.log = tempfile.TemporaryFile(mode="w+")  # the server's stderr: a pipe nobody reads could fill up
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self.log, text=True, env=self.env)
        line = self.process.stdout.readline()  # "tformer serve: ... listening on URL (...)", then nothing
        match = re.search(r"listening on (http://\S+) ", line)
        if match is None:
            self.process.kill()
            self.process.wait()
            self.log.seek(0)
            raise RuntimeError(f"tformer serve did not start: {line}{self.log.read()}")
        return match.group(1)

    def __exit__(self, *exc: object) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def load_servers(checkpoint: Path, servers: list[tuple[str, list[str], list[int], dict[str, str] | None]], *,
                 warm_up: Callable[[str], object], measure_one: Callable[[str, int], dict[str, Any]],
                 head: list[str], align: str, cells: Callable[[dict[str, Any]], list[object]],
                 rounds: int = 1) -> list[dict[str, Any]]:
    """Each server (name, its options, the numbers of clients to load it with, its environment or None)
    started in turn, `rounds` times, warmed up by `warm_up(url)`, then loaded by each number of clients,
    `measure_one(url, clients)` giving the row, printed as it comes (a table's rows under `head`, `cells` of
    each). Returns the rows, each with its server's name and its round (from 0)."""
    print(table_head(head, align), flush=True)
    rows = []
    for round_ in range(rounds):
        for name, options, counts, env in servers:
            with Server(checkpoint, options, env) as url:
                warm_up(url)
                for clients in counts:
                    row = {"server": name, "round": round_, **measure_one(url, clients)}
                    rows.append(row)
                    print(table_row(cells(row)), flush=True)
    return rows


def report(result: dict[str, Any], table: str, out: Path | None) -> dict[str, Any]:
    """Prints the table, writes the result to `out` (JSON) if given, and returns it."""
    print()
    print(table)
    if out:
        write_json(out, result)
        print(f"\nwritten to {out}")
    return result


def request(connection: http.client.HTTPConnection, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, json.loads(response.read())


def connect(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)


def load(url: str, bodies: list[dict], clients: int) -> dict[str, Any]:
    """Send `bodies` from `clients` threads (client c sends bodies c, c + clients, ...); the answers, each
    request's latency and the wall time."""
    answers: list[Any] = [None] * len(bodies)
    latency = [0.0] * len(bodies)
    barrier = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        connection = connect(url)
        barrier.wait()
        for i in range(c, len(bodies), clients):
            start = time.perf_counter()
            try:
                answers[i] = request(connection, "POST", "/translate", bodies[i])
            except (OSError, http.client.HTTPException, json.JSONDecodeError) as e:
                answers[i] = (None, repr(e))
            latency[i] = time.perf_counter() - start
        connection.close()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return {"answers": answers, "latency": latency, "wall": time.perf_counter() - start}


def batch_stats(url: str) -> dict[str, Any]:
    connection = connect(url)
    try:
        return request(connection, "GET", "/info")[1]["batches"]
    finally:
        connection.close()


def measure(url: str, bodies: list[dict], expected: list[list[str]], clients: int, texts: int) -> dict[str, Any]:
    before = batch_stats(url)
    run = load(url, bodies, clients)
    after = batch_stats(url)
    right = sum(status == 200 and answer.get("translations") == want
                for (status, answer), want in zip(run["answers"], expected, strict=True))
    n, ms = len(bodies), sorted(x * 1000 for x in run["latency"])
    batches = after["batches"] - before["batches"]
    return {"clients": clients, "requests": n, "answered": sum(a[0] == 200 for a in run["answers"]), "right": right,
            "wall_s": run["wall"], "requests_per_s": n / run["wall"], "sentences_per_s": n * texts / run["wall"],
            "p50_ms": statistics.median(ms), "p99_ms": ms[min(n - 1, round(0.99 * (n - 1)))],
            "batches": batches, "mean_batch": (after["requests"] - before["requests"]) / batches if batches else 0.0,
            "wrong": [i for i, ((s, a), w) in enumerate(zip(run["answers"], expected, strict=True))
                      if not (s == 200 and a.get("translations") == w)][:10]}


# --- the benchmark ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from tformer import inference

    args = parse_args(argv)
    if args.mode == "generate":
        return main_generate(args)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint
        if checkpoint is None:
            print(f"training a small translator ({args.train_steps} steps) ...", flush=True)
            checkpoint = train_small(Path(tmp), args.train_steps)
        sentences = source_sentences(args, checkpoint)
        loaded = inference.load(checkpoint, command="translate")
        model, tokenizer = loaded.model, loaded.tokenizer
        decode = inference.with_given(inference.run_decode(checkpoint), beam=args.beam)
        print(f"decoding {len(sentences)} sentences alone (the reference) ...", flush=True)
        start = time.perf_counter()
        alone = [inference.translate(loaded.decoder, tokenizer, [s], decode)[0] for s in sentences]
        alone_s = time.perf_counter() - start
        del model, loaded
        k = args.texts
        bodies = [{"texts": sentences[i * k:(i + 1) * k], **({"beam": args.beam} if args.beam else {})}
                  for i in range(args.requests)]
        expected = [alone[i * k:(i + 1) * k] for i in range(args.requests)]
        common = ["--device", args.device, "--max-batch"]
        servers = [("micro-batching", [*common, str(args.max_batch), "--batch-wait-ms", str(args.batch_wait_ms)],
                    args.client_counts, None),
                   ("one at a time", [*common, str(k), "--batch-wait-ms", "0"], [max(args.client_counts)], None)]
        rows = load_servers(checkpoint, servers, warm_up=lambda url: load(url, bodies[:2], 1),
                            measure_one=lambda url, clients: measure(url, bodies, expected, clients, k),
                            head=TRANSLATION_HEAD, align=ALIGN, cells=translation_cells)
    most = max(args.client_counts)
    batched = next(r for r in rows if r["server"] == "micro-batching" and r["clients"] == most)
    single = next(r for r in rows if r["server"] == "one at a time")
    result = {"args": {k: v for k, v in vars(args).items() if k != "client_counts"}, "checkpoint": str(checkpoint),
              "decode": {"beam": decode.beam, "lenpen": decode.lenpen}, "alone_s": alone_s,
              "machine": machine_info(),
              "results": rows, "ratio": batched["requests_per_s"] / single["requests_per_s"],
              "all_right": all(r["right"] == r["requests"] for r in rows)}
    return report(result, translation_table(result), args.out)


ALIGN = "lrrrrrrr"  # both tables: the server, then numbers
TRANSLATION_HEAD = ["server", "clients", "requests/s", "sentences/s", "p50 latency", "p99 latency", "mean batch",
                    "right answers"]


def translation_cells(r: dict[str, Any]) -> list[object]:
    return [r["server"], r["clients"], f"{r['requests_per_s']:.2f}", f"{r['sentences_per_s']:.2f}",
            f"{r['p50_ms']:.0f} ms", f"{r['p99_ms']:.0f} ms", f"{r['mean_batch']:.2f}", f"{r['right']}/{r['requests']}"]


def translation_table(result: dict[str, Any]) -> str:
    most = max(r["clients"] for r in result["results"])
    return (markdown_table(TRANSLATION_HEAD, ALIGN, map(translation_cells, result["results"]))
            + f"\n\nmicro-batching / one at a time, at {most} clients: {result['ratio']:.2f}x requests/s")

# --- generation: continuous batching against micro-batching ---------------------------------------------


def random_gpt(root: Path, quick: bool) -> Path:
    """A randomly initialised GPT (GPT-2's shape; `quick`: tiny) with a character tokenizer, saved at ROOT/gpt."""
    import tformer
    from tformer.tokenization import CharTokenizer
    from tformer.training.checkpoint import save_checkpoint

    torch.manual_seed(0)
    chars = CharTokenizer.train([" ".join(WORDS)])
    config = tformer.preset("gpt-tiny", {**(QUICK_GPT_SHAPE if quick else GPT_SHAPE), "vocab_size": chars.vocab_size,
                                         "bos_id": chars.eos_id, "eos_id": chars.eos_id,
                                         "init": {"kind": "normal", "std": 0.5}})
    save_checkpoint(root / "gpt", model=tformer.build_model(config), config=config, tokenizer=chars)
    return root / "gpt"


def generation_bodies(args: argparse.Namespace) -> list[dict]:
    """--requests streamed greedy requests: a made-up prompt of 2 to 8 words, max_new_tokens from --new-tokens."""
    rng = random.Random(args.seed)
    return [{"prompt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8))), "temperature": 0,
             "max_new_tokens": rng.randint(*args.new_range), "stream": True} for _ in range(args.requests)]


def stream(connection: http.client.HTTPConnection, body: dict) -> dict[str, Any]:
    """One streamed /generate: its status, the send time, each `token` event's piece and arrival time, and
    the `done` answer (or the `error`)."""
    sent = time.perf_counter()
    connection.request("POST", "/generate", body=json.dumps(body).encode(),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    out: dict[str, Any] = {"status": response.status, "sent": sent, "pieces": [], "times": [], "done": None}
    if response.status != 200:
        out["done"] = json.loads(response.read())
        return out
    name = None
    for line in response:  # "event: NAME", "data: JSON", "" between events
        line = line.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: "):])
            if name == "token":
                out["pieces"].append(data["text"])
                out["times"].append(time.perf_counter())
            else:
                out["done"] = {name: data}
    return out


def generation_load(url: str, bodies: list[dict], clients: int, think_s: float, seed: int) -> dict[str, Any]:
    """Send `bodies` from `clients` threads (client c sends bodies c, c + clients, ..., each after a pause
    drawn from Exp(mean `think_s`), seeded per client); every stream and the wall time."""
    streams: list[Any] = [None] * len(bodies)
    barrier = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        rng = random.Random(seed * 100_003 + c)
        connection = connect(url)
        barrier.wait()
        for i in range(c, len(bodies), clients):
            time.sleep(rng.expovariate(1 / think_s) if think_s > 0 else 0)
            try:
                streams[i] = stream(connection, bodies[i])
            except (OSError, http.client.HTTPException, json.JSONDecodeError) as e:
                streams[i] = {"status": None, "error": repr(e)}
                connection.close()
                connection = connect(url)
        connection.close()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return {"streams": streams, "wall": time.perf_counter() - start}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def generation_measure(url: str, bodies: list[dict], expected: list[str], clients: int,
                       args: argparse.Namespace) -> dict[str, Any]:
    run = generation_load(url, bodies, clients, args.think_ms / 1000, args.seed)
    right, tokens, first, gaps = [], 0, [], []
    for s, want in zip(run["streams"], expected, strict=True):
        done = (s.get("done") or {}).get("done") if s["status"] == 200 else None
        right.append(done is not None and done["text"] == want and want.startswith("".join(s["pieces"])))
        if done is not None:
            tokens += done["tokens"]
        if s.get("times"):
            first.append((s["times"][0] - s["sent"]) * 1000)
            gaps += [(b - a) * 1000 for a, b in zip(s["times"], s["times"][1:], strict=False)]
    n = len(bodies)
    return {"clients": clients, "requests": n, "answered": sum(s["status"] == 200 for s in run["streams"]),
            "right": sum(right), "wall_s": run["wall"], "tokens": tokens, "tokens_per_s": tokens / run["wall"],
            "ttft_p50_ms": percentile(first, 0.5), "ttft_p99_ms": percentile(first, 0.99),
            "itl_p50_ms": percentile(gaps, 0.5), "itl_p99_ms": percentile(gaps, 0.99),
            "wrong": [i for i, ok in enumerate(right) if not ok][:10]}


def main_generate(args: argparse.Namespace) -> dict[str, Any]:
    from tformer import inference
    from tformer.decoding import SampleConfig

    base = ["--device", args.device, "--max-batch", str(args.max_batch), "--batch-wait-ms",
            str(args.batch_wait_ms), "--max-new-tokens", str(args.new_range[1])]
    servers = [(batching, [*base, "--max-step-tokens", str(args.max_step_tokens), "--generate-batching", batching],
                args.client_counts, None) for batching in args.batchings]
    if args.against is not None:
        servers.append(against_server(args.against, base, args.client_counts))
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or random_gpt(Path(tmp), args.quick)
        bodies = generation_bodies(args)
        loaded = inference.load(checkpoint, command="generate", device=args.device)
        print(f"generating {len(bodies)} continuations alone (the reference) ...", flush=True)
        expected = [inference.continue_prompt(loaded.decoder, loaded.tokenizer, b["prompt"],
                                              SampleConfig(temperature=0.0), max_new_tokens=b["max_new_tokens"])
                    for b in bodies]
        del loaded
        rows = load_servers(checkpoint, servers,
                            warm_up=lambda url: generation_load(url, bodies[:2], 1, 0.0, args.seed),
                            measure_one=lambda url, clients: generation_measure(url, bodies, expected, clients, args),
                            head=GENERATION_HEAD, align=ALIGN, cells=generation_cells, rounds=args.rounds)
    ratios = continuous_over(rows, max(args.client_counts))
    result = {"args": {k: v for k, v in vars(args).items() if k not in ("client_counts", "new_range", "batchings")},
              "checkpoint": str(args.checkpoint) if args.checkpoint else "random GPT", "machine": machine_info(),
              "results": rows, "ratio": (ratios.get("micro") or [None])[0], "ratios": ratios,
              "all_right": all(r["right"] == r["requests"] for r in rows)}
    return report(result, generation_table(result), args.out)


def against_server(root: Path, options: list[str], counts: list[int]) -> tuple[str, list[str], list[int], dict]:
    """The micro-batching /generate of the checkout at `root`: its src first on the path; --generate-batching
    micro where its `tformer serve` has that option, else none (before continuous batching, /generate was
    micro-batched and knew neither it nor --max-step-tokens)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root.resolve() / "src"),
                                                                     os.environ.get("PYTHONPATH")]))}
    usage = subprocess.run([sys.executable, "-m", "tformer", "serve", "--help"], env=env, capture_output=True,
                           text=True)
    if usage.returncode != 0:
        last = (usage.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"serve_load: --against {root}: its `tformer serve --help` failed: {last}", file=sys.stderr)
        sys.exit(2)
    extra = ["--generate-batching", "micro"] if "--generate-batching" in usage.stdout else []
    return f"micro@{root}", [*options, *extra], counts, env


def continuous_over(rows: list[dict[str, Any]], clients: int) -> dict[str, list[float]]:
    """Continuous batching's tokens/s over each other server's at `clients` clients, one ratio a round."""
    at = {(r["server"], r["round"]): r["tokens_per_s"] for r in rows if r["clients"] == clients}
    others = dict.fromkeys(name for name, _ in at if name != "continuous")  # in the order they ran
    return {name: [at["continuous", k] / at[name, k] for n, k in at if n == name and ("continuous", k) in at]
            for name in others}


def machine_info() -> dict[str, Any]:
    return {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "torch": torch.__version__, "nice": os.nice(0)}


GENERATION_HEAD = ["server", "clients", "tokens/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "right answers"]


def generation_cells(r: dict[str, Any]) -> list[object]:
    server = r["server"] if r["round"] == 0 else f"{r['server']} (round {r['round'] + 1})"
    return [server, r["clients"], f"{r['tokens_per_s']:.1f}", f"{r['ttft_p50_ms']:.0f} ms",
            f"{r['ttft_p99_ms']:.0f} ms", f"{r['itl_p50_ms']:.1f} ms", f"{r['itl_p99_ms']:.1f} ms",
            f"{r['right']}/{r['requests']}"]


def generation_table(result: dict[str, Any]) -> str:
    table = markdown_table(GENERATION_HEAD, ALIGN, map(generation_cells, result["results"]))
    most = max(r["clients"] for r in result["results"])
    lines = [f"continuous / {name}, at {most} clients: {', '.join(f'{x:.2f}x' for x in ratios)} tokens/s"
             for name, ratios in result["ratios"].items() if ratios]
    return "\n\n".join([table, *lines])

if __name__ == "__main__":
    sys.exit(0 if main()["all_right"] else 1)
