"""Serving the console: a loopback socket bound first (so the URL names its port), then uvicorn."""

from __future__ import annotations

import socket
from collections.abc import Callable

from memoryd.client.aio import AsyncClient
from memoryd.console.app import HOST, create_app
from memoryd.console.security import Secrets


def bind(port: int = 0, host: str = HOST) -> socket.socket:
    """A listening TCP socket on ``host`` (loopback only) at ``port`` (0: a free one the kernel picks).

    Listening before the URL is printed: a browser that connects at once waits in the
    backlog until the server takes it, rather than being refused.
    """
    # proto named: asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP, and
    # without it each page waited on a delayed ACK (45 ms a page instead of 5 in bench/console.py).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_for(sock: socket.socket, secrets_: Secrets) -> str:
    """The one URL to open: the bound address, port and the token."""
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}/?token={secrets_.token}"


def serve(sock: socket.socket, client_factory: Callable[[], AsyncClient], secrets_: Secrets) -> None:
    """Run the console on ``sock`` until SIGINT/SIGTERM (uvicorn's own handlers stop it)."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    app = create_app(client_factory, secrets_, port=port, host=host)
    # No access log: the first request's line would carry the token. No Server header.
    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False,
                            date_header=False, lifespan="on", proxy_headers=False)
    uvicorn.Server(config).run(sockets=[sock])
