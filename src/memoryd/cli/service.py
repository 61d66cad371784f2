"""``memoryd service``: memoryd as an OS service (systemd user unit, launchd agent)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from memoryd.cli.common import (
    EXIT_ERROR,
    print_json,
)


@click.group("service")
def service() -> None:
    """Install memoryd as an OS service (systemd user unit, launchd agent)."""


def _target(system: bool, data_dir: str | None, db_url: str | None = None) -> Any:
    from memoryd.osservice.units import default_target

    return default_target(system=system, data_dir=Path(data_dir).expanduser() if data_dir else None,
                          db_url=db_url)


def _service_db_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A store URL the service can run on, or a usage error naming what is wrong."""
    if value is None:
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        backend = make_url(value).get_backend_name()
    except ArgumentError as exc:
        raise click.BadParameter(f"not a store URL ({exc}); e.g. postgresql+psycopg://user:pw@host/db "
                                 "or sqlite:////path/memoryd.db") from exc
    if backend not in ("sqlite", "postgresql"):
        raise click.BadParameter(f"memoryd stores in sqlite or postgresql, not {backend!r}")
    return value


_db_url_opt = click.option("--db-url", default=None, callback=_service_db_url,
                           help="Store URL the service runs on (e.g. a PostgreSQL URL). Kept out of the "
                                "unit file: in an environment file (systemd) or plist of mode 0600.")


_system_opt = click.option("--system", is_flag=True, help="System-wide (needs root) instead of per user.")
_data_dir_opt = click.option("--data-dir", type=click.Path(file_okay=False), default=None,
                             help="Data directory the service uses.")


@service.command("print")
@_system_opt
@_data_dir_opt
@_db_url_opt
@click.option("--json", "as_json", is_flag=True, help="Print {path: text} as JSON.")
def service_print(system: bool, data_dir: str | None, db_url: str | None, as_json: bool) -> None:
    """Print the unit files (or plist) `install` would write (a URL's password shown as ***).

    \b
    Example:
      memoryd service print | less
    """
    from memoryd.osservice.units import masked, render, secret_files

    target = masked(_target(system, data_dir, db_url))
    files = {str(path): text for path, text in secret_files(target).items()}
    files.update({str(target.unit_dir / name): text for name, text in render(target).items()})
    if as_json:
        print_json(files)
        return
    for path, text in files.items():
        click.echo(f"# ---- {path}")
        click.echo(text)


@service.command("install")
@_system_opt
@_data_dir_opt
@_db_url_opt
@click.option("--json", "as_json", is_flag=True, help="Print the steps as JSON.")
def service_install(system: bool, data_dir: str | None, db_url: str | None, as_json: bool) -> None:
    """Write the service files, enable and start them.

    \b
    Examples:
      memoryd service install && memoryd status
      memoryd service install --db-url postgresql+psycopg://memoryd:PW@db1/memoryd
    """
    from memoryd.osservice.install import install, undo_hint

    target = _target(system, data_dir, db_url)
    steps = install(target)
    failed = [s for s in steps if " failed (" in s]
    if as_json:
        print_json({"steps": steps, "undo": undo_hint(target), "ok": not failed})
    else:
        for step in steps:
            click.echo(f"- {step}")
        click.echo(undo_hint(target))
    if failed:
        click.echo(f"Error: {len(failed)} step(s) failed; the unit files are written, start them by hand "
                   "or fix the cause and run install again", err=True)
        sys.exit(EXIT_ERROR)


@service.command("uninstall")
@_system_opt
@_data_dir_opt
@click.option("--json", "as_json", is_flag=True, help="Print the steps as JSON.")
def service_uninstall(system: bool, data_dir: str | None, as_json: bool) -> None:
    """Stop and remove the service (the data directory is kept).

    \b
    Example:
      memoryd service uninstall
    """
    from memoryd.osservice.install import uninstall

    steps = uninstall(_target(system, data_dir))
    failed = [s for s in steps if " failed (" in s]
    if as_json:
        print_json({"steps": steps, "ok": not failed})
    else:
        for step in steps:
            click.echo(f"- {step}")
    if failed:
        sys.exit(EXIT_ERROR)
