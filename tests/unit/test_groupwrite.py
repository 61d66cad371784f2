"""The group fast path gives the same outcomes and the same store as the per-unit path.

Random groups of plain units (single writes and all-or-nothing write_many
units over a few owners and a small vocabulary, so duplicates inside a group,
duplicates of stored rows and tombstoned content all occur) are committed once
through store/groupwrite.py and once unit by unit through the savepoint path,
each on its own fresh store with the same starting rows; both must answer and
store the same things.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select

from memoryd.errors import Tombstoned
from memoryd.store import audit, prepared
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.memories import WriteContext, add_tombstone, content_hash
from memoryd.store.migrate import upgrade
from memoryd.store.schema import audit_events, jobs, memories
from memoryd.store.writes import WriteUnit, _commit_one, commit_units

from .helpers import NOW, build_memory

TEXTS = ["port is 5432", "deploys on Friday", "cache TTL is 60s", "owner is Dana"]
OWNERS = ["a1", "a2"]
CTX = WriteContext(actor="test:unit", passes=["embed", "extract"], max_attempts=5,
                   idempotency_ttl_s=86400.0)

@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[[], Engine]]:
    """A fresh migrated store on its own file each call (hypothesis runs many examples per test)."""
    opened: list[Engine] = []
    counter = iter(range(10**6))

    def _make() -> Engine:
        eng = create_store_engine(f"sqlite:///{tmp_path / f'store{next(counter)}.db'}")
        upgrade(eng)
        opened.append(eng)
        return eng

    yield _make
    for eng in opened:
        eng.dispose()


item = st.tuples(st.sampled_from(TEXTS), st.sampled_from(OWNERS))
group = st.lists(st.lists(item, min_size=1, max_size=3), min_size=1, max_size=8)
stored = st.lists(item, max_size=4)
dead = st.lists(item, max_size=2)


def _units(spec: list[list[tuple[str, str]]]) -> list[WriteUnit]:
    return [WriteUnit([build_memory(t, owner=o) for t, o in unit], actor=f"actor{i}")
            for i, unit in enumerate(spec)]


def _seed(engine: Engine, rows: list[tuple[str, str]], tombs: list[tuple[str, str]]) -> None:
    for text, owner in rows:
        commit_units(engine, [WriteUnit([build_memory(text, owner=owner)], actor="seed")], CTX, NOW)
    with engine.begin() as conn:
        for text, owner in tombs:
            add_tombstone(conn, "agent", owner, content_hash(text), NOW)


def _per_unit(engine: Engine, units: list[WriteUnit]) -> list[Any]:
    with engine.begin() as conn:
        return [_commit_one(conn, u, NOW, CTX) for u in units]


def _shape(engine: Engine, outcomes: list[Any]) -> dict[str, Any]:
    """What must match, with ids replaced by the content and owner they name."""
    with read_only(engine) as conn:
        rows = conn.execute(select(memories.c.id, memories.c.content, memories.c.owner,
                                   memories.c.corroboration)).all()
        actions = Counter(conn.execute(select(audit_events.c.action)).scalars())
        job_count = len(conn.execute(select(jobs.c.id)).all())
        checked, broken = audit.verify(conn)
    name = {r.id: (r.content, r.owner) for r in rows}
    answers = []
    for outcome in outcomes:
        if isinstance(outcome, Tombstoned):
            answers.append("tombstoned")
        else:
            answers.append([(name[r["id"]], "duplicate_of" in r, tuple(r["queued"])) for r in outcome])
    return {"answers": answers, "rows": sorted((r.content, r.owner, r.corroboration) for r in rows),
            "actions": actions, "jobs": job_count, "chain": (checked, broken)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=group, seeded=stored, tombs=dead)
def test_fast_path_matches_the_per_unit_path(make_store: Callable[[], Engine],
                                             spec: list[list[tuple[str, str]]],
                                             seeded: list[tuple[str, str]],
                                             tombs: list[tuple[str, str]]) -> None:
    fast, slow = make_store(), make_store()
    for engine in (fast, slow):
        _seed(engine, seeded, tombs)
    fast_out = commit_units(fast, _units(spec), CTX, NOW)
    slow_out = _per_unit(slow, _units(spec))
    assert _shape(fast, fast_out) == _shape(slow, slow_out)


def test_a_group_of_duplicates_inserts_one_row_and_corroborates_it(make_store: Callable[[], Engine]) -> None:
    engine = make_store()
    units = [WriteUnit([build_memory("port is 5432")], actor=f"a{i}") for i in range(5)]
    out = commit_units(engine, units, CTX, NOW)
    ids = {o[0]["id"] for o in out}
    assert len(ids) == 1
    assert ["duplicate_of" in o[0] for o in out] == [False, True, True, True, True]
    with read_only(engine) as conn:
        assert conn.execute(select(memories.c.corroboration)).scalar_one() == 5
        assert len(conn.execute(select(jobs.c.id)).all()) == 2  # embed + extract, once
        assert audit.verify(conn)[1] is None


def test_a_tombstoned_item_refuses_its_whole_unit_only(make_store: Callable[[], Engine]) -> None:
    engine = make_store()
    _seed(engine, [], [("owner is Dana", "a1")])
    units = _units([[("port is 5432", "a1"), ("owner is Dana", "a1")], [("owner is Dana", "a2")]])
    out = commit_units(engine, units, CTX, NOW)
    assert isinstance(out[0], Tombstoned)
    assert not isinstance(out[1], Tombstoned)
    with read_only(engine) as conn:
        assert conn.execute(select(memories.c.content)).scalars().all() == ["owner is Dana"]


def test_identity_lookups_probe_the_identity_indexes(make_store: Callable[[], Engine]) -> None:
    """Both group reads must probe by (scope, owner, hash), never walk the table by status."""
    engine = make_store()
    commit_units(engine, _units([[("port is 5432", "a1")]]), CTX, NOW)
    lookups = [stmt for (dialect, key), stmt in prepared._cache.items()
               if dialect == "sqlite" and isinstance(key, tuple) and key[0] == "identity-lookup"]
    assert len(lookups) >= 2  # the tombstone and the live-row lookups
    with engine.connect() as conn:
        for stmt in lookups:
            plan = " ".join(r[3] for r in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + stmt.sql, tuple(["x"] * stmt.sql.count("?"))))
            assert "scope=? AND owner=? AND content_hash=?" in plan, plan
