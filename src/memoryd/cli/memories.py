"""``memoryd write``, ``get``, ``search`` and ``forget``: one memory at a time."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from memoryd.cli.common import (
    call,
    client_options,
    owner_fields,
    owner_options,
    print_json,
)
from memoryd.config import Config


@click.command("write")
@client_options
@owner_options
@click.argument("content")
@click.option("--kind", default="auto", show_default=True, help="Memory kind, or auto.")
@click.option("--scope", default="agent", show_default=True,
              type=click.Choice(["agent", "user", "session", "project", "org"]))
@click.option("--importance", type=float, default=None, help="0..1 (default 0.5).")
@click.option("--metadata", default=None, help="A JSON object.")
@click.option("--ttl", "ttl_s", type=float, default=None, help="Expire after this many seconds.")
@click.option("--idempotency-key", default=None, help="Retries with this key write once.")
def write(cfg: Config, as_json: bool, content: str, kind: str, scope: str,
          importance: float | None, metadata: str | None, ttl_s: float | None,
          idempotency_key: str | None, **owners: str | None) -> None:
    """Write a memory (CONTENT, or - to read it from stdin).

    \b
    Example:
      memoryd write --agent-id demo "Run tests with make test"
      git log -1 --format=%B | memoryd write --project api --scope project -
    """
    if content == "-":
        content = sys.stdin.read()
    params: dict[str, Any] = {"content": content, "kind": kind, "scope": scope, **owner_fields(**owners)}
    if importance is not None:
        params["importance"] = importance
    if metadata:
        try:
            params["metadata"] = json.loads(metadata)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--metadata") from exc
    if ttl_s is not None:
        params["ttl_s"] = ttl_s
    if idempotency_key:
        params["idempotency_key"] = idempotency_key
    result = call(cfg, "memory.write", params)
    if as_json:
        print_json(result)
    elif result.get("duplicate_of"):
        click.echo(f"{result['id']} (duplicate of an existing memory; nothing written)")
    else:
        click.echo(f"{result['id']} queued: {', '.join(result['queued']) or '-'}")


@click.command("get")
@client_options
@click.argument("memory_id")
@click.option("--include", multiple=True, type=click.Choice(["history", "citations", "links", "entities"]),
              help="Extra sections (repeatable).")
def get(cfg: Config, as_json: bool, memory_id: str, include: tuple[str, ...]) -> None:
    """Show one memory by id.

    \b
    Example:
      memoryd get mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB --include history
    """
    result = call(cfg, "memory.get", {"id": memory_id, "include": list(include)})
    if as_json:
        print_json(result)
        return
    from memoryd import statusview

    statusview.print_memory(result)


@click.command("search")
@client_options
@owner_options
@click.argument("query")
@click.option("-k", "k", type=int, default=10, show_default=True, help="Results wanted (1..100).")
@click.option("--scope", default=None, type=click.Choice(["agent", "user", "session", "project", "org"]))
@click.option("--kind", default=None, help="Only this kind.")
@click.option("--mode", default="hybrid", show_default=True,
              type=click.Choice(["hybrid", "lexical", "vector"]))
@click.option("--as-of", default=None, help="What the store believed at this RFC 3339 time.")
@click.option("--valid-at", default=None, help="Only memories valid at this RFC 3339 time.")
@click.option("--include-candidates", is_flag=True, help="Include unpromoted derived memories.")
def search(cfg: Config, as_json: bool, query: str, k: int, scope: str | None, kind: str | None,
           mode: str, as_of: str | None, valid_at: str | None, include_candidates: bool,
           **owners: str | None) -> None:
    """Search memories visible to the given owner fields.

    \b
    Example:
      memoryd search --agent-id demo "how do I run the tests"
    """
    params: dict[str, Any] = {"query": query, "k": k, "mode": mode, **owner_fields(**owners)}
    for name, value in (("scope", scope), ("kind", kind), ("as_of", as_of), ("valid_at", valid_at)):
        if value:
            params[name] = value
    if include_candidates:
        params["include_candidates"] = True
    result = call(cfg, "memory.search", params)
    if as_json:
        print_json(result)
        return
    from memoryd import statusview

    statusview.print_search(result)



@click.command("forget")
@client_options
@click.argument("memory_id", required=False)
@click.option("--subject", default=None, metavar="FIELD=VALUE",
              help="Forget every memory with this owner value, e.g. user_id=alice.")
@click.option("--reason", default=None, help="Why (kept in the audit log).")
@click.option("--no-tombstone", is_flag=True, help="Allow the same content to be written again later.")
def forget(cfg: Config, as_json: bool, memory_id: str | None, subject: str | None, reason: str | None,
           no_tombstone: bool) -> None:
    """Erase a memory (or everything of one owner) and keep it from coming back.

    By id, the memory's copies (collapsed duplicates) go with it, and review
    proposals that involve it are withdrawn. By subject (an operator verb,
    sent on the operator socket), every row carrying that owner value in any
    scope is forgotten in batches of 500, with progress on stderr.

    \b
    Example:
      memoryd forget mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB --reason "wrong host"
      memoryd forget --subject user_id=alice
    """
    if (memory_id is None) == (subject is None):
        raise click.UsageError("give a MEMORY_ID or --subject FIELD=VALUE")
    params: dict[str, Any] = {"tombstone": not no_tombstone}
    if memory_id:
        params["id"] = memory_id
    else:
        assert subject is not None
        field, _, value = subject.partition("=")
        if not value:
            raise click.BadParameter("use FIELD=VALUE, e.g. user_id=alice", param_hint="--subject")
        params["subject"] = {field: value}
    if reason:
        params["reason"] = reason
    if memory_id:
        result = call(cfg, "memory.forget", params)
    else:
        result = _forget_subject(cfg, params, show_progress=not as_json and sys.stderr.isatty())
    if as_json:
        print_json(result)
    else:
        click.echo(f"forget request {result['request_id']}: {result['matched']} memory(ies) now deleting")


def _forget_subject(cfg: Config, params: dict[str, Any], show_progress: bool) -> dict[str, Any]:
    """Forget by subject one batch at a time on the operator socket, showing progress."""
    matched, request_ids, cursor = 0, [], None
    while True:
        page = call(cfg, "memory.forget", {**params, "limit": 500, **({"cursor": cursor} if cursor else {})},
                     admin=True)
        matched += page["matched"]
        request_ids += page["request_ids"]
        if show_progress:
            total = matched + page["remaining"]
            click.echo(f"\rforgetting: {matched}/{total} rows marked", nl=False, err=True)
        cursor = page["next_cursor"]
        if cursor is None:
            break
    if show_progress:
        click.echo("", err=True)
    return {"request_id": request_ids[0] if request_ids else page["request_id"],
            "request_ids": request_ids, "matched": matched}
