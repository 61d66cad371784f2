"""Request parameters for the typed methods, and which calls may be sent twice.

Both clients build their params here, so the sync and async methods cannot
drift apart. ``None`` means "not sent": the daemon's default applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Methods that change nothing, so a request the daemon may or may not have seen
#: can be sent again on a new connection.
READ_METHODS = frozenset({
    "memory.get", "memory.search", "memory.list", "daemon.ping", "daemon.status",
    "review.list", "queue.list", "audit.verify", "memory.export", "export.page",
})

OWNER_FIELDS = ("agent_id", "user_id", "project", "session_id")


def retry_safe(method: str, params: Mapping[str, Any]) -> bool:
    """May a request that was sent whole, but not answered, be sent again?

    Reads, yes. ``memory.write`` only with an ``idempotency_key`` (the daemon
    answers a repeated key with the first result), ``memory.write_many`` only
    when every item has one. Anything else (supersede, forget, decisions) no:
    the first attempt may have been carried out.
    """
    if method in READ_METHODS:
        return True
    if method == "memory.write":
        return bool(params.get("idempotency_key"))
    if method == "memory.write_many":
        items = params.get("items")
        return isinstance(items, list) and bool(items) and all(
            isinstance(i, Mapping) and i.get("idempotency_key") for i in items)
    return False


def compact(values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries whose value is not None."""
    return {k: v for k, v in values.items() if v is not None}


def owners(agent_id: str | None, user_id: str | None, project: str | None,
           session_id: str | None) -> dict[str, str]:
    """The owner fields that are set."""
    return compact({"agent_id": agent_id, "user_id": user_id, "project": project,
                    "session_id": session_id})


def get(memory_id: str, include: Iterable[str]) -> dict[str, Any]:
    """``memory.get`` params."""
    params: dict[str, Any] = {"id": memory_id}
    wanted = list(include)
    if wanted:
        params["include"] = wanted
    return params


def forget(memory_id: str | None, subject: Mapping[str, str] | None, reason: str | None,
           tombstone: bool | None) -> dict[str, Any]:
    """``memory.forget`` params (exactly one of id and subject; the daemon checks)."""
    return compact({"id": memory_id, "subject": dict(subject) if subject is not None else None,
                    "reason": reason, "tombstone": tombstone})


def from_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Params from a typed method's arguments (its ``locals()`` on entry).

    ``self`` is dropped, ``extra`` (the method's ``**extra``: parameters this
    client does not name yet) is merged in, and None values are left out so
    the daemon's defaults apply. The typed methods' argument names are the
    protocol's parameter names, which is what makes this mapping one line.
    """
    out = {k: v for k, v in arguments.items() if k not in ("self", "extra") and v is not None}
    out.update(compact(arguments.get("extra") or {}))
    return out
