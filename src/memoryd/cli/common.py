"""What every command shares: exit codes, the client options, loading the config, one
client session per command, and printing. Every module of this package imports it; it
imports none of them."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click

from memoryd.config import Config, load_config
from memoryd.errors import MemorydError

EXIT_OK, EXIT_DEGRADED, EXIT_ERROR, EXIT_NOT_RUNNING, EXIT_DENIED = 0, 1, 2, 3, 4


class UsageProblem(click.ClickException):
    """A bad config file or flag: exit 2, never 1 (which `status` uses for "degraded")."""

    exit_code = EXIT_ERROR


def load(config: str | None, socket: str | None, admin_socket: str | None = None) -> Config:
    try:
        return load_config(config, socket=socket, admin_socket_path=admin_socket)
    except MemorydError as exc:
        raise UsageProblem(exc.message) from exc


def client_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--socket, --config and --json, shared by every client command."""

    @click.option("--socket", "socket_path", default=None, metavar="PATH",
                  help="Agent socket path (default: $MEMORYD_SOCKET, then the runtime dir).")
    @click.option("--config", "config_path", default=None, metavar="FILE",
                  help="Config file (default: $MEMORYD_CONFIG, then the platform config dir).")
    @click.option("--admin-socket", "admin_socket", default=None, metavar="PATH",
                  help="Operator socket path (default: $MEMORYD_ADMIN_SOCKET, then "
                       "memoryd-admin/memoryd-admin.sock beside the agent socket's directory).")
    @click.option("--json", "as_json", is_flag=True, help="Print the method's result as JSON.")
    @functools.wraps(fn)
    def wrapper(*args: Any, socket_path: str | None, config_path: str | None, as_json: bool,
                admin_socket: str | None, **kwargs: Any) -> Any:
        cfg = load(config_path, socket_path, admin_socket)
        return fn(*args, cfg=cfg, as_json=as_json, **kwargs)

    return wrapper


def owner_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The owner fields, each with an environment variable."""
    for name, env in reversed((("agent-id", "MEMORYD_AGENT_ID"), ("user-id", "MEMORYD_USER_ID"),
                               ("project", "MEMORYD_PROJECT"), ("session-id", "MEMORYD_SESSION_ID"))):
        fn = click.option(f"--{name}", envvar=env, default=None, show_envvar=True,
                          help=f"Owner field {name.replace('-', '_')}.")(fn)
    return fn


def call(cfg: Config, method: str, params: dict[str, Any], admin: bool = False) -> Any:
    with client_session(cfg, admin=admin) as client:
        return client.call(method, params)


@contextlib.contextmanager
def client_session(cfg: Config, *, admin: bool = False, timeout_s: float | None = None) -> Iterator[Any]:
    """One connection for one or many calls; a daemon that is down, refuses, or breaks the
    connection ends the command with the message and exit code every command uses."""
    from memoryd.client import AccessDenied, Client, ClientError, Disconnected, NotRunning, Timeout

    try:
        client = Client(config=cfg, admin=admin) if timeout_s is None else Client(
            config=cfg, admin=admin, timeout_s=timeout_s)
        with client:
            yield client
    except NotRunning as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_NOT_RUNNING)
    except AccessDenied as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_DENIED)
    except ClientError as exc:
        field = f" [field: {exc.field}]" if exc.field else ""
        click.echo(f"Error {exc.code}: {exc.message}{field}", err=True)
        sys.exit(EXIT_ERROR)
    except (Disconnected, Timeout) as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_ERROR)


def print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False))


def owner_fields(agent_id: str | None, user_id: str | None, project: str | None,
            session_id: str | None) -> dict[str, str]:
    values = {"agent_id": agent_id, "user_id": user_id, "project": project, "session_id": session_id}
    return {k: v for k, v in values.items() if v}
