"""The one scope predicate every read path uses.

A reader sees ``agent`` rows of its agent_id, ``user`` rows of its user_id,
``project`` rows of its project, ``session`` rows of its session_id, and
``org`` rows always. No key, no access. The ``owner`` column holds the value
of each row's scope key, so each clause is one indexed equality.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Table, and_, false, or_

from memoryd.store.schema import SCOPE_KEY


@dataclass(frozen=True)
class Reader:
    """Who is reading: the owner fields of the request (its access keys)."""

    agent_id: str | None = None
    user_id: str | None = None
    project: str | None = None
    session_id: str | None = None

    def key_for(self, scope: str) -> str | None:
        """The reader's key for ``scope`` ('' for org, None when it has none)."""
        if scope == "org":
            return ""
        value: str | None = getattr(self, SCOPE_KEY[scope])
        return value


def visible_pairs(reader: Reader, scope: str | None = None) -> list[tuple[str, str]]:
    """The (scope, owner) pairs the reader may see, optionally one scope only.

    Every read path derives its filter from this list: :func:`visible` for
    SQL, :func:`scope_keys` for the vector index.
    """
    scopes = [scope] if scope else ["agent", "user", "project", "session", "org"]
    pairs = []
    for s in scopes:
        key = reader.key_for(s)
        if key is not None:
            pairs.append((s, key))
    return pairs


def visible(table: Table, reader: Reader, scope: str | None = None) -> ColumnElement[Any]:
    """SQL condition: rows of ``table`` the reader may see, optionally one scope only."""
    clauses = [and_(table.c.scope == s, table.c.owner == owner)
               for s, owner in visible_pairs(reader, scope)]
    return or_(*clauses) if clauses else false()


def scope_keys(reader: Reader, scope: str | None = None) -> list[str]:
    """The vector index's ``scope_key`` values (``scope:owner``) the reader may see."""
    return [f"{s}:{owner}" for s, owner in visible_pairs(reader, scope)]


def missing_key_notice(reader: Reader, scope: str | None) -> str | None:
    """A notice when a scope filter names a scope the reader has no key for."""
    if scope and scope != "org" and reader.key_for(scope) is None:
        return f"scope {scope!r} needs {SCOPE_KEY[scope]}: no {scope} rows are visible without it"
    return None
