"""`tformer serve --checkpoint DIR [--host H] [--port P] [--device D] [--dtype T] [--draft DIR [--draft-tokens K]]
[limits] [doors]`: one checkpoint
behind an HTTP API and a web page (`tformer.serve`), until Ctrl-C stops it gracefully (requests under way are
answered first; exit code 0). The doors (`serve.doors`): which Host names are let in, an API key, and the
deadlines and cap that keep half-sent requests from holding the server.

The endpoints follow what the checkpoint holds (a translator, a GPT, a BERT classifier; trained here or
imported with `tformer convert --from-hf`). It needs the `serve` extra (FastAPI and uvicorn); without it the
command says how to install it, in one line, and exits with 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import os
import sys
from functools import partial

from tformer.cli import options, shared
from tformer.errors import UserError, install_hint
from tformer.serve.limits import GENERATE_BATCHING

INSTALL = f"tformer serve needs FastAPI and uvicorn: {install_hint('serve')}"
API_KEY_VARIABLE = "TFORMER_API_KEY"


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a checkpoint over HTTP: a JSON API and a web page")
    p.add_argument("--checkpoint", required=True, help="a checkpoint directory: translator, GPT or BERT classifier")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only); every interface only when "
                        "spelt 0.0.0.0 or :: (an empty value is refused), and then give --api-key")
    p.add_argument("--port", type=options.integer(low=0, high=65535), default=8000, help="0: any free port")
    p.add_argument("--allow-host", action="append", default=None, metavar="NAME",
                   help="another name requests may give in their Host header, e.g. the public name of a proxy in "
                        "front (repeatable; '*': any). Always let in: the --host address and localhost, 127.0.0.1, "
                        "[::1]; with --host 0.0.0.0 or ::, also this machine's name and any IP address (default: "
                        "those only)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="require the header 'Authorization: Bearer KEY' on every request but the page and /health "
                        f"(default: ${API_KEY_VARIABLE} if set, which keeps the key out of `ps`)")
    p.add_argument("--header-timeout", type=options.real(), default=10.0, metavar="S",
                   help="seconds a request's line and headers may take to arrive; then 408 and the connection closes")
    p.add_argument("--body-timeout", type=options.real(), default=30.0, metavar="S",
                   help="seconds a request's body may take once its headers are in; then 408 and the connection "
                        "closes")
    p.add_argument("--max-connections", type=options.integer(low=1), default=None, metavar="N",
                   help="connections held at once; more are answered 503 at once (default: half of `ulimit -n`, "
                        "at most 1000)")
    shared.add_placement(p, int8=True)
    shared.add_draft(p)  # a GPT's /generate: a request decoded alone is decoded speculatively
    p.add_argument("--max-chars", type=options.integer(low=1), default=2000, help="characters of one text")
    p.add_argument("--max-tokens", type=options.integer(low=1), default=None,
                   help="tokens of one text (default: the model's context)")
    p.add_argument("--max-new-tokens", type=options.integer(low=1), default=256, help="tokens /generate writes")
    p.add_argument("--max-batch", type=options.integer(low=1), default=16, help="sentences decoded together")
    p.add_argument("--batch-wait-ms", type=options.real(low=0, high=10_000), default=5.0,
                   help="how long a batch's first request waits for others (0: take only those already waiting)")
    p.add_argument("--generate-batching", choices=GENERATE_BATCHING, default=None,
                   help="/generate: continuous (requests join and leave the running batch at token boundaries) or "
                        "micro (whole requests batched, as the other endpoints); default: continuous, or micro "
                        "with --draft")
    p.add_argument("--max-step-tokens", type=options.integer(low=1), default=512, metavar="N",
                   help="continuous batching: tokens one step feeds the model (a live request's 1, an admitted "
                        "prompt's all); the first prompt of a step is admitted however long")
    p.set_defaults(run=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    if any(importlib.util.find_spec(name) is None for name in ("fastapi", "uvicorn")):
        raise UserError(INSTALL)
    from tformer.serve.app import create_app
    from tformer.serve.batching import model_thread
    from tformer.serve.doors import Doors
    from tformer.serve.endpoints import load_service
    from tformer.serve.limits import Limits
    from tformer.serve.server import bind, make_server, url_of

    shared.check_draft(args)
    limits = Limits(max_chars=args.max_chars, max_tokens=args.max_tokens, max_new_tokens=args.max_new_tokens,
                    max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms,
                    generate_batching=generate_batching(args), max_step_tokens=args.max_step_tokens)
    api_key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_VARIABLE) or None
    doors = Doors(host=args.host, allow_hosts=tuple(args.allow_host or ()), api_key=api_key,
                  header_timeout=args.header_timeout, body_timeout=args.body_timeout,
                  max_connections=args.max_connections)
    thread = model_thread()  # loads the checkpoint too, so that no other thread runs the model's operators
    try:
        service = thread.submit(partial(load_service, args.checkpoint, limits=limits, **shared.placement(args),
                                        draft=args.draft, draft_tokens=shared.draft_tokens(args))).result()
        sock = bind(args.host, args.port)
    except BaseException:
        thread.shutdown(wait=False)
        raise
    print(f"tformer serve: {service.kind} checkpoint {args.checkpoint} on {service.info()['device']}; listening on "
          f"{url_of(sock)} (endpoints: {', '.join('/' + e for e in service.endpoints)}; Ctrl-C stops)", flush=True)
    address = sock.getsockname()[0]
    if api_key is None and not ipaddress.ip_address(address.partition("%")[0]).is_loopback:
        print(f"tformer serve: warning: listening on {address}, which other machines can reach, with no "
              f"authentication: anyone who reaches it can use the model; give --api-key (or ${API_KEY_VARIABLE}), "
              "and put a TLS proxy in front", file=sys.stderr, flush=True)
    try:
        make_server(create_app(service, thread=thread), doors=doors, log_level="info").run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn stops gracefully on Ctrl-C, then raises it again
        pass
    print("tformer serve: stopped", flush=True)
    return 0


def generate_batching(args: argparse.Namespace) -> str:
    """--generate-batching, or its default: continuous, but micro with --draft (speculative decoding decodes
    one generation at a time, which a continuous batch of many rows does not)."""
    if args.draft is None:
        return args.generate_batching or "continuous"
    if args.generate_batching == "continuous":
        raise UserError(f"--draft {args.draft} decodes a generation alone (speculative decoding, batch size 1), "
                        "which --generate-batching continuous does not; drop one of them")
    return "micro"

