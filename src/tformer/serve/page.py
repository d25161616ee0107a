"""The web page at `/`: plain HTML, CSS and JavaScript shipped in the package (`serve/static/`, package
data), nothing to build and nothing fetched from elsewhere. It asks /info what the model serves, sends the
text typed in to /translate, /generate (streamed), /classify or /score, and draws the sentence's attention
(/attention) on a canvas.

The page puts no text into HTML: the script writes every string (the user's, the model's) with
`textContent` or draws it with `fillText`, and the Content-Security-Policy allows scripts from this server
only (no inline script), so text cannot become markup or code.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
         "style.css": "text/css; charset=utf-8"}
HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                                      "base-uri 'none'; frame-ancestors 'none'",
           "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


def static_file(name: str) -> bytes:
    return resources.files("tformer.serve").joinpath("static", name).read_bytes()


def add_routes(app: FastAPI) -> None:
    """GET / (the page) and GET /static/app.js, /static/style.css; HEAD of each (the headers alone)."""

    def serve(name: str) -> Response:
        return Response(static_file(name), media_type=FILES[name], headers=HEADERS)

    @app.api_route("/", methods=["GET", "HEAD"])
    async def index() -> Response:
        return serve("index.html")

    @app.api_route("/static/app.js", methods=["GET", "HEAD"])
    async def script() -> Response:
        return serve("app.js")

    @app.api_route("/static/style.css", methods=["GET", "HEAD"])
    async def style() -> Response:
        return serve("style.css")


__all__ = ["FILES", "add_routes", "static_file"]
