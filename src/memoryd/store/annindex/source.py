"""What the HNSW graphs read from a store (index_set.py): its change log, and its vectors with the
owner, status and kind of each. Each backend gives them in its own way (store/sqlite/ann_log.py,
store/postgres/ann_log.py).

The change log follows store/lexindex/changelog.py: triggers append the ``seq``
of every memory whose vector, status, kind or owner changes, in the writer's
own transaction, and an index applies an entry by making its graphs match the
memory's current row (applying one twice changes nothing). A position in the
log is a :class:`~memoryd.store.lexindex.changelog.Position`: on SQLite the last
id applied; on PostgreSQL, where several writers commit out of id order, also
the transactions that were running when it was read.

Owners are small integers (an array indexed by ``seq`` holds each row's): on
SQLite the ids of ``vector_owners``, which the store keeps for sqlite-vec's
partitions; on PostgreSQL ids this daemon gives each ``scope:owner`` key, kept
in the graphs' manifest beside the files named by them.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection

from memoryd.store.lexindex.changelog import ChangeLog


@dataclass(frozen=True)
class VectorRow:
    """A stored vector's memory as a graph sees it."""

    owner: int
    status: str
    kind: str | None
    vector: np.ndarray


@dataclass(frozen=True)
class ScanChunk:
    """Part of the start-up scan: the seqs of stored vectors, their owners and kinds."""

    seqs: np.ndarray
    owners: np.ndarray
    kinds: list[str | None]


class VectorSource(abc.ABC):
    """A store's vectors and the change log that tells which of them changed."""

    #: The change log (positions, reads, trims).
    log: ChangeLog

    @abc.abstractmethod
    def settings(self, conn: Connection) -> tuple[int | None, str | None]:
        """The store's vector dimension and model (``vector_settings``), None when unset."""

    @abc.abstractmethod
    def top_seq(self, conn: Connection) -> int:
        """The highest ``seq`` with a stored vector (0 for none)."""

    @abc.abstractmethod
    def scan(self, conn: Connection, chunk: int) -> Iterator[ScanChunk]:
        """Every stored vector's seq, owner and kind, ``chunk`` rows at a time."""

    @abc.abstractmethod
    def rows(self, conn: Connection, seqs: Sequence[int]) -> dict[int, VectorRow]:
        """The current row of each of ``seqs`` that has a vector (the others are absent)."""

    @abc.abstractmethod
    def owner_ids(self, conn: Connection, keys: Sequence[str]) -> dict[str, int]:
        """The owner id of each ``scope:owner`` key that has one (keys no vector was stored
        under have none)."""

    @abc.abstractmethod
    def owner_key(self, conn: Connection, owner: int) -> str:
        """The ``scope:owner`` key of an owner id."""

    @abc.abstractmethod
    def active_seqs(self, conn: Connection, key: str, status: str) -> list[int]:
        """The seqs of the owner's rows with ``status`` that have a vector, in seq order."""

    @abc.abstractmethod
    def vectors(self, conn: Connection, seqs: Sequence[int]) -> tuple[list[int], np.ndarray]:
        """The stored vectors of ``seqs`` (those that have one), as labels and a float32 matrix."""

    def manifest_state(self) -> dict[str, Any]:
        """What the source keeps beside the graphs' files (PostgreSQL: its owner ids)."""
        return {}

    def restore(self, manifest: dict[str, Any] | None) -> bool:
        """Take back what :meth:`manifest_state` saved (None: start afresh); False when the
        manifest lacks it (its graphs cannot be used)."""
        return True
