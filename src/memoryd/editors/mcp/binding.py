"""Who an MCP bridge acts for, fixed by its flags, and what that identity may see.

The model calling the tools never names an owner: every owner field the
bridge sends comes from here. :meth:`Binding.can_see` is the check the bridge
applies to a row fetched by id, because ``memory.get`` is not scope-filtered
(an id is a capability, PROTOCOL.md) and a model could be fed a foreign id.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryd.client import SCOPE_KEYS, Memory
from memoryd.editors.project import project_of

ALL_SCOPES = ("agent", "user", "project", "session", "org")
DEFAULT_SCOPES = ("agent", "project", "user")


class BindingError(ValueError):
    """The flags do not make a usable identity; the message names the flag and the fix."""


def parse_scopes(text: str) -> tuple[str, ...]:
    """``agent,project,user`` -> a tuple in the order given, each scope once."""
    scopes: list[str] = []
    for part in text.split(","):
        name = part.strip()
        if not name:
            continue
        if name not in ALL_SCOPES:
            raise BindingError(f"--scopes: unknown scope {name!r}; choose from {', '.join(ALL_SCOPES)}")
        if name not in scopes:
            scopes.append(name)
    if not scopes:
        raise BindingError("--scopes: name at least one scope, e.g. agent,project,user")
    return tuple(scopes)


def new_session_id() -> str:
    """A fresh session id for one bridge process."""
    return f"mcp-{secrets.token_hex(8)}"


@dataclass(frozen=True)
class Binding:
    """The identity a bridge acts for and the scopes its tools may read and write."""

    agent_id: str
    user_id: str
    project: str
    session_id: str
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    #: The project's readable name (its folder's, for ``--project auto``): display only, never
    #: compared. ``project`` is the key scope checks use (editors/project.py).
    project_name: str = ""

    @classmethod
    def from_flags(cls, *, agent_id: str, user_id: str, project: str, session_id: str | None,
                   scopes: str, cwd: str | Path) -> Binding:
        """Build from the ``memoryd mcp`` flags; ``project='auto'`` is keyed from the repository
        holding ``cwd`` (its origin URL, else its path: editors/project.py)."""
        for flag, value in (("--agent-id", agent_id), ("--user-id", user_id)):
            if not value or not value.strip():
                raise BindingError(f"{flag} must not be empty")
        if project == "auto":
            found = project_of(cwd)
            if found.name == "/":
                raise BindingError(f"--project auto cannot name a project from {cwd}; pass --project NAME")
            key, name = found.key, found.name
        else:
            key = name = project
        if not key or not key.strip():
            raise BindingError("--project must not be empty; pass --project NAME or --project auto")
        return cls(agent_id=agent_id, user_id=user_id, project=key,
                   session_id=session_id or new_session_id(), scopes=parse_scopes(scopes),
                   project_name=name)

    def key_for(self, scope: str) -> str | None:
        """This binding's value for a scope's key field (None for ``org``)."""
        field = SCOPE_KEYS.get(scope)
        return getattr(self, field) if field else None

    @property
    def default_write_scope(self) -> str:
        """``project`` when allowed (what a coding agent learns is mostly about the project),
        else the first allowed scope."""
        return "project" if "project" in self.scopes else self.scopes[0]

    def read_keys(self) -> dict[str, Any]:
        """The access keys a search sends: the key of every allowed scope, and no other."""
        keys: dict[str, Any] = {}
        for scope in self.scopes:
            field = SCOPE_KEYS.get(scope)
            if field:
                keys[field] = getattr(self, field)
        return keys

    def write_owners(self) -> dict[str, Any]:
        """Owner fields a write carries: all of the binding's, so a row says which agent,
        user, project and session wrote it. Only the scope's own key decides who sees it."""
        return {"agent_id": self.agent_id, "user_id": self.user_id, "project": self.project,
                "session_id": self.session_id}

    def can_see(self, memory: Memory) -> bool:
        """May this binding read, change or forget ``memory``?

        Its scope must be one of the allowed scopes and its owner (the scope's
        key field) must be the binding's; ``org`` rows need only ``org`` in
        the scopes. A row being erased or erased already has no owner left to
        check and is never visible.
        """
        if memory.status in ("forgotten", "deleting") or memory.scope not in self.scopes:
            return False
        if memory.scope == "org":
            return True
        expected = self.key_for(memory.scope)
        return expected is not None and memory.owner == expected

    def describe(self) -> dict[str, object]:
        """The binding as the status tool shows it."""
        return {"agent_id": self.agent_id, "user_id": self.user_id, "project": self.project,
                "project_name": self.project_name or self.project, "session_id": self.session_id,
                "scopes": list(self.scopes)}
