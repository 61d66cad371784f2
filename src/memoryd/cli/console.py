"""``memoryd console``: check the operator socket, bind loopback, print one URL, serve."""

from __future__ import annotations

import json
import sys

import click

from memoryd.cli.common import EXIT_DENIED, EXIT_ERROR, EXIT_NOT_RUNNING, client_options
from memoryd.config import Config

MISSING_EXTRA = ("the console needs the optional packages Starlette, Jinja2 and uvicorn: "
                 "pip install 'memoryd[console]'")


@click.command("console")
@client_options
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1 (0: a free one picked at random).")
@click.option("--open", "open_browser", is_flag=True, help="Open the URL in the default browser too.")
def console_command(cfg: Config, as_json: bool, port: int, open_browser: bool) -> None:
    """Serve the operator console: a web page on 127.0.0.1 for this user's daemon.

    Prints one URL with a one-time token; open it in a browser on this machine
    (the token becomes a session cookie and leaves the address bar). The page
    shows health, queues and charts of the last hour and day, searches and
    lists memories, edits or forgets one, decides review proposals, retries
    dead jobs and verifies the audit chain, all through the daemon's operator
    socket. It listens on loopback only and stops on Ctrl-C. With --json it
    prints {"url": ..., "port": ...} on one line instead.

    \b
    Example:
      memoryd console
      memoryd console --port 8765 --open
    """
    try:
        from memoryd.console import server
    except ImportError as exc:
        raise click.ClickException(f"{MISSING_EXTRA} ({exc})") from exc
    from memoryd.client import AccessDenied, Client, ClientError, NotRunning
    from memoryd.client.aio import AsyncClient
    from memoryd.console.security import Secrets

    try:
        with Client(config=cfg, admin=True, timeout_s=5.0) as probe:
            probe.call("daemon.ping")
    except NotRunning as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_NOT_RUNNING)
    except AccessDenied as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_DENIED)
    except (ClientError, OSError) as exc:
        click.echo(f"Error: the operator socket did not answer daemon.ping ({exc}); "
                   "check the daemon with `memoryd status`", err=True)
        sys.exit(EXIT_ERROR)
    try:
        sock = server.bind(port)
    except OSError as exc:
        click.echo(f"Error: cannot listen on 127.0.0.1:{port} ({exc.strerror}); "
                   "choose another --port or leave it out for a free one", err=True)
        sys.exit(EXIT_ERROR)
    secrets_ = Secrets()
    url = server.url_for(sock, secrets_)
    if as_json:
        click.echo(json.dumps({"url": url, "port": sock.getsockname()[1]}))
    else:
        click.echo(url)
    sys.stdout.flush()
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    server.serve(sock, lambda: AsyncClient(config=cfg, admin=True), secrets_)
