"""`tformer serve --checkpoint DIR [--host H] [--port P] [--device D] [--dtype T] [limits]`: one checkpoint behind an
HTTP API and a web page (`tformer.serve`), until Ctrl-C stops it gracefully (requests under way are
answered first; exit code 0).

The endpoints follow what the checkpoint holds (a translator, a GPT, a BERT classifier; trained here or
imported with `tformer convert --from-hf`). It needs the `serve` extra (FastAPI and uvicorn); without it the
command says how to install it, in one line, and exits with 2.
"""

from __future__ import annotations

import argparse
import importlib.util

from tformer.cli import options, shared
from tformer.errors import UserError

INSTALL = "tformer serve needs FastAPI and uvicorn: pip install 'tformer[serve]'"


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a checkpoint over HTTP: a JSON API and a web page")
    p.add_argument("--checkpoint", required=True, help="a checkpoint directory: translator, GPT or BERT classifier")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=options.integer(low=0, high=65535), default=8000, help="0: any free port")
    shared.add_placement(p, int8=True)
    p.add_argument("--max-chars", type=options.integer(low=1), default=2000, help="characters of one text")
    p.add_argument("--max-tokens", type=options.integer(low=1), default=None,
                   help="tokens of one text (default: the model's context)")
    p.add_argument("--max-new-tokens", type=options.integer(low=1), default=256, help="tokens /generate writes")
    p.add_argument("--max-batch", type=options.integer(low=1), default=16, help="sentences decoded together")
    p.add_argument("--batch-wait-ms", type=options.real(low=0, high=10_000), default=5.0,
                   help="how long a batch's first request waits for others (0: take only those already waiting)")
    p.set_defaults(run=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    if any(importlib.util.find_spec(name) is None for name in ("fastapi", "uvicorn")):
        raise UserError(INSTALL)
    from tformer.serve.app import create_app
    from tformer.serve.limits import Limits
    from tformer.serve.server import bind, make_server, url_of
    from tformer.serve.service import load_service

    limits = Limits(max_chars=args.max_chars, max_tokens=args.max_tokens, max_new_tokens=args.max_new_tokens,
                    max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms)
    service = load_service(args.checkpoint, limits=limits, **shared.placement(args))
    sock = bind(args.host, args.port)
    print(f"tformer serve: {service.kind} checkpoint {args.checkpoint} on {service.info()['device']}; listening on "
          f"{url_of(sock)} (endpoints: {', '.join('/' + e for e in service.endpoints)}; Ctrl-C stops)", flush=True)
    try:
        make_server(create_app(service), log_level="info").run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn stops gracefully on Ctrl-C, then raises it again
        pass
    print("tformer serve: stopped", flush=True)
    return 0
