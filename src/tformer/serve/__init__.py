"""`tformer serve`: one checkpoint behind an HTTP API and a web page, with concurrent requests decoded in
micro-batches.

    limits.py    what a server takes (text sizes, new tokens, batch size and wait)
    service.py   the loaded model; each endpoint's request checked, and a batch of them decoded
    batching.py  the micro-batcher: a queue and one worker that runs batches in the model's thread
    requests.py  the JSON bodies (strict pydantic models) and their errors as one line
    app.py       the FastAPI app: routes, server-sent events, errors as {"error": ...}
    page.py      the web page (static/: HTML, CSS, JavaScript; no build step)
    doors.py     who may come in: Host allow-list, Origin, content type, API key; the body's deadline
    connections.py  the h11 protocol with a deadline for headers and a cap on connections; EMFILE in one line
    server.py    uvicorn in the foreground or in a thread, behind the doors

FastAPI and uvicorn are the `serve` extra (`pip install 'tformer[serve]'`; from a clone of the repository,
`pip install -e '.[serve]'`): only `limits` and `service` import without them, and the rest of tformer never
imports this package.
"""

from tformer.serve.limits import Limits

__all__ = ["Limits"]
