"""``memoryd audit``: the audit log (operator socket)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from memoryd.cli.common import (
    EXIT_DEGRADED,
    EXIT_OK,
    call,
    client_options,
    print_json,
)
from memoryd.config import Config


@click.group("audit")
def audit() -> None:
    """Inspect the audit log (operator socket)."""


@audit.command("verify")
@click.option("--expect", "expect_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A file holding an earlier `memoryd audit verify --json` answer: each lane must "
                   "still hold the head it recorded (a log rewritten since fails).")
@client_options
def audit_verify(cfg: Config, as_json: bool, expect_path: Path | None) -> None:
    """Check the audit log's hash chains (its lanes, their head rows and cross-anchors);
    report the first broken event and every problem found.

    Exit code 0 when the log verifies, 1 when it is broken. Keep the `--json` answer
    somewhere the database's writers cannot reach, and pass it to `--expect` later.

    \b
    Example:
      memoryd audit verify --json > ~/audit-heads.json
      memoryd audit verify --expect ~/audit-heads.json
    """
    params: dict[str, Any] = {}
    if expect_path is not None:
        try:
            params["expect_heads"] = json.loads(expect_path.read_text())["heads"]
        except (ValueError, KeyError, TypeError) as exc:
            raise click.ClickException(
                f"{expect_path} is not a `memoryd audit verify --json` answer ({exc}); "
                "save one with `memoryd audit verify --json > FILE`") from exc
    result = call(cfg, "audit.verify", params, admin=True)
    if as_json:
        print_json(result)
    elif result["ok"]:
        click.echo(f"audit log verified: {result['events']} events in {result.get('lanes', 1)} lane(s), "
                   f"{result.get('anchors', 0)} cross-anchors")
    else:
        where = (f"at event seq {result['first_break_seq']}" if result["first_break_seq"] is not None
                 else "(no single event: a lane's end or head row)")
        click.echo(f"audit log BROKEN {where} ({result['events']} events verify before it)")
        for problem in result.get("problems", []):
            click.echo(f"  - {problem}")
    sys.exit(EXIT_OK if result["ok"] else EXIT_DEGRADED)
