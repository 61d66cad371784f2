"""Typed views of the daemon's answers.

Each dataclass holds the fields the contract names (PROTOCOL.md) with the
JSON types as sent (timestamps stay RFC 3339 strings), and keeps the whole
answer in ``raw``: the protocol adds fields without a version bump, and a field
this client does not name yet is still there (``result.raw["new_field"]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

T = TypeVar("T", bound="_Result")


@dataclass(frozen=True)
class _Result:
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls: type[T], data: dict[str, Any]) -> T:
        """Build from one JSON result object; missing fields take their defaults."""
        names = {f.name for f in fields(cls)} - {"raw"}
        return cls(raw=data, **{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class WriteResult(_Result):
    """``memory.write``'s answer (one item of ``memory.write_many``'s)."""

    id: str = ""
    recorded_at: str | None = None
    queued: list[str] = field(default_factory=list)
    duplicate_of: str | None = None
    notices: list[str] = field(default_factory=list)

    @property
    def duplicate(self) -> bool:
        """True when nothing was written because an identical live memory exists."""
        return self.duplicate_of is not None


@dataclass(frozen=True)
class Memory(_Result):
    """One memory as ``memory.get`` shows it (plus what ``include`` asked for).

    A forgotten or deleting row has only ``id``, ``status`` and ``content`` (None).
    """

    id: str = ""
    content: str | None = None
    kind: str | None = None
    scope: str | None = None
    agent_id: str | None = None
    user_id: str | None = None
    project: str | None = None
    session_id: str | None = None
    status: str | None = None
    importance: float | None = None
    importance_raw: float | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    recorded_at: str | None = None
    retired_at: str | None = None
    occurred_at: str | None = None
    metadata: dict[str, Any] | None = None
    derived: bool = False
    pending: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] | None = None
    citations: list[str] | None = None
    links: list[dict[str, Any]] | None = None

    @property
    def owner(self) -> str | None:
        """The value of the scope's key field (``''`` for ``org``; None when erased)."""
        if self.scope == "org":
            return ""
        key = SCOPE_KEYS.get(self.scope or "")
        return getattr(self, key) if key else None


@dataclass(frozen=True)
class SearchHit(Memory):
    """A memory in a search answer, with its ``score`` (comparable within one answer)."""

    score: float = 0.0


@dataclass(frozen=True)
class SearchResult(_Result):
    """``memory.search``'s answer: ranked ``results``, ``mode_used`` and ``notices``."""

    results: list[SearchHit] = field(default_factory=list)
    mode_used: str = ""
    notices: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SearchResult:
        return cls(raw=data, results=[SearchHit.from_json(r) for r in data.get("results", [])],
                   mode_used=data.get("mode_used", ""), notices=list(data.get("notices", [])))


@dataclass(frozen=True)
class SupersedeResult(_Result):
    """``memory.supersede``'s answer."""

    old_id: str = ""
    new_id: str = ""


@dataclass(frozen=True)
class ForgetResult(_Result):
    """``memory.forget``'s answer: the durable request's id and how many rows it matched."""

    request_id: str = ""
    matched: int = 0


@dataclass(frozen=True)
class Ping(_Result):
    """``daemon.ping``'s answer."""

    version: str = ""
    protocol: int = 0
    pid: int = 0


@dataclass(frozen=True)
class Status(_Result):
    """``daemon.status``'s answer; ``health`` is ``healthy`` or ``degraded`` (see ``problems``)."""

    version: str = ""
    pid: int = 0
    uptime_s: float = 0.0
    health: str = ""
    problems: list[str] = field(default_factory=list)
    db: dict[str, Any] = field(default_factory=dict)
    memories: dict[str, int] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    passes: dict[str, dict[str, Any]] = field(default_factory=dict)
    governor: dict[str, Any] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    reviews_open: int = 0
    admin_socket: str | None = None

    @property
    def healthy(self) -> bool:
        """True unless the daemon reports itself degraded."""
        return self.health != "degraded"


#: scope -> the owner field that is its key (DESIGN.md "Scopes"); ``org`` has none.
SCOPE_KEYS: dict[str, str] = {
    "agent": "agent_id",
    "user": "user_id",
    "project": "project",
    "session": "session_id",
}
