"""A small real HTTP rerank server on loopback, for tests: llama.cpp's and TEI's shapes.

``/v1/rerank`` answers ``{"results": [{"index", "relevance_score"}]}`` (llama.cpp's
server), any other path ``[{"index", "score"}]`` (text-embeddings-inference). A text's
score is its position in ``preferred`` (earlier is higher), else a fixed one below (from its CRC),
so a test knows the order to expect. ``mode`` switches it to failing (HTTP 500) or slow.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class RerankServer:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.mode = "ok"  # "ok", "fail", "slow"
        self.slow_s = 1.0
        self.preferred: list[str] = []
        self.port = 0

    def score(self, text: str) -> float:
        if text in self.preferred:
            return 100.0 - self.preferred.index(text)
        return -zlib.crc32(text.encode()) / 2**32

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        self.requests.append((path, body))
        if self.mode == "fail":
            return 500, {"error": "model crashed"}
        if self.mode == "slow":
            time.sleep(self.slow_s)
        texts = body.get("documents") if path.endswith("/v1/rerank") else body.get("texts")
        if not isinstance(texts, list):
            return 422, {"error": "missing documents/texts"}
        scored = sorted(((i, self.score(t)) for i, t in enumerate(texts)), key=lambda p: -p[1])
        if path.endswith("/v1/rerank"):
            return 200, {"object": "list", "results": [{"index": i, "relevance_score": s} for i, s in scored]}
        return 200, [{"index": i, "score": s} for i, s in scored]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def serving() -> Iterator[RerankServer]:
    """A RerankServer on 127.0.0.1 (a free port), stopped at exit."""
    state = RerankServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            status, out = state.answer(self.path, json.loads(self.rfile.read(length) or b"{}"))
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            # The client may have given up (its budget) and closed the connection.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
