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


def visible(table: Table, reader: Reader, scope: str | None = None) -> ColumnElement[Any]:
    """SQL condition: rows of ``table`` the reader may see, optionally one scope only."""
    scopes = [scope] if scope else ["agent", "user", "project", "session", "org"]
    clauses = []
    for s in scopes:
        key = reader.key_for(s)
        if key is None:
            continue
        if s == "org":
            clauses.append(table.c.scope == "org")
        else:
            clauses.append(and_(table.c.scope == s, table.c.owner == key))
    return or_(*clauses) if clauses else false()


def missing_key_notice(reader: Reader, scope: str | None) -> str | None:
    """A notice when a scope filter names a scope the reader has no key for."""
    if scope and scope != "org" and reader.key_for(scope) is None:
        return f"scope {scope!r} needs {SCOPE_KEY[scope]}: no {scope} rows are visible without it"
    return None
