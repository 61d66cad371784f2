"""The change log that keeps an index beside the store in step with it: what both backends give
the lexical index (store/lexindex/index_set.py) and the vector index (store/annindex/), each
written in its own way.

Triggers in the store append an entry for every memory whose content, status,
kind or owner changes, in the writer's own transaction, so an entry is
committed exactly when its change is. An index applies entries by making its
shard match the memory's current row, so applying one twice changes nothing;
what each log must tell is which entries an index has not applied yet.

* **SQLite** (store/sqlite/lex_log.py) has one writer at a time: entry ids
  are committed in the order they are issued, and an index stands at the last
  id it applied.
* **PostgreSQL** (store/postgres/lex_log.py) has many writers, and an entry
  whose id was issued first may commit last: a reader that kept "the last id
  applied" alone would skip it for good. Each entry carries its transaction's
  id, and an index stands at the last id it applied *and* the transactions
  that were still running when it read the log: an entry that commits later
  with a lower id can only be one of theirs.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from sqlalchemy import Connection, Engine

from memoryd.store.engine import read_only

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Entry:
    """One change: the memory's seq, and whether its text was erased (content changed or the
    row deleted: the old words must leave the shard's files, not just its search)."""

    id: int
    seq: int
    erased: bool
    xid: int = 0  # PostgreSQL: the writer's transaction id


@dataclass(frozen=True)
class Position:
    """How far an index has applied the log: every entry with an id up to ``mark``, except (on
    PostgreSQL) those of the transactions in ``running``, which had not committed when it read
    the log; ``xmin`` is the oldest transaction still running then (every one below it had
    ended)."""

    mark: int = 0
    xmin: int = 0
    running: tuple[int, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"mark": self.mark, "xmin": self.xmin, "running": list(self.running)}

    @classmethod
    def from_json(cls, value: Any) -> Position:
        if isinstance(value, int):  # a manifest of format 2 kept the last log id alone
            return cls(mark=value)
        return cls(mark=int(value["mark"]), xmin=int(value.get("xmin", 0)),
                   running=tuple(int(x) for x in value.get("running", [])))


class LogTrimmed(Exception):
    """The log no longer holds entries an index has not applied: the index is built again."""


class ChangeLog(abc.ABC):
    """A backend's change log, as an index beside the store reads it."""

    #: The log's table (tests and `memoryd status` read it).
    table: str

    @abc.abstractmethod
    def exists(self, conn: Connection) -> bool:
        """Whether the log (and its triggers) were created."""

    @abc.abstractmethod
    def ensure(self, conn: Connection) -> None:
        """Create the log, its triggers and its state if missing (idempotent)."""

    @abc.abstractmethod
    def drop(self, conn: Connection) -> None:
        """Remove the log and its triggers: nothing will read it (the index is turned off)."""

    def read_elsewhere(self, conn: Connection) -> bool:
        """Whether another daemon reads this log lately (a daemon with the index off then keeps
        it). One reader alone: never."""
        return False

    @abc.abstractmethod
    def history(self, conn: Connection) -> str:
        """A random id made with the log: a manifest of another history describes shards this
        log never fed."""

    @abc.abstractmethod
    def head(self, conn: Connection) -> Position:
        """Where an index stands that reads the store from now on: the entries after this
        position cover every change the reads may miss."""

    @abc.abstractmethod
    def holds(self, conn: Connection, position: Position) -> bool:
        """Whether every entry after ``position`` is still in the log (it was not trimmed past
        it, and the position is not from a database restored from before it)."""

    @abc.abstractmethod
    def read(self, conn: Connection, position: Position, page: int) -> tuple[list[Entry], Position]:
        """The next at most ``page`` entries not applied at ``position``, in id order, and the
        position once they are applied. ``conn`` reads one snapshot and nothing else has run
        in it yet. Raises LogTrimmed when entries after ``position`` are gone."""

    @abc.abstractmethod
    def behind(self, conn: Connection, position: Position, cap: int) -> int:
        """How many entries are not applied at ``position`` (counted up to ``cap``)."""

    @abc.abstractmethod
    def seqs_since(self, conn: Connection, since: Position, upto: Position, lo: int, hi: int) -> list[int]:
        """The memories with seq in [lo, hi) that changed after ``since``, at least up to
        ``upto`` (a shard built from the store after ``since`` is brought to ``upto`` with them)."""

    def register(self, engine: Engine, position: Position, reader: str) -> None:  # noqa: B027
        """Record that ``reader`` needs the entries after ``position`` (taken before a build
        reads the store, so that another reader's trim keeps them). One reader alone: nothing."""

    @abc.abstractmethod
    def trim(self, engine: Engine, position: Position, reader: str) -> None:
        """Drop the entries that no index needs any more, now that ``reader`` stands at
        ``position`` (never fails on a busy store: trimmed at a later save)."""


def start_reading(changelog: ChangeLog, engine: Engine, reader: str, event: str) -> Position:
    """The log position a read of the store from now on starts at, recorded as ``reader``'s (on
    PostgreSQL, another daemon's trim then keeps the entries after it). A trim between taking
    the position and recording it is logged as ``event`` and the next position taken."""
    for _ in range(10):
        with read_only(engine) as conn:
            since = changelog.head(conn)
        changelog.register(engine, since, reader)
        with read_only(engine) as conn:
            if changelog.holds(conn, since):
                return since
        log.info(event, fix="starting from a newer position")
    raise RuntimeError("the change log kept being trimmed past this index's start")


def distinct_seqs(entries: Sequence[Entry]) -> list[int]:
    return list(dict.fromkeys(e.seq for e in entries))
