"""The group committer's fast path: a batch of plain writes in a handful of statements.

A plain unit writes memories without an idempotency key (the common case).
However many such units a group holds, this path reads the store twice (the
tombstones and the live rows of every (scope, owner, content hash) in the
group), then inserts the new rows, their audit events and their jobs with one
executemany each. Decisions the per-write path takes with a query each —
tombstoned, duplicate of a live row, duplicate of an earlier write in the same
group — are taken here in Python on those two reads, with the same outcomes.

Units with an idempotency key, and mutations other than writes, take the
per-unit path in store/writes.py (a savepoint each).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, Table, bindparam, select, tuple_, update

from memoryd.clock import to_rfc3339
from memoryd.errors import MemorydError
from memoryd.queue import jobs as jobq
from memoryd.store import audit, keyed
from memoryd.store.backends import backend_for
from memoryd.store.memories import (
    NewMemory,
    WriteContext,
    corroborate_event,
    duplicate_result,
    new_result,
    new_row,
    tombstoned_error,
    write_event,
)
from memoryd.store.prepared import Prepared, collect, fetch, prepare, run, run_many, submit
from memoryd.store.rows import insert_rows
from memoryd.store.schema import LIVE_STATUSES, memories, tombstones

#: (scope, owner, content hash): the identity duplicates and tombstones are judged on.
Identity = tuple[str, str, str]

#: Identities per lookup statement, at most (three bound parameters each).
LOOKUP_CHUNK = 256
#: Lookup statements are compiled for these sizes only; a shorter list repeats its last identity.
_SIZES = (1, 4, 16, 64, LOOKUP_CHUNK)


@dataclass
class _Live:
    id: str
    recorded_at: str
    corroboration: int


def is_plain(items: Sequence[NewMemory]) -> bool:
    """Whether a unit's items can take the fast path (no idempotency key to honour, no
    imported state to restore)."""
    return all(item.idempotency_key is None and item.restore is None for item in items)


def identity(item: NewMemory) -> Identity:
    return (item.scope, item.owner, item.hash)


def _submit_lookup(conn: Connection, table: Table, extra: tuple[str, ...],
                   keys: Sequence[Identity]) -> list[tuple[Prepared, Any]]:
    """Send the query (or queries) for the rows of ``table`` whose (scope, owner,
    content_hash) is among ``keys``; read them with :func:`_collect`."""
    if not keys:
        return []
    backend = backend_for(conn)
    if backend.binds_arrays:  # arrays bind: one statement, three array parameters (PostgreSQL)
        stmt = prepare(conn, ("identity-arrays", table.name, extra),
                       lambda: backend.identity_lookup(table, extra))
        scopes, owners, hashes = (list(col) for col in zip(*keys, strict=True))
        return [(stmt, submit(conn, stmt, {"s": scopes, "o": owners, "h": hashes}, replan=True))]
    sent = []
    for at in range(0, len(keys), LOOKUP_CHUNK):
        chunk = list(keys[at:at + LOOKUP_CHUNK])
        size = next(n for n in _SIZES if n >= len(chunk))
        chunk += [chunk[-1]] * (size - len(chunk))

        def build(size: int = size) -> Select[Any]:
            cols = (table.c.scope, table.c.owner, table.c.content_hash)
            wanted = [tuple_(*(bindparam(f"{c.name}_{i}") for c in cols)) for i in range(size)]
            return select(*cols, *(table.c[name] for name in extra)).where(tuple_(*cols).in_(wanted))

        stmt = prepare(conn, ("identity-lookup", table.name, extra, size), build)
        params = {f"{name}_{i}": value for i, key in enumerate(chunk)
                  for name, value in zip(("scope", "owner", "content_hash"), key, strict=True)}
        sent.append((stmt, submit(conn, stmt, params)))
    return sent


def _collect(conn: Connection, sent: list[tuple[Prepared, Any]]) -> list[Any]:
    found: list[Any] = []
    for stmt, cur in sent:
        found.extend(collect(conn, stmt, cur))
    return found


def _lookup(conn: Connection, table: Table, extra: tuple[str, ...],
            keys: Sequence[Identity]) -> list[Any]:
    """Rows of ``table`` whose (scope, owner, content_hash) is among ``keys``: those three, then ``extra``."""
    return _collect(conn, _submit_lookup(conn, table, extra, keys))


def _read_group(conn: Connection, wanted: set[Identity], secret: bytes
                ) -> tuple[set[Identity], list[Any], audit.LanePick]:
    """A group's reads in one query (Backend.group_lookup): the tombstoned identities, the
    stored rows of each identity (as :func:`_oldest_live` reads them) and the audit lane."""
    backend = backend_for(conn)
    stmt = prepare(conn, ("group-lookup", backend.name),
                   lambda: backend.group_lookup(audit.first_free_sql(conn)))
    params = backend.group_lookup_params([(s, o, keyed.keyed_with(secret, o), h) for s, o, h in wanted])
    dead: set[Identity] = set()
    found: list[Any] = []
    lane: list[Any] = []
    for part, scope, owner, chash, *rest in fetch(conn, stmt, params, replan=True):
        if part == 0:
            dead.add((scope, owner, chash))
        elif part == 1:
            found.append((scope, owner, chash, *rest))
        else:
            lane.append((rest[4], rest[2], rest[1]))  # (lane, n, hash)
    return dead, found, audit.picked(lane)


def _keyed(key: bytes, keys: set[Identity]) -> dict[Identity, Identity]:
    """Each identity as tombstones hold it (the owner's keyed hash under ``key``) -> the identity."""
    return {(scope, keyed.keyed_with(key, owner), chash): (scope, owner, chash)
            for scope, owner, chash in keys}


def tombstoned(conn: Connection, keys: set[Identity]) -> set[Identity]:
    """Which of ``keys`` carry a tombstone (tombstones hold the owner's keyed hash)."""
    by_keyed = _keyed(keyed.secret(conn), keys)
    return {by_keyed[(r[0], r[1], r[2])] for r in _lookup(conn, tombstones, (), sorted(by_keyed))}


_LIVE_EXTRA = ("id", "recorded_at", "corroboration", "status", "seq")


def live_rows(conn: Connection, keys: set[Identity]) -> dict[Identity, _Live]:
    """The oldest live row of each identity in ``keys`` that has one."""
    return _oldest_live(_lookup(conn, memories, _LIVE_EXTRA, sorted(keys)))


def _oldest_live(rows: list[Any]) -> dict[Identity, _Live]:
    # Status is checked here, not in SQL: a status condition there leads SQLite's
    # planner to walk every live row by the status index instead of probing identities.
    found: dict[Identity, tuple[int, _Live]] = {}
    for r in rows:
        key = (r[0], r[1], r[2])
        if r[6] in LIVE_STATUSES and (key not in found or r[7] < found[key][0]):
            found[key] = (r[7], _Live(r[3], r[4], r[5]))
    return {key: live for key, (_, live) in found.items()}


def rows_of(conn: Connection, keys: set[Identity]) -> list[Any]:
    """Every row (any status) of each identity in ``keys``: its seq, id, scope, owner,
    content hash and status (what a forget needs of a row)."""
    found = _lookup(conn, memories, ("seq", "id", "status"), sorted(keys))
    return [_Row(seq=r[3], id=r[4], scope=r[0], owner=r[1], content_hash=r[2], status=r[5])
            for r in found]


@dataclass(frozen=True)
class _Row:
    seq: int
    id: str
    scope: str
    owner: str
    content_hash: str
    status: str


_NEW_ROW_COLUMNS = ("id", "content", "content_hash", "loose_hash", "kind", "scope", "owner", "agent_id",
                    "user_id", "project", "session_id", "status", "importance", "importance_raw",
                    "valid_from", "valid_to", "occurred_at", "recorded_at", "expires_at", "derived",
                    "metadata")


#: A new row's columns as the group writes it: it carries its corroborations from the group.
_GROUP_ROW_COLUMNS = (*_NEW_ROW_COLUMNS, "corroboration")


def _insert_rows(conn: Connection, rows: list[dict[str, Any]]) -> None:
    insert_rows(conn, memories, _GROUP_ROW_COLUMNS,
                [{**r, "metadata": json.dumps(r["metadata"])} for r in rows])


def _corroborate(conn: Connection, bumps: Counter[str]) -> None:
    stmt = prepare(conn, "corroborate", lambda: update(memories).where(memories.c.id == bindparam("mid"))
                   .values(corroboration=memories.c.corroboration + bindparam("n")))
    run_many(conn, stmt, [{"mid": mid, "n": n} for mid, n in bumps.items()])


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _write(conn: Connection, rows: list[dict[str, Any]], bumps: Counter[str], append: audit.Append | None,
           jobs: list[tuple[str, str]], now: float, max_attempts: int) -> None:
    """The group's writes: new rows, corroborations of stored rows, audit events and their
    lane's head, jobs. One statement where the backend has one (PostgreSQL), else a few
    executemany calls."""
    backend = backend_for(conn)
    if not backend.group_statements:
        _insert_rows(conn, rows)
        _corroborate(conn, bumps)
        if append is not None:
            audit.write_append(conn, append)
        jobq.enqueue_many(conn, jobs, now=now, max_attempts=max_attempts)
        return
    stmt = prepare(conn, ("group-insert", backend.name),
                   lambda: backend.group_insert(_GROUP_ROW_COLUMNS, audit.EVENT_COLUMNS))
    events = append.rows if append is not None else []
    # Corroborations find their rows by id: planned for this store's size each time. A plan
    # prepared while the store was small hash-joined them against a scan of every memory,
    # and kept doing so until the table was next analysed. A group without any (the common
    # case) keeps the prepared plan: that part of it then reads nothing.
    run(conn, stmt, {
        "m": _dumps(rows), "e": _dumps(events),
        "lane": append.lane if append is not None else None,
        "n": append.count if append is not None else None,
        "h": append.head if append is not None else None,
        "c": _dumps([{"id": mid, "n": n} for mid, n in bumps.items()]),
        "j": _dumps([{"p": p, "t": t} for p, t in jobs]), "now": now, "max_attempts": max_attempts},
        replan=bool(bumps))
    if jobs:
        backend.notify_jobs(conn)


def write_plain(conn: Connection, units: Sequence[tuple[Sequence[NewMemory], str]], now: datetime,
                ctx: WriteContext, secret: bytes | None = None) -> list[list[dict[str, Any]] | MemorydError]:
    """Write plain units (items, actor) in the caller's transaction; one outcome per unit.

    ``secret``: the store's owner key (store/keyed.py), read by the caller before a
    pipeline, inside which only the driver's cursor may run.

    A unit is all or nothing: one tombstoned item refuses the whole unit (1006)
    and nothing of it is written, as on the per-unit path.
    """
    keys = [[identity(item) for item in items] for items, _ in units]
    wanted = {k for unit_keys in keys for k in unit_keys}
    secret = keyed.secret(conn) if secret is None else secret
    if backend_for(conn).group_statements:
        dead, found, lane = _read_group(conn, wanted, secret)
    else:
        # Both reads and the audit lane's pick are sent before any answer is read.
        by_keyed = _keyed(secret, wanted)
        sent_dead = _submit_lookup(conn, tombstones, (), sorted(by_keyed))
        sent_live = _submit_lookup(conn, memories, _LIVE_EXTRA, sorted(wanted))
        lane = audit.pick_lane(conn)
        dead = {by_keyed[(r[0], r[1], r[2])] for r in _collect(conn, sent_dead)}
        found = _collect(conn, sent_live)
    live = {k: v for k, v in _oldest_live(found).items() if k not in dead}
    at = to_rfc3339(now)
    rows: list[dict[str, Any]] = []
    events: list[audit.Event] = []
    bumps: Counter[str] = Counter()
    fresh: dict[str, _Live] = {}
    outcomes: list[list[dict[str, Any]] | MemorydError] = []
    for (items, actor), unit_keys in zip(units, keys, strict=True):
        if any(k in dead for k in unit_keys):
            outcomes.append(tombstoned_error())
            continue
        results = []
        for item, key in zip(items, unit_keys, strict=True):
            hit = live.get(key)
            if hit is not None:
                # Another write of the same content (stored, or earlier in this group) corroborates it.
                events.append(corroborate_event(at, actor, hit.id, hit.corroboration))
                hit.corroboration += 1
                bumps[hit.id] += 1
                results.append(duplicate_result(hit.id, hit.recorded_at))
                continue
            values = new_row(item, key[2], now, at)
            rows.append(values)
            events.append(write_event(values, actor, secret))
            live[key] = fresh[values["id"]] = _Live(values["id"], values["recorded_at"], 1)
            results.append(new_result(values, list(ctx.passes)))
        outcomes.append(results)
    # A row new in this group is inserted with the corroborations the group gave it.
    for values in rows:
        values["corroboration"] = fresh[values["id"]].corroboration
        bumps.pop(values["id"], None)
    # Every read comes before the first insert (audit.plan_append says why).
    append = audit.plan_append(conn, events, lane) if events else None
    _write(conn, rows, bumps, append, [(p, r["id"]) for r in rows for p in ctx.passes],
           now.timestamp(), ctx.max_attempts)
    return outcomes
