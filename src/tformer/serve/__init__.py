"""`tformer serve`: one checkpoint behind an HTTP API and a web page, with concurrent requests decoded in
micro-batches, generations in a continuous batch.

    limits.py    what a server takes (text sizes, new tokens, batch size and wait)
    errors.py    what a client is told: InputError and its status, a fault's one line
    requests.py  the JSON bodies' strict base (`Body`), bodies made from the decoding settings, their errors
                 as one line
    service.py   the loaded model, what an endpoint is, and the checks every endpoint shares
    endpoints/   one module per POST endpoint (its body, work, checks, batch runner and answer), listed in
                 its __init__.py, which also loads a checkpoint with the endpoints it serves
    batching.py  the micro-batcher: a queue and one worker that runs batches in the model's thread; that
                 thread (the checkpoint loaded in it too)
    scheduler.py continuous batching of generations: requests join and leave the running batch at token
                 boundaries, step by step in the same thread
    app.py       the FastAPI app: /health, /info, a route per endpoint, errors as {"error": ...}
    page.py      the web page (static/: HTML, CSS, JavaScript; no build step)
    doors.py     who may come in: Host allow-list, Origin, content type, API key; the body's deadline
    connections.py  the h11 protocol with a deadline for headers and a cap on connections; EMFILE in one line
    server.py    uvicorn in the foreground or in a thread, behind the doors

Adding an endpoint is its module under endpoints/, its line in `endpoints.ENDPOINTS`, and the page.

FastAPI and uvicorn are the `serve` extra (`pip install fastapi uvicorn`, or `pip install '.[serve]'` from a
clone): only `limits`, `errors` and `service` import without them, and the rest of tformer never
imports this package.
"""

from tformer.serve.limits import Limits

__all__ = ["Limits"]
