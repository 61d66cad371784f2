"""``memoryd run``, ``status``, ``config`` and ``doctor``: the daemon itself."""

from __future__ import annotations

import sys
from typing import Any

import click

from memoryd.cli.common import (
    EXIT_DEGRADED,
    EXIT_ERROR,
    EXIT_OK,
    call,
    client_options,
    load,
    print_json,
)
from memoryd.config import Config, load_config, render_defaults
from memoryd.errors import MemorydError


@click.command("run")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Data directory (env MEMORYD_DATA_DIR).")
@click.option("--db-url", default=None, help="Store URL (env MEMORYD_DB_URL).")
@click.option("--socket", "socket_path", type=click.Path(dir_okay=False), default=None,
              help="Agent socket path (env MEMORYD_SOCKET).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Config file (env MEMORYD_CONFIG).")
@click.option("--admin-socket", "admin_socket", type=click.Path(dir_okay=False), default=None,
              help="Operator socket path (env MEMORYD_ADMIN_SOCKET; default: "
                   "memoryd-admin/memoryd-admin.sock in the parent of the agent socket's directory).")
@click.option("--embedder", default=None, help="none | bundled | PATH (env MEMORYD_EMBEDDER).")
@click.option("--llm", default=None, help="none | bundled | PATH (env MEMORYD_LLM).")
@click.option("--log-level", default=None, help="debug | info | warning | error.")
@click.option("--log-format", default=None, help="json | console | auto.")
def run(data_dir: str | None, db_url: str | None, socket_path: str | None, config_path: str | None,
        admin_socket: str | None, embedder: str | None, llm: str | None, log_level: str | None,
        log_format: str | None) -> None:
    """Run the daemon in the foreground until SIGTERM or Ctrl-C.

    \b
    Example:
      memoryd run --data-dir ~/.local/share/memoryd --embedder bundled
    """
    # The config is read before the daemon's heavy imports (SQLAlchemy, Alembic, numpy),
    # so a bad config is refused at once.
    try:
        cfg = load_config(config_path, data_dir=data_dir, db_url=db_url, socket=socket_path,
                          admin_socket_path=admin_socket, embedder=embedder, llm=llm,
                          log_level=log_level, log_format=log_format)
    except MemorydError as exc:
        click.echo(f"Error: {exc.message}", err=True)
        sys.exit(EXIT_ERROR)
    from memoryd.daemon.app import Daemon
    from memoryd.log import configure_logging

    configure_logging(cfg.log_level, cfg.log_format)
    _warn_secrets_in_options({"--db-url": (db_url, "MEMORYD_DB_URL"), "--llm": (llm, "MEMORYD_LLM")})
    try:
        code = Daemon(cfg).run()
    except MemorydError as exc:
        import structlog

        structlog.get_logger("memoryd").error("daemon.refused", error=exc.message)
        click.echo(f"Error: {exc.message}", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(code)


def _warn_secrets_in_options(options: dict[str, tuple[str | None, str]]) -> None:
    """Log a warning for an option whose URL holds a password or token: memoryd keeps it out of
    every answer, log line and child's command line, but the daemon's own command line, which
    every local user can read, is the caller's."""
    import structlog

    from memoryd.masking import mask_url

    for option, (value, variable) in options.items():
        if value and mask_url(value) != value:
            structlog.get_logger("memoryd").warning(
                "config.secret_on_command_line", option=option,
                fix=f"give it by {variable} or the config file (mode 0600): every local user can read "
                    "a process's command line")


def _status_exit(status: dict[str, Any]) -> int:
    return EXIT_DEGRADED if status.get("health") == "degraded" else EXIT_OK


@click.command("status")
@client_options
@click.option("--watch", is_flag=True, help="Refresh a live view every second until Ctrl-C.")
def status(cfg: Config, as_json: bool, watch: bool) -> None:
    """Show the daemon's health, queues, passes and models.

    Exit code: 0 healthy, 1 degraded, 3 not running, 4 access denied.

    \b
    Example:
      memoryd status --json | jq .queues
    """
    from memoryd import statusview

    if watch and not as_json:
        statusview.watch(lambda: call(cfg, "daemon.status", {}))
        return
    result = call(cfg, "daemon.status", {})
    if as_json:
        print_json(result)
    else:
        statusview.print_status(result)
    sys.exit(_status_exit(result))



@click.command("config")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Show the effective values of this file instead of the defaults.")
@click.option("--json", "as_json", is_flag=True, help="Print the effective configuration as JSON.")
def config_cmd(config_path: str | None, as_json: bool) -> None:
    """Print every configuration key with its default, as a commented TOML file.

    \b
    Example:
      memoryd config > ~/.config/memoryd/config.toml
    """
    if as_json or config_path:
        cfg = load(config_path, None)
        print_json(cfg.as_dict())
    else:
        click.echo(render_defaults())



@click.command("doctor")
@client_options
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Data directory to check.")
@click.option("--skip-models", is_flag=True, help="Do not load the models (faster).")
def doctor(cfg: Config, as_json: bool, data_dir: str | None, skip_models: bool) -> None:
    """Check the socket, the store, the disk, the models and the queue; print fixes.

    Exit code 0 when every check passes, 1 otherwise.

    \b
    Example:
      memoryd doctor --skip-models
    """
    from memoryd import doctor as doc

    if data_dir:
        cfg.data_dir = data_dir
    findings = doc.run_checks(cfg, models=not skip_models)
    report = doc.as_json(findings)
    if as_json:
        print_json(report)
    else:
        marks = {doc.OK: "[green]ok[/green]", doc.WARN: "[yellow]warn[/yellow]", doc.FAIL: "[red]FAIL[/red]"}
        from memoryd.statusview import console

        for f in findings:
            console.print(f"{marks[f.level]:>20}  {f.check}: {f.detail}")
            if f.fix:
                console.print(f"{'':>9}fix: {f.fix}")
    sys.exit(EXIT_OK if report["result"] == doc.OK else EXIT_DEGRADED)
