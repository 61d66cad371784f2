"""Applying review decisions through the same code paths as the explicit verbs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from memoryd.clock import to_rfc3339
from memoryd.errors import Conflict, InvalidParams, NotFound
from memoryd.store import audit, lifecycle, proposals
from memoryd.store.memories import WriteContext, get_row
from memoryd.store.scope import Reader


def _owner_reader(memory_id: str, conn: Connection) -> Reader:
    """The operator acts with the row's own key (the operator socket is trusted)."""
    row = get_row(conn, memory_id)
    if row is None:
        raise NotFound(f"memory {memory_id} of the proposal no longer exists")
    if row.scope == "org":
        return Reader()
    field = {"agent": "agent_id", "user": "user_id", "project": "project", "session": "session_id"}[row.scope]
    return Reader(**{field: row.owner})


def decide(conn: Connection, proposal_id: str, decision: str, note: str | None, now: datetime,
           ctx: WriteContext) -> dict[str, Any]:
    """Approve or reject one open proposal; approving applies it in the same transaction."""
    prop = proposals.get(conn, proposal_id)
    if prop is None:
        raise NotFound(f"no proposal with id {proposal_id!r}", data={"field": "id"})
    if prop.status != "open":
        raise Conflict(f"proposal {proposal_id} is already {prop.status}", data={"field": "id"})
    if decision not in ("approve", "reject"):
        raise InvalidParams("decision", "must be 'approve' or 'reject'")
    result: dict[str, Any] = {"id": proposal_id, "decision": decision}
    if decision == "approve":
        if prop.kind == "supersede":
            old_id, new_id = prop.payload["old_id"], prop.payload["new_id"]
            # The audit event names the proposal, not its reason: the reason quotes the
            # rows' values, and the audit chain keeps ids and hashes, never text.
            result.update(lifecycle.supersede(conn, lifecycle.SupersedeRequest(
                old_id=old_id, new_id=new_id, reason=f"approved proposal {proposal_id}",
                reader=_owner_reader(old_id, conn)),
                now, ctx))
        elif prop.kind == "merge":
            result["merged_id"] = lifecycle.merge(conn, list(prop.memory_ids), prop.payload["merged_text"],
                                                  now, ctx)
        else:  # promote
            lifecycle.promote(conn, prop.memory_ids[0], now, ctx.actor)
    elif prop.kind == "promote":
        lifecycle.reject_candidate(conn, prop.memory_ids[0], now, ctx.actor, note)
    if not proposals.close(conn, proposal_id, "approved" if decision == "approve" else "rejected",
                           ctx.actor, note, now):
        raise Conflict(f"proposal {proposal_id} was decided concurrently", data={"field": "id"})
    audit.append(conn, at=to_rfc3339(now), actor=ctx.actor, action="review.decide", memory_id=None,
                 detail={"proposal_id": proposal_id, "kind": prop.kind, "decision": decision,
                         "memory_ids": list(prop.memory_ids), "note": note})
    return result
