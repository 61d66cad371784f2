"""DESIGN rule 12: a downgraded answer says so (``mode_used``, ``notices``).

* embedder off: ``mode: vector`` and hybrid answer lexically, with the reason;
* embedder still loading: the same, and the search does not wait for the load;
* rows not embedded yet: hybrid stays hybrid and gives the count of the
  reader's matching rows that the vector leg could not see, while the
  lexical leg still finds them (the k list is filled from the other leg).

The unembedded rows are made deterministic: they are written through the
store's own write path on the daemon's database (durable row + embed job, as
memory.write does), with their embed jobs held back an hour (``run_after``).
The runner still wakes for its own schedules (decay, retention), and a wake
drains every due queue: without the hold, a scheduled wake between two tests
embedded the late rows (seen in CI). The last test makes the jobs due, a
write through the socket wakes the runner, and the notice goes away once the
rows are embedded.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.search._daemon import stop_cleanly

QUERY = "which port does the staging database listen on"
SEED = [
    "The staging database listens on port 5433.",
    "Production Postgres is behind pgbouncer on port 6432.",
    "Redis for the session cache runs on port 6380 in staging.",
]
LATE_A1 = [f"Staging database replica {i} listens on port {5500 + i}." for i in range(7)]
LATE_A2 = [f"Staging database shard {i} listens on port {5600 + i}." for i in range(5)]


def unembedded_count(result: dict[str, Any]) -> int | None:
    for notice in result["notices"]:
        m = re.match(r"(\d+) matching memories are not embedded yet", notice)
        if m:
            return int(m.group(1))
    return None


def write_behind(daemon: Any, contents: list[str], agent_id: str) -> list[str]:
    """Write rows through the store's write path on the daemon's DB (rows + embed jobs, one commit)."""
    from memoryd.clock import utcnow
    from memoryd.passes.registry import build_passes, write_passes
    from memoryd.store.memories import NewMemory, WriteContext, write_memory

    ctx = WriteContext(actor="test:search", passes=write_passes(build_passes()), max_attempts=5,
                       idempotency_ttl_s=86400)
    assert "embed" in ctx.passes
    with daemon.engine().begin() as conn:
        ids = [write_memory(conn, NewMemory(content=c, kind="auto", scope="agent", owner=agent_id,
                                            agent_id=agent_id), utcnow(), ctx)["id"]
               for c in contents]
        hold_embed_jobs(conn, ids, until=time.time() + HOLD_S)
    return ids


HOLD_S = 3600.0


def hold_embed_jobs(conn: Any, ids: list[str], *, until: float) -> None:
    """Set the rows' embed jobs to run no sooner than ``until`` (0: due now)."""
    from sqlalchemy import update

    from memoryd.store.schema import jobs

    done = conn.execute(update(jobs).where(jobs.c["pass"] == "embed", jobs.c.target.in_(ids))
                        .values(run_after=until))
    assert done.rowcount == len(ids), (done.rowcount, ids)


@pytest.fixture(scope="module")
def fresh(spawn: Any, backend: str, module_new_db_url: Callable[[], str | None]) -> Iterator[dict[str, Any]]:
    """A bundled daemon's first searches, before anything loaded the model."""
    daemon = spawn(f"notices-fresh-{backend}", embedder="bundled", db_url=module_new_db_url())
    seeded = daemon.write_many([{"content": c, "agent_id": "a1"} for c in SEED[:1]])
    # No wait: the embed pass is loading the model right now (or about to).
    out = {mode: daemon.search(QUERY, mode=mode, k=5, agent_id="a1") for mode in ("hybrid", "vector")}
    yield {"daemon": daemon, "first": out, "ids": seeded}
    stop_cleanly(daemon)


@pytest.fixture(scope="module")
def lagging(spawn: Any, backend: str,
            module_new_db_url: Callable[[], str | None]) -> Iterator[dict[str, Any]]:
    daemon = spawn(f"notices-lag-{backend}", embedder="bundled", config={"tick_interval_s": 3600.0},
                   db_url=module_new_db_url())
    seeded = daemon.write_many([{"content": c, "agent_id": a} for c in SEED for a in ("a1", "a2")])
    daemon.wait_embedded()
    late_a1 = write_behind(daemon, LATE_A1, "a1")
    late_a2 = write_behind(daemon, LATE_A2, "a2")
    yield {"daemon": daemon, "seeded": seeded, "late_a1": late_a1, "late_a2": late_a2}
    stop_cleanly(daemon)


@pytest.fixture(scope="module")
def off(spawn: Any, backend: str, module_new_db_url: Callable[[], str | None]) -> Iterator[Any]:
    daemon = spawn(f"notices-off-{backend}", embedder="none", db_url=module_new_db_url())
    daemon.write_many([{"content": c, "agent_id": "a1"} for c in SEED])
    yield daemon
    stop_cleanly(daemon)


# -- embedder off -------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_embedder_off_answers_lexically_and_says_why(off: Any, mode: str) -> None:
    result = off.search(QUERY, mode=mode, k=5, agent_id="a1")
    assert result["mode_used"] == "lexical"
    assert any("vector leg skipped" in n and "--embedder none" in n for n in result["notices"]), \
        result["notices"]
    assert result["results"], "the lexical fallback found nothing"


def test_embedder_off_lexical_mode_has_no_notice(off: Any) -> None:
    result = off.search(QUERY, mode="lexical", k=5, agent_id="a1")
    assert result["mode_used"] == "lexical"
    assert result["notices"] == []
    assert result["results"]


def test_embedder_off_pending_rows_are_not_reported_as_a_partial_vector_leg(off: Any) -> None:
    """With the vector leg skipped, the not-embedded count is not the point: one notice says why."""
    result = off.search(QUERY, mode="hybrid", k=5, agent_id="a1")
    assert unembedded_count(result) is None
    assert len(result["notices"]) == 1


# -- embedder loading ---------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_search_while_the_embedder_loads_answers_lexically_with_a_notice(fresh: dict[str, Any],
                                                                         mode: str) -> None:
    result = fresh["first"][mode]
    assert result["mode_used"] == "lexical"
    assert any("vector leg skipped" in n and "loading" in n for n in result["notices"]), result["notices"]
    assert [r["id"] for r in result["results"]] == fresh["ids"]


def test_after_loading_the_same_search_is_hybrid(fresh: dict[str, Any]) -> None:
    daemon = fresh["daemon"]
    daemon.wait_embedded()
    result = daemon.search(QUERY, mode="hybrid", k=5, agent_id="a1")
    assert result["mode_used"] == "hybrid"
    assert result["notices"] == []


# -- rows not embedded yet ----------------------------------------------------------------
@pytest.mark.parametrize("mode", ["hybrid", "vector"])
def test_unembedded_rows_are_counted_for_the_reader_only(lagging: dict[str, Any], mode: str) -> None:
    daemon = lagging["daemon"]
    a1 = daemon.search(QUERY, mode=mode, k=10, agent_id="a1")
    assert a1["mode_used"] == mode
    assert unembedded_count(a1) == len(LATE_A1), a1["notices"]
    a2 = daemon.search(QUERY, mode=mode, k=10, agent_id="a2")
    assert unembedded_count(a2) == len(LATE_A2), a2["notices"]
    nobody = daemon.search(QUERY, mode=mode, k=10)
    assert unembedded_count(nobody) is None, nobody["notices"]


def test_unembedded_rows_count_respects_the_scope_and_kind_filters(lagging: dict[str, Any]) -> None:
    daemon = lagging["daemon"]
    assert unembedded_count(daemon.search(QUERY, k=10, agent_id="a1", kind="fact")) is None
    assert unembedded_count(daemon.search(QUERY, k=10, agent_id="a1", scope="user", user_id="u1")) is None
    assert unembedded_count(daemon.search(QUERY, k=10, agent_id="a1", scope="agent")) == len(LATE_A1)


def test_hybrid_finds_unembedded_rows_through_the_lexical_leg(lagging: dict[str, Any]) -> None:
    daemon = lagging["daemon"]
    result = daemon.search("replica", mode="hybrid", k=10, agent_id="a1", explain=True)
    assert result["mode_used"] == "hybrid"
    got = {r["id"] for r in result["results"]}
    assert set(lagging["late_a1"]) <= got
    assert not got & set(lagging["late_a2"])
    for r in result["results"]:
        if r["id"] in lagging["late_a1"]:
            assert "vector_rank" not in r["explain"]  # no vector yet


def test_vector_mode_cannot_see_unembedded_rows_but_says_so(lagging: dict[str, Any]) -> None:
    """The vector leg finds only a1's three embedded rows; the rest of k is filled lexically, marked."""
    daemon = lagging["daemon"]
    result = daemon.search("staging database replica port", mode="vector", k=10, agent_id="a1",
                           explain=True)
    assert result["mode_used"] == "vector"
    own = {r["id"] for r in result["results"] if "filled_from" not in r["explain"]}
    filled = {r["id"] for r in result["results"] if r["explain"].get("filled_from") == "lexical"}
    assert own and not own & set(lagging["late_a1"])  # the vector leg cannot see them
    assert set(lagging["late_a1"]) <= filled  # the lexical leg can
    assert not (own | filled) & set(lagging["late_a2"])
    assert unembedded_count(result) == len(LATE_A1)


def test_notice_goes_away_once_the_rows_are_embedded(lagging: dict[str, Any]) -> None:
    """Runs last in the module: a socket write wakes the runner, which embeds the late rows."""
    daemon = lagging["daemon"]
    with daemon.engine().begin() as conn:
        hold_embed_jobs(conn, lagging["late_a1"] + lagging["late_a2"], until=0.0)
    daemon.write("Staging database listens on IPv6 too.", agent_id="a3")
    daemon.wait_embedded()
    result = daemon.search(QUERY, mode="hybrid", k=20, agent_id="a1")
    assert unembedded_count(result) is None, result["notices"]
    vec = daemon.search("staging database replica port", mode="vector", k=20, agent_id="a1")
    assert set(lagging["late_a1"]) <= {r["id"] for r in vec["results"]}
