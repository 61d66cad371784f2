"""Jinja filters the console's templates use: times, sizes, owners, short texts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment

OWNER_FIELDS = ("agent_id", "user_id", "project", "session_id")


def when(stamp: Any) -> str:
    """An RFC 3339 time as 'YYYY-MM-DD HH:MM:SS' UTC (the full value stays in the title)."""
    if not stamp:
        return "-"
    try:
        dt = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return str(stamp)
    return dt.strftime("%Y-%m-%d %H:%M:%S")


def when_epoch(epoch: Any) -> str:
    """Epoch seconds (the jobs table's times) as 'YYYY-MM-DD HH:MM:SS' UTC."""
    if epoch in (None, ""):
        return "-"
    return datetime.fromtimestamp(float(epoch), UTC).strftime("%Y-%m-%d %H:%M:%S")


def size(n: Any) -> str:
    """Bytes as B, KiB, MiB or GiB."""
    value = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} GiB"


def owner(memory: dict[str, Any]) -> str:
    """The scope and the owner field that scope is keyed by, e.g. 'agent a1'."""
    scope = memory.get("scope") or "?"
    key = {"agent": "agent_id", "user": "user_id", "project": "project", "session": "session_id"}.get(scope)
    return f"{scope} {memory.get(key) or ''}".strip() if key else scope


def short(text: Any, limit: int = 160) -> str:
    """The first ``limit`` characters, with an ellipsis when cut."""
    value = "" if text is None else str(text)
    return value if len(value) <= limit else value[: limit - 1] + "…"


def install(env: Environment) -> None:
    """Register the filters on the templates' environment."""
    env.filters.update(when=when, when_epoch=when_epoch, size=size, owner=owner, short=short)
