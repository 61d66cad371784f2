"""``memoryd review``: proposals awaiting a decision (operator socket)."""

from __future__ import annotations

from typing import Any

import click

from memoryd.cli.common import (
    call,
    client_options,
    print_json,
)
from memoryd.config import Config


@click.group("review")
def review() -> None:
    """Review proposals from the passes (operator socket)."""


@review.command("list")
@client_options
@click.option("--status", type=click.Choice(["open", "approved", "rejected", "stale"]), default="open",
              show_default=True)
@click.option("--limit", type=int, default=50, show_default=True)
def review_list(cfg: Config, as_json: bool, status: str, limit: int) -> None:
    """List proposals.

    \b
    Example:
      memoryd review list
    """
    result = call(cfg, "review.list", {"status": status, "limit": limit}, admin=True)
    if as_json:
        print_json(result)
        return
    from memoryd import statusview

    statusview.print_proposals(result["proposals"])


@review.command("show")
@client_options
@click.argument("proposal_id")
def review_show(cfg: Config, as_json: bool, proposal_id: str) -> None:
    """Show one proposal with a diff of the memories involved.

    \b
    Example:
      memoryd review show prp_01JD3Z8W6KQ2V7N4X9R5T1Y0AB
    """
    got = call(cfg, "review.get", {"id": proposal_id}, admin=True)
    found, rows = got["proposal"], got["memories"]
    if as_json:
        print_json(got)
        return
    from memoryd import statusview

    statusview.print_proposal(found, rows)


def _decide(cfg: Config, as_json: bool, proposal_id: str, decision: str, note: str | None) -> None:
    params: dict[str, Any] = {"id": proposal_id, "decision": decision}
    if note:
        params["note"] = note
    result = call(cfg, "review.decide", params, admin=True)
    if as_json:
        print_json(result)
    else:
        click.echo(f"{proposal_id}: {decision}d" + (f" → {result}" if len(result) > 2 else ""))


@review.command("approve")
@client_options
@click.argument("proposal_id")
@click.option("--note", default=None, help="Kept with the decision.")
def review_approve(cfg: Config, as_json: bool, proposal_id: str, note: str | None) -> None:
    """Approve a proposal: apply the supersession, merge or promotion.

    \b
    Example:
      memoryd review approve prp_01JD3Z8W6KQ2V7N4X9R5T1Y0AB
    """
    _decide(cfg, as_json, proposal_id, "approve", note)


@review.command("reject")
@client_options
@click.argument("proposal_id")
@click.option("--note", default=None, help="Kept with the decision.")
def review_reject(cfg: Config, as_json: bool, proposal_id: str, note: str | None) -> None:
    """Reject a proposal; it is never raised again (a rejected candidate is tombstoned).

    \b
    Example:
      memoryd review reject prp_01JD3Z8W6KQ2V7N4X9R5T1Y0AB --note "both are true"
    """
    _decide(cfg, as_json, proposal_id, "reject", note)
