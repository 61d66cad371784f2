"""``memoryd queue``: the passes' job queue (operator socket)."""

from __future__ import annotations

from typing import Any

import click

from memoryd.cli.common import (
    call,
    client_options,
    print_json,
)
from memoryd.config import Config


@click.group("queue")
def queue() -> None:
    """Inspect and revive jobs (operator socket)."""


@queue.command("list")
@client_options
@click.option("--state", type=click.Choice(["ready", "failed", "leased", "done", "dead"]), default=None)
@click.option("--pass", "pass_name", default=None, help="Only this pass.")
@click.option("--limit", type=int, default=50, show_default=True)
def queue_list(cfg: Config, as_json: bool, state: str | None, pass_name: str | None,
               limit: int) -> None:
    """List jobs, newest first.

    \b
    Example:
      memoryd queue list --state dead
    """
    params: dict[str, Any] = {"limit": limit}
    if state:
        params["state"] = state
    if pass_name:
        params["pass"] = pass_name
    result = call(cfg, "queue.list", params, admin=True)
    if as_json:
        print_json(result)
        return
    from memoryd import statusview

    statusview.print_jobs(result["jobs"])


@queue.command("retry")
@client_options
@click.argument("job_ids", nargs=-1, type=int)
@click.option("--pass", "pass_name", default=None, help="Revive the dead jobs of this pass.")
@click.option("--all", "all_dead", is_flag=True, help="Revive every dead job.")
def queue_retry(cfg: Config, as_json: bool, job_ids: tuple[int, ...], pass_name: str | None,
                all_dead: bool) -> None:
    """Revive dead jobs with fresh attempts.

    \b
    Example:
      memoryd queue retry --all
    """
    if not job_ids and not pass_name and not all_dead:
        raise click.UsageError("name job ids, --pass NAME, or --all")
    params: dict[str, Any] = {"ids": list(job_ids)}
    if pass_name:
        params["pass"] = pass_name
    if all_dead:
        params["all"] = True
    result = call(cfg, "queue.retry", params, admin=True)
    if as_json:
        print_json(result)
    else:
        click.echo(f"revived {result['revived']} job(s)")
