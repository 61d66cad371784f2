"""An import's writes in a few statements: a unit of keyed ``restore`` items, written as one.

``memoryd import`` sends batches of up to 500 records, each a write with an
idempotency key and a ``restore`` block. Written one at a time through
store/memories.py write_memory, each cost a dozen statements built in
SQLAlchemy Core (the idempotency key, the tombstone, the duplicate, the row,
its audit event, its jobs, its key), ~9 ms of CPU a record on this project's
2-core machine: a million records took hours before the first vector was
even looked at (bench/import.py). Here the unit is read in one statement per
kind (keys, tombstones, live rows, link targets) and written with one
executemany per table, with the outcomes write_memory gives each item in
turn, including what an earlier item of the same unit changes for a later
one (a key it stored, a live row it wrote, a corroboration it counted).

Like the per-write path, a unit is all or nothing: a key reused with other
params (1007), content under a tombstone (1006) or a link to a row that does
not exist (1002) raises, and the caller's savepoint discards the unit.

The lookups and the keys' insert are statements compiled once (store/prepared.py)
and run on the driver: built in Core per unit they cost ~20 us of CPU per row,
and each content hash is computed once per item, not once per use
(bench/import.py: the daemon's CPU per imported row, before and after).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import Connection, Select, bindparam, delete, select, tuple_, update

from memoryd.clock import to_rfc3339
from memoryd.errors import Conflict, NotFound
from memoryd.queue import jobs as jobq
from memoryd.store import audit, keyed, links, vectors
from memoryd.store.groupwrite import _Live, live_rows, tombstoned
from memoryd.store.memories import (
    RESTORED_PASSES,
    NewMemory,
    WriteContext,
    corroborate_event,
    duplicate_result,
    kept_vector_passes,
    new_result,
    new_row,
    restored_values,
    tombstoned_error,
    write_event,
)
from memoryd.store.prepared import fetch, prepare
from memoryd.store.rows import insert_rows
from memoryd.store.schema import LIVE_STATUSES, idempotency_keys, memories

#: (scope, owner, key) of an idempotency key.
KeyId = tuple[str, str, str]
#: Rows per lookup statement (three bound parameters each on the key lookup).
CHUNK = 256
#: Lookup statements are compiled for these sizes only; a shorter list repeats its last value.
_SIZES = (1, 4, 16, 64, CHUNK)
_KEY_COLUMNS = ("scope", "owner", "key", "request_hash", "result", "created_at", "expires_at")


def is_restore_unit(items: Sequence[NewMemory]) -> bool:
    """Whether a unit is an import's batch: several items, each keyed and restoring a row."""
    return len(items) > 1 and all(i.restore is not None and i.idempotency_key is not None for i in items)


def _chunks(values: list[Any]) -> list[tuple[int, list[Any]]]:
    """``values`` in chunks of at most CHUNK, each padded (with its last value) to a compiled size."""
    out = []
    for at in range(0, len(values), CHUNK):
        chunk = values[at:at + CHUNK]
        size = next(n for n in _SIZES if n >= len(chunk))
        out.append((size, chunk + [chunk[-1]] * (size - len(chunk))))
    return out


def _key_lookup(size: int) -> Select[Any]:
    cols = (idempotency_keys.c.scope, idempotency_keys.c.owner, idempotency_keys.c.key)
    wanted = [tuple_(*(bindparam(f"{c.name}_{i}") for c in cols)) for i in range(size)]
    return select(*cols, idempotency_keys.c.request_hash, idempotency_keys.c.result,
                  idempotency_keys.c.expires_at).where(tuple_(*cols).in_(wanted))


def _prior_keys(conn: Connection, wanted: list[KeyId], now_epoch: float
                ) -> tuple[dict[KeyId, tuple[str, Any]], list[KeyId]]:
    """Keys among ``wanted`` already stored: the unexpired ones as (request hash, stored
    result) by key, and the expired ones (their rows are replaced by the new keys)."""
    found: dict[KeyId, tuple[str, Any]] = {}
    expired: list[KeyId] = []
    for size, chunk in _chunks(wanted):
        stmt = prepare(conn, ("restore-key-lookup", size), partial(_key_lookup, size))
        params = {f"{name}_{i}": value for i, key in enumerate(chunk)
                  for name, value in zip(("scope", "owner", "key"), key, strict=True)}
        for scope, owner, key, request_hash, result, expires_at in fetch(conn, stmt, params):
            if float(expires_at) <= now_epoch:
                expired.append((scope, owner, key))
                continue
            # The driver hands JSON back as text on SQLite, parsed on PostgreSQL.
            stored = json.loads(result) if isinstance(result, str) else result
            found[(scope, owner, key)] = (request_hash, stored)
    return found, expired


def _id_lookup(size: int) -> Select[Any]:
    """The id and seq of the rows whose id is among ``size`` bound ids."""
    return select(memories.c.id, memories.c.seq).where(
        memories.c.id.in_([bindparam(f"id_{i}") for i in range(size)]))


def _seqs(conn: Connection, ids: list[str]) -> dict[str, int]:
    """id -> seq of the rows among ``ids`` that exist."""
    found: dict[str, int] = {}
    for size, chunk in _chunks(ids):
        stmt = prepare(conn, ("restore-ids", size), partial(_id_lookup, size))
        rows = fetch(conn, stmt, {f"id_{i}": v for i, v in enumerate(chunk)})
        found.update((r[0], int(r[1])) for r in rows)
    return found


def _existing_ids(conn: Connection, ids: list[str]) -> set[str]:
    return set(_seqs(conn, ids))


def write_restored(conn: Connection, items: Sequence[NewMemory], now: datetime,
                   ctx: WriteContext) -> list[dict[str, Any]]:
    """Write an import's unit in the caller's transaction; one result per item, as
    write_memory would answer it item after item (see the module docstring)."""
    now_epoch = now.timestamp()
    at = to_rfc3339(now)
    key_ids: list[KeyId] = [(i.scope, i.owner, i.idempotency_key or "") for i in items]
    prior, expired = _prior_keys(conn, sorted(set(key_ids)), now_epoch)
    # Each content's hash once (NewMemory.hash computes it on every use).
    item_idents = [(i.scope, i.owner, i.hash) for i in items]
    idents = set(item_idents)
    dead = tombstoned(conn, idents)
    live = live_rows(conn, idents - dead)
    linked = sorted({other for i in items for _, _, other, _ in (i.restore.links if i.restore else ())})
    present = _existing_ids(conn, linked)
    secret = keyed.secret(conn)

    results: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    kept: list[tuple[str, Any, str]] = []  # (new id, KeptVector, content hash)
    events: list[audit.Event] = []
    bumps: dict[str, int] = {}
    jobs: list[tuple[str, str]] = []
    new_links: list[tuple[str, str, str, str]] = []
    new_keys: dict[KeyId, dict[str, Any]] = {}
    for item, key_id, ident in zip(items, key_ids, item_idents, strict=True):
        restore = item.restore
        assert restore is not None
        if key_id in prior:
            request_hash, result = prior[key_id]
            if request_hash != item.request_hash:
                raise Conflict("idempotency_key was already used with different parameters; "
                               "use a new key for a new write", data={"field": "idempotency_key"})
            # The stored answer, marked as a replay (memoryd import counts it as already imported).
            results.append({**result, "replayed": True})
            continue
        if ident in dead:
            raise tombstoned_error()
        # A restored row that is history is kept as it was: only a live row can be a duplicate.
        hit = live.get(ident) if restore.status in LIVE_STATUSES else None
        if hit is not None:
            events.append(corroborate_event(at, ctx.actor, hit.id, hit.corroboration))
            hit.corroboration += 1
            bumps[hit.id] = bumps.get(hit.id, 0) + 1
            result = duplicate_result(hit.id, hit.recorded_at)
        else:
            values = new_row(item, ident[2], now)
            values.update(restored_values(restore, item.importance))
            if restore.vector is not None:
                passes = kept_vector_passes(ctx.passes, values["kind"])
                kept.append((values["id"], restore.vector, ident[2]))
            else:
                passes = [p for p in ctx.passes if p in RESTORED_PASSES]
            rows.append(values)
            event = write_event(values, ctx.actor, secret)
            events.append(audit.Event(at, event.actor, "memory.import", event.memory_id,
                                      {**event.detail, "source_id": restore.source_id}))
            jobs += [(p, values["id"]) for p in passes]
            result = new_result(values, list(passes))
            if restore.vector is not None:
                result["vector_kept"] = True
            if values["status"] in LIVE_STATUSES:
                live[ident] = _Live(values["id"], values["recorded_at"], values["corroboration"])
            present.add(values["id"])
        for n, (kind, direction, other, created_at) in enumerate(restore.links):
            if other not in present:
                raise NotFound(f"restore.links[{n}] names {other!r}, which is not in the store; "
                               "import the rows it links to first",
                               data={"field": f"restore.links[{n}].{direction}"})
            src, dst = (result["id"], other) if direction == "to" else (other, result["id"])
            new_links.append((src, dst, kind, created_at or at))
        prior[key_id] = (item.request_hash, result)
        new_keys[key_id] = result
        results.append(result)

    _insert_rows(conn, rows)
    if kept:
        seqs = _seqs(conn, [k[0] for k in kept])
        vectors.upsert(conn, [{"memory_seq": seqs[mid], "model": vec.model, "dim": vec.dim,
                               "vector": vec.data, "content_hash": chash, "embedded_at": at}
                              for mid, vec, chash in kept])
    for mid, n in bumps.items():
        conn.execute(update(memories).where(memories.c.id == mid)
                     .values(corroboration=memories.c.corroboration + n))
    for src, dst, kind, created_at in new_links:
        links.add(conn, src, dst, kind, created_at)
    audit.append_many(conn, events)
    jobq.enqueue_many(conn, jobs, now=now_epoch, max_attempts=ctx.max_attempts)
    _store_keys(conn, items, key_ids, new_keys, expired, now_epoch, ctx.idempotency_ttl_s)
    return results


def _insert_rows(conn: Connection, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    names = tuple(rows[0])
    insert_rows(conn, memories, names, [{**r, "metadata": json.dumps(r["metadata"])} for r in rows])


def _store_keys(conn: Connection, items: Sequence[NewMemory], key_ids: list[KeyId],
                new_keys: dict[KeyId, dict[str, Any]], expired: list[KeyId], now_epoch: float,
                ttl_s: float) -> None:
    """Each new key with its result; an expired key of the same name is deleted first (the
    lookup found it, so a unit without one runs no delete)."""
    if not new_keys:
        return
    gone = sorted(set(expired) & set(new_keys))
    if gone:
        cols = (idempotency_keys.c.scope, idempotency_keys.c.owner, idempotency_keys.c.key)
        for start in range(0, len(gone), CHUNK):
            conn.execute(delete(idempotency_keys).where(tuple_(*cols).in_(gone[start:start + CHUNK])))
    hashes = {key_id: item.request_hash for item, key_id in zip(items, key_ids, strict=True)}
    insert_rows(conn, idempotency_keys, _KEY_COLUMNS, [
        {"scope": k[0], "owner": k[1], "key": k[2], "request_hash": hashes[k], "result": json.dumps(result),
         "created_at": now_epoch, "expires_at": now_epoch + ttl_s}
        for k, result in new_keys.items()])
