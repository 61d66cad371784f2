"""DESIGN rule 2 on the read side: ``as_of`` answers with what the store believed then.

The store is changed behind the daemon's back, exactly as the lifecycle verbs
would (through SQLAlchemy on the daemon's own database file):

* ``old`` is superseded at T (status 'superseded', retired_at = valid_to = T)
  by ``new``, recorded after T;
* ``forgot`` is forgotten (status 'forgotten', content NULL);
* ``cand`` becomes a candidate (as a derived memory would start).

A second pair goes through the real verbs (memory.supersede, memory.forget).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import select, text, update

from memoryd.clock import parse_rfc3339, to_rfc3339, utcnow
from memoryd.store.schema import memories, memory_vectors
from tests.search._daemon import stop_cleanly

MODES = ("lexical", "vector", "hybrid")
Q_NODE = "Which Node version does the frontend CI build use?"
Q_TOKEN = "Where is the CI deploy token kept?"
Q_BACKUP = "How many daily snapshots does the nightly backup keep?"
ROWS = {
    "old": "The frontend CI build runs on Node 18.",
    "forgot": "The CI deploy token lives in Vault under secret/ci/zanzibar-token.",
    "cand": "The frontend CI build may move to Node 22 next quarter.",
    "stable": "The CI pipeline caches the pnpm store between runs of the frontend build.",
    "v_old": "The nightly backup job keeps 7 daily snapshots.",
    "v_forget": "The nightly backup bucket is reached with access key quokka-7731.",
}


def _now() -> str:
    return to_rfc3339(utcnow())


def _tick() -> None:
    time.sleep(0.02)  # timestamps have microseconds; keep instants clearly apart


@pytest.fixture(scope="module")
def history(spawn: Any, backend: str,
            module_new_db_url: Callable[[], str | None]) -> Iterator[dict[str, Any]]:
    daemon = spawn(f"as-of-{backend}", embedder="bundled", db_url=module_new_db_url())
    names = list(ROWS)
    ids = dict(zip(names, daemon.write_many([{"content": ROWS[n], "agent_id": "a1"} for n in names]),
                   strict=True))
    ids["a2_old"] = daemon.write(ROWS["old"], agent_id="a2")
    daemon.wait_embedded()
    _tick()
    t_before = _now()
    _tick()
    t_switch = _now()
    _tick()
    ids["new"] = daemon.write("The frontend CI build runs on Node 20.", agent_id="a1")
    daemon.wait_embedded()
    _tick()
    t_after = _now()

    with daemon.engine().begin() as conn:
        conn.execute(update(memories).where(memories.c.id == ids["old"])
                     .values(status="superseded", retired_at=t_switch, valid_to=t_switch))
        conn.execute(update(memories).where(memories.c.id == ids["forgot"])
                     .values(status="forgotten", content=None))
        conn.execute(update(memories).where(memories.c.id == ids["cand"]).values(status="candidate"))

    # The same through the verbs.
    _tick()
    t_verbs = _now()
    _tick()
    out = daemon.call("memory.supersede", {"old_id": ids["v_old"], "agent_id": "a1",
                                           "content": "The nightly backup job keeps 14 daily snapshots.",
                                           "reason": "retention was raised"})
    ids["v_new"] = out["new_id"]
    daemon.call("memory.forget", {"id": ids["v_forget"], "reason": "a secret"})
    daemon.wait_embedded()
    _tick()
    yield {"daemon": daemon, "ids": ids, "t_before": t_before, "t_switch": t_switch,
           "t_after": t_after, "t_verbs": t_verbs, "t_verbs_after": _now()}
    stop_cleanly(daemon)


def found(h: dict[str, Any], query: str, mode: str, **params: Any) -> set[str]:
    result = h["daemon"].search(query, mode=mode, k=20, agent_id="a1", **params)
    assert result["mode_used"] == mode, result["notices"]
    return {r["id"] for r in result["results"]}


@pytest.mark.parametrize("mode", MODES)
def test_as_of_before_the_switch_returns_the_old_row_not_the_new(history: dict[str, Any], mode: str) -> None:
    ids = history["ids"]
    got = found(history, Q_NODE, mode, as_of=history["t_before"])
    assert ids["old"] in got
    assert ids["new"] not in got
    assert ids["stable"] in got  # control
    assert ids["a2_old"] not in got


@pytest.mark.parametrize("mode", MODES)
def test_as_of_after_the_switch_returns_the_new_row_not_the_old(history: dict[str, Any], mode: str) -> None:
    ids = history["ids"]
    got = found(history, Q_NODE, mode, as_of=history["t_after"])
    assert ids["new"] in got
    assert ids["old"] not in got
    assert ids["stable"] in got


@pytest.mark.parametrize("mode", MODES)
def test_as_of_reads_any_rfc3339_spelling_of_the_instant(history: dict[str, Any], mode: str) -> None:
    """The same instants written with a +02:00 offset answer the same."""
    ids = history["ids"]
    plus2 = timezone(timedelta(hours=2))
    before = parse_rfc3339(history["t_before"]).astimezone(plus2).isoformat()
    after = parse_rfc3339(history["t_after"]).astimezone(plus2).isoformat()
    assert before.endswith("+02:00")
    got = found(history, Q_NODE, mode, as_of=before)
    assert ids["old"] in got and ids["new"] not in got
    got = found(history, Q_NODE, mode, as_of=after)
    assert ids["new"] in got and ids["old"] not in got


@pytest.mark.parametrize("mode", MODES)
def test_as_of_before_any_row_finds_nothing(history: dict[str, Any], mode: str) -> None:
    assert found(history, Q_NODE, mode, as_of="2001-01-01T00:00:00Z") == set()


@pytest.mark.parametrize("mode", MODES)
def test_default_search_shows_only_active_rows(history: dict[str, Any], mode: str) -> None:
    ids = history["ids"]
    result = history["daemon"].search(Q_NODE, mode=mode, k=20, agent_id="a1")
    got = {r["id"] for r in result["results"]}
    assert ids["new"] in got and ids["stable"] in got
    assert not got & {ids["old"], ids["cand"], ids["forgot"], ids["v_old"], ids["v_forget"]}
    assert {r["status"] for r in result["results"]} == {"active"}


@pytest.mark.parametrize("mode", MODES)
def test_include_candidates_shows_candidates(history: dict[str, Any], mode: str) -> None:
    ids = history["ids"]
    got = found(history, Q_NODE, mode, include_candidates=True)
    assert ids["cand"] in got
    assert ids["new"] in got  # control: active rows still there
    assert ids["old"] not in got
    got = found(history, Q_NODE, mode, include_candidates=True, as_of=history["t_after"])
    assert ids["cand"] in got and ids["old"] not in got


@pytest.mark.parametrize("include_candidates", [False, True])
@pytest.mark.parametrize("when", [None, "t_before", "t_after"])
@pytest.mark.parametrize("mode", MODES)
def test_forgotten_row_never_appears(history: dict[str, Any], mode: str, when: str | None,
                                     include_candidates: bool) -> None:
    ids = history["ids"]
    params: dict[str, Any] = {"include_candidates": include_candidates}
    if when:
        params["as_of"] = history[when]
    got = found(history, Q_TOKEN, mode, **params)
    assert ids["forgot"] not in got
    assert ids["stable"] in got  # control: the query does reach a1's CI rows


def test_forgotten_text_is_gone_from_both_indexes(history: dict[str, Any], backend: str) -> None:
    """No lexical posting and no vector is left for a forgotten row (its text must not be findable):
    FTS5 and sqlite-vec's index on SQLite; the tsvector column (GIN-indexed) on PostgreSQL, whose
    vector index is over memory_vectors itself."""
    daemon, ids = history["daemon"], history["ids"]
    if backend == "sqlite":
        lexical = text("SELECT rowid FROM memories_fts WHERE memories_fts MATCH :q")
    else:
        lexical = text("SELECT seq FROM memories WHERE content_tsv @@ plainto_tsquery('english', :q)")
    with daemon.engine().connect() as conn:
        seq = conn.execute(select(memories.c.seq).where(memories.c.id == ids["forgot"])).scalar_one()
        assert conn.execute(lexical, {"q": '"zanzibar"'}).all() == []
        assert conn.execute(select(memory_vectors.c.memory_seq)
                            .where(memory_vectors.c.memory_seq == seq)).all() == []
        if backend == "sqlite":
            assert conn.execute(text("SELECT memory_seq FROM memory_vec WHERE memory_seq = :s"),
                                {"s": seq}).all() == []
        # Control: a live row's text is indexed.
        assert conn.execute(lexical, {"q": '"pnpm"'}).all() != []


@pytest.mark.parametrize("mode", MODES)
def test_supersede_verb_is_seen_through_as_of(history: dict[str, Any], mode: str) -> None:
    ids = history["ids"]
    before = found(history, Q_BACKUP, mode, as_of=history["t_verbs"])
    assert ids["v_old"] in before and ids["v_new"] not in before
    after = found(history, Q_BACKUP, mode, as_of=history["t_verbs_after"])
    assert ids["v_new"] in after and ids["v_old"] not in after
    now = found(history, Q_BACKUP, mode)
    assert ids["v_new"] in now and ids["v_old"] not in now


@pytest.mark.parametrize("mode", MODES)
def test_forget_verb_hides_the_row_at_once_and_after_erasure(history: dict[str, Any], mode: str) -> None:
    daemon, ids = history["daemon"], history["ids"]
    for when in (None, history["t_verbs"]):
        params = {"as_of": when} if when else {}
        got = found(history, "backup bucket access key quokka", mode, **params)
        assert ids["v_forget"] not in got
        assert ids["v_new"] in got or ids["v_old"] in got  # control: a1's backup rows are reachable
    deadline = time.monotonic() + 120
    while daemon.call("memory.get", {"id": ids["v_forget"]})["status"] != "forgotten":
        assert time.monotonic() < deadline, "the forget request was not carried out in 120 s"
        time.sleep(0.2)
    assert ids["v_forget"] not in found(history, "backup bucket access key quokka", mode)
