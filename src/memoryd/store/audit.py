"""The audit log: hash-chained events, one per mutation, in the mutation's transaction.

An event holds ids, content hashes and changed fields, never memory text, and
owner values only as keyed hashes (store/keyed.py), so an erasure never has
to rewrite history (and never breaks the chain): an event's hash covers
exactly what the row stores, and no erasure changes a stored event.

**Lanes.** The log is a small set of chains ("lanes") rather than one: each
event names its lane and is chained to the previous event of that lane. A
write transaction takes the first lane no other transaction holds (``FOR
UPDATE SKIP LOCKED`` on its ``audit_lanes`` head row, kept until commit), so
daemons sharing one PostgreSQL database never wait on each other to append;
a lane is opened only when every lane is held, so there are about as many
lanes as the cluster ever had concurrent write transactions. SQLite has one
writer at a time and always appends to lane 0, which continues the single
chain of stores made before lanes (migration 0010).

Each lane's head row holds its event count and newest hash, so a truncated
lane no longer matches its head. Every ``ANCHOR_EVERY`` events a lane also
appends a cross-anchor: an event whose detail lists every other lane's head
(count and hash) as committed at that moment, which binds the lanes into one
history; ``verify`` checks every anchor against the lanes it names. The
threat model and proof sketch are in docs/architecture.md ("The audit
chain").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

import structlog
from sqlalchemy import Connection, Engine, bindparam, func, select, update

from memoryd.store.backends import backend_for
from memoryd.store.prepared import Prepared, collect, fetch, prepare, run, submit
from memoryd.store.rows import insert_rows
from memoryd.store.schema import audit_events, audit_lanes

log = structlog.get_logger(__name__)

GENESIS = "0" * 64
#: A lane appends a cross-anchor each time its event count passes a multiple of this.
ANCHOR_EVERY = 64
#: The anchor event's action (its detail: {"heads": [[lane, count, hash], ...]}).
ANCHOR_ACTION = "audit.anchor"
ANCHOR_ACTOR = "memoryd:audit"

#: Who opens lanes through an engine (the daemon's node id), recorded on the lanes it opens.
_writers: WeakKeyDictionary[Engine, str] = WeakKeyDictionary()


def set_writer(engine: Engine, node: str) -> None:
    """Record ``node`` as the opener of lanes this engine opens (shown by ``audit.verify``)."""
    _writers[engine] = node


def digest(prev_hash: str, at: str, actor: str, action: str, memory_id: str | None,
           detail: dict[str, Any]) -> str:
    """One event's hash: over the previous hash and the event's stored fields."""
    body = json.dumps(
        {"at": at, "actor": actor, "action": action, "memory_id": memory_id, "detail": detail},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(f"{prev_hash}\n{body}".encode()).hexdigest()


def lane_genesis(lane: int) -> str:
    """The hash a lane's first event is chained to. Lane 0 keeps the single chain's genesis
    (stores made before lanes verify unchanged); another lane's binds its number, so a lane
    renumbered (to fill the hole of a deleted one) breaks at its first event."""
    if lane == 0:
        return GENESIS
    return hashlib.sha256(f"memoryd audit lane\n{lane}".encode()).hexdigest()


def last_hash(conn: Connection) -> str:
    """The hash of the newest event in the whole log (the genesis hash for an empty log)."""
    stmt = prepare(conn, "audit-head", lambda: select(audit_events.c.hash)
                   .order_by(audit_events.c.seq.desc()).limit(1))
    rows = fetch(conn, stmt, {})
    return rows[0][0] if rows else GENESIS


@dataclass(frozen=True)
class Event:
    """An audit event not yet chained."""

    at: str
    actor: str
    action: str
    memory_id: str | None
    detail: dict[str, Any]


def append(conn: Connection, *, at: str, actor: str, action: str, memory_id: str | None,
           detail: dict[str, Any]) -> str:
    """Append one event to a lane; return its hash. Call inside the write transaction of
    the mutation it records."""
    return append_many(conn, [Event(at, actor, action, memory_id, detail)])


def append_many(conn: Connection, events: Sequence[Event], lane: LanePick | None = None) -> str:
    """Chain ``events`` in order onto one lane held by this transaction; return the last hash.

    ``lane``: the pick :func:`pick_lane` sent earlier in this transaction (the group
    committer sends it with its first reads). Round trips: the pick, then the events'
    insert and the lane's head move (queued together in pipeline mode), and every
    ANCHOR_EVERY events one read of the other lanes' heads.
    """
    if not events:
        return last_hash(conn)
    return write_append(conn, plan_append(conn, events, lane))


@dataclass
class Append:
    """Events chained onto a lane and not yet inserted (:func:`plan_append`)."""

    lane: int
    #: The events' rows, ``detail`` still a dict (dumped as the rows are inserted).
    rows: list[dict[str, Any]]
    #: The lane's event count and head hash once these rows are in.
    count: int
    head: str


def plan_append(conn: Connection, events: Sequence[Event], lane: LanePick | None = None) -> Append:
    """Every read an append needs (the lane, and the other lanes' heads when an anchor is due),
    done now; :func:`write_append` then only writes.

    The group committer plans before it inserts the batch's rows, so that in pipeline mode
    nothing waits on an answer once the first insert is sent: the batch, its events and its
    COMMIT reach the server together, and a daemon killed while the server runs them leaves
    the batch committed whole rather than cut off before its COMMIT."""
    number, count, prev = _take_lane(conn, lane)
    rows = []
    for ev in events:
        digest_ = digest(prev, ev.at, ev.actor, ev.action, ev.memory_id, ev.detail)
        rows.append({"lane": number, "at": ev.at, "actor": ev.actor, "action": ev.action,
                     "memory_id": ev.memory_id, "detail": ev.detail, "prev_hash": prev, "hash": digest_})
        prev = digest_
    after = count + len(rows)
    if events and after // ANCHOR_EVERY != count // ANCHOR_EVERY:
        anchor = _anchor(conn, number, events[-1].at)
        if anchor is not None:
            digest_ = digest(prev, anchor.at, anchor.actor, anchor.action, None, anchor.detail)
            rows.append({"lane": number, "at": anchor.at, "actor": anchor.actor, "action": anchor.action,
                         "memory_id": None, "detail": anchor.detail, "prev_hash": prev, "hash": digest_})
            prev = digest_
            after += 1
    return Append(number, rows, after, prev)


def write_append(conn: Connection, plan: Append) -> str:
    """Insert a planned append's events and move its lane's head; return the last hash."""
    if plan.rows:
        insert_rows(conn, audit_events, EVENT_COLUMNS,
                    [{**r, "detail": json.dumps(r["detail"])} for r in plan.rows])
        move = prepare(conn, "audit-lane-move", lambda: update(audit_lanes)
                       .where(audit_lanes.c.lane == bindparam("l"))
                       .values(n=bindparam("n"), hash=bindparam("h")))
        run(conn, move, {"l": plan.lane, "n": plan.count, "h": plan.head})
    return plan.head


#: The columns of an event row (:class:`Append` ``rows``).
EVENT_COLUMNS = ("lane", "at", "actor", "action", "memory_id", "detail", "prev_hash", "hash")


@dataclass
class LanePick:
    """A lane pick sent and not yet read (:func:`pick_lane`), or read by another query
    (:func:`picked`)."""

    stmt: Prepared | None
    cursor: Any
    #: The pick's rows (lane, n, hash), when another query read them.
    rows: list[Any] | None = None


def picked(rows: list[Any]) -> LanePick:
    """A pick whose rows (lane, n, hash) another query read, such as store/groupwrite.py's one
    query for a group's reads, with :func:`first_free_sql` inside."""
    return LanePick(None, None, rows)


def first_free_sql(conn: Connection) -> str:
    """The pick of the first lane no other transaction holds, as SQL with its values inlined,
    to put inside another query (Backend.group_lookup)."""
    backend = backend_for(conn)
    return str(backend.lock_audit_lane(select(audit_lanes.c.lane, audit_lanes.c.n, audit_lanes.c.hash)
                                       .order_by(audit_lanes.c.lane).limit(1))
               .compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))


def _pick_stmt(conn: Connection) -> Prepared:
    """The lane pick: on a backend with one writer (SQLite) lane 0's head row by its key;
    elsewhere the first lane no other transaction holds."""
    backend = backend_for(conn)
    if backend.one_writer:
        return prepare(conn, "audit-lane-zero", lambda: select(
            audit_lanes.c.lane, audit_lanes.c.n, audit_lanes.c.hash).where(audit_lanes.c.lane == 0))
    return _first_free_stmt(conn)


def _first_free_stmt(conn: Connection) -> Prepared:
    backend = backend_for(conn)
    return prepare(conn, ("audit-lane-pick", backend.name), lambda: backend.lock_audit_lane(
        select(audit_lanes.c.lane, audit_lanes.c.n, audit_lanes.c.hash)
        .order_by(audit_lanes.c.lane).limit(1)))


def pick_lane(conn: Connection) -> LanePick:
    """Send the pick of this transaction's lane now, to be read by :func:`append_many`
    (in pipeline mode it shares the round trip of the queries sent with it)."""
    stmt = _pick_stmt(conn)
    return LanePick(stmt, submit(conn, stmt, {}))


def _take_lane(conn: Connection, sent: LanePick | None) -> tuple[int, int, str]:
    """A lane for this transaction: (lane, its event count, its head hash), held until commit.

    The first lane nobody holds; when all are held, a new one. On SQLite (one
    writer) lane 0, read by its key (its lowest lane when it has no lane 0)."""
    if sent is None:
        rows = fetch(conn, _pick_stmt(conn), {})
    elif sent.rows is not None:
        rows = sent.rows
    else:
        assert sent.stmt is not None
        rows = collect(conn, sent.stmt, sent.cursor)
    if not rows and backend_for(conn).one_writer:
        # No lane 0 (a new store, or one copied from PostgreSQL without it): its lowest lane.
        rows = fetch(conn, _first_free_stmt(conn), {})
    while not rows:
        opened = _open_lane(conn)
        if opened is not None:
            return opened, 0, lane_genesis(opened)
        rows = fetch(conn, _first_free_stmt(conn), {})
    lane, count, head = rows[0]
    return int(lane), int(count), str(head)


def _open_lane(conn: Connection) -> int | None:
    """Open a new lane, held by this transaction; None when another transaction is opening
    every number tried (the caller looks for a free lane again). Never waits: a number
    another open transaction is taking is skipped by a try-lock, not waited on."""
    top = fetch(conn, prepare(conn, "audit-lane-top", lambda: select(
        func.max(audit_lanes.c.lane), select(func.max(audit_events.c.lane)).scalar_subquery())), {})
    first = max(-1 if v is None else int(v) for v in top[0]) + 1
    backend = backend_for(conn)
    opener = _writers.get(conn.engine, "memoryd")
    stmt = prepare(conn, ("audit-lane-open", backend.name), lambda: backend.insert(audit_lanes).values(
        {name: bindparam(name) for name in ("lane", "n", "hash", "opened_at", "opened_by")})
        .on_conflict_do_nothing().returning(audit_lanes.c.lane))
    for lane in range(first, first + 8):
        if not backend.try_lock_lane(conn, lane):
            continue
        added = fetch(conn, stmt, {"lane": lane, "n": 0, "hash": lane_genesis(lane), "opened_at": _now(),
                                   "opened_by": opener})
        if not added:
            return None  # committed by another transaction since the max was read
        log.info("audit.lane_opened", lane=lane, by=opener)
        return lane
    return None


def _now() -> str:
    from memoryd.clock import to_rfc3339, utcnow

    return to_rfc3339(utcnow())


def _anchor(conn: Connection, lane: int, at: str) -> Event | None:
    """A cross-anchor for ``lane``: every other lane's committed head (None when it is alone)."""
    stmt = prepare(conn, "audit-heads", lambda: select(
        audit_lanes.c.lane, audit_lanes.c.n, audit_lanes.c.hash).order_by(audit_lanes.c.lane))
    heads = [[int(r[0]), int(r[1]), str(r[2])] for r in fetch(conn, stmt, {}) if int(r[0]) != lane]
    if not heads:
        return None
    log.info("audit.anchor", lane=lane, heads=heads)  # the log is a witness outside the database
    return Event(at, ANCHOR_ACTOR, ANCHOR_ACTION, None, {"heads": heads})


@dataclass
class Verdict:
    """What :func:`check` found."""

    #: Events that verify before the first break (all of them when nothing broke).
    events: int = 0
    #: The seq of the first event that does not verify (None: no event breaks; see problems).
    first_break_seq: int | None = None
    #: Every disagreement found, in words (an event, a lane's head, an anchor).
    problems: list[str] = field(default_factory=list)
    #: Each lane's head as recorded by its events: lane -> [count, hash].
    heads: dict[int, list[Any]] = field(default_factory=dict)
    anchors: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "events": self.events, "first_break_seq": self.first_break_seq,
                "problems": self.problems[:20], "lanes": len(self.heads), "anchors": self.anchors,
                "heads": {str(k): v for k, v in sorted(self.heads.items())}}


@dataclass
class _Lane:
    count: int = 0
    prev: str = ""
    last_seq: int = 0


def check(conn: Connection, expect: Iterable[tuple[int, int, str]] = ()) -> Verdict:
    """Verify every lane, every head row and every cross-anchor; return what broke.

    One pass over the events in seq order (the primary key; a lane's events are
    in seq order, since a lane has one appender at a time), keeping one running
    hash per lane. ``expect``: (lane, count, hash) heads recorded outside the
    database earlier (a previous verify's ``heads``, the daemon log's
    ``audit.anchor`` lines), each of which must still be in its lane.
    """
    wanted: dict[tuple[int, int], list[tuple[str, str]]] = {}
    anchor_rows = conn.execute(select(audit_events.c.seq, audit_events.c.detail)
                               .where(audit_events.c.action == ANCHOR_ACTION))
    verdict = Verdict()
    for seq, detail in anchor_rows:
        verdict.anchors += 1
        for lane, n, h in _heads_of(detail):
            wanted.setdefault((lane, n), []).append((h, f"the anchor at seq {seq}"))
    for lane, n, h in expect:
        wanted.setdefault((int(lane), int(n)), []).append((str(h), "the expected head"))
    lanes: dict[int, _Lane] = {}
    found: set[tuple[int, int]] = set()
    events = conn.execute(select(audit_events).order_by(audit_events.c.seq))
    for row in events:
        state = lanes.get(row.lane)
        if state is None:
            state = lanes[row.lane] = _Lane(prev=lane_genesis(row.lane))
        expected = digest(state.prev, row.at, row.actor, row.action, row.memory_id, row.detail)
        if row.prev_hash != state.prev or row.hash != expected:
            what = "does not follow its lane's previous event" if row.prev_hash != state.prev \
                else "does not match its hash"
            _broke(verdict, row.seq, f"event seq {row.seq} (lane {row.lane}, #{state.count + 1}) {what}")
            # Follow the stored chain on from here, so one tampered event is reported once.
            state.prev = row.hash
        else:
            state.prev = expected
        state.count += 1
        state.last_seq = row.seq
        if (row.lane, state.count) in wanted:
            found.add((row.lane, state.count))
            for h, who in wanted[(row.lane, state.count)]:
                if h != state.prev:
                    _broke(verdict, row.seq, f"lane {row.lane} event #{state.count} (seq {row.seq}) is not "
                                             f"the one {who} recorded")
        if verdict.first_break_seq is None:
            verdict.events += 1
    for (lane, n), refs in wanted.items():
        if (lane, n) not in found and n > 0:
            for _, who in refs:
                _broke(verdict, None, f"lane {lane} has no event #{n}, which {who} recorded "
                                      f"(events deleted from its end?)")
    recorded = {int(r.lane): (int(r.n), str(r.hash)) for r in conn.execute(select(audit_lanes))}
    for lane, state in sorted(lanes.items()):
        verdict.heads[lane] = [state.count, state.prev]
        head = recorded.get(lane)
        if head is None:
            _broke(verdict, None, f"lane {lane} has {state.count} events but no head row")
        elif head != (state.count, state.prev):
            _broke(verdict, None, f"lane {lane}'s head row says {head[0]} events ending {head[1][:12]}…, "
                                  f"its events are {state.count} ending {state.prev[:12]}…")
    for lane, (n, h) in recorded.items():
        if lane not in lanes:
            verdict.heads[lane] = [0, lane_genesis(lane)]
            if n != 0 or h != lane_genesis(lane):
                _broke(verdict, None, f"lane {lane}'s head row says {n} events, and it has none")
    return verdict


def _broke(verdict: Verdict, seq: int | None, problem: str) -> None:
    verdict.problems.append(problem)
    if seq is not None and (verdict.first_break_seq is None or seq < verdict.first_break_seq):
        verdict.first_break_seq = seq


def _heads_of(detail: Any) -> list[tuple[int, int, str]]:
    value = json.loads(detail) if isinstance(detail, str) else detail
    try:
        return [(int(lane), int(n), str(h)) for lane, n, h in value["heads"]]
    except (KeyError, TypeError, ValueError):
        return []  # a damaged anchor fails its own hash check


def parse_heads(value: Any) -> list[tuple[int, int, str]]:
    """``{"lane": [count, hash], ...}`` (``audit.verify``'s ``heads``) as (lane, count, hash)
    triples; raises InvalidParams naming the field when it is not that shape."""
    from memoryd.errors import InvalidParams

    if value is None:
        return []
    try:
        out = [(int(lane), int(head[0]), str(head[1])) for lane, head in dict(value).items()]
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        raise InvalidParams("expect_heads", "must be an object {lane: [count, hash]}, as audit.verify "
                            "returns in heads") from exc
    if any(len(h) != 64 or n < 0 for _, n, h in out):
        raise InvalidParams("expect_heads", "each head is [count >= 0, a 64-digit hash]")
    return out


def verify(conn: Connection) -> tuple[int, int | None]:
    """Check the whole log; return (events that verify before the first break, the seq of
    the first break). A break that no event carries (a lane's end deleted together with
    its head row's count, a head row deleted) is reported as seq 0, which no event has."""
    verdict = check(conn)
    if verdict.ok:
        return verdict.events, None
    return verdict.events, verdict.first_break_seq or 0


def events_for(conn: Connection, memory_id: str) -> list[dict[str, Any]]:
    """The events that name one memory, oldest first (its history)."""
    rows = conn.execute(
        select(audit_events).where(audit_events.c.memory_id == memory_id).order_by(audit_events.c.seq)
    )
    return [
        {"at": r.at, "actor": r.actor, "action": r.action, "detail": r.detail} for r in rows
    ]
