"""The passes that need the LLM, end to end on one real daemon with both bundled models.

One daemon (``--embedder bundled --llm bundled --log-level debug --log-format
json``) serves the whole module, because each memory written costs one LLM
extraction: 10-40 s on a quiet 2-core machine, minutes on a loaded one. Four
memories are written once, at the start, so that their extractions share one
batch:

* three notes about databases for reflect (an update of one value, and a note
  about another database that is similar but not contradictory);
* one source note for extract, which is then forgotten, and whose unique word
  (``Quokkaflux``) the log scan looks for.

The tests read what they need through :class:`LLMWorld`, whose stages
(extracted, then erased) run once, in that order, whichever test asks first;
what extract produced is captured before the erasure, so no test depends on
the order the tests run in.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import MODEL_START_TIMEOUT_S, E2EDaemon, new_daemon, require_bundled_llm, stop_cleanly
from tests.e2e.helpers import all_proposals, get, proposals, status_of_rows
from tests.integration.harness import wait_until

pytestmark = [
    pytest.mark.slow,
    # The bundled 270M model on a shared 2-core machine: one extraction measured 15-220 s.
    pytest.mark.timeout(1800),
]

SOURCE = "The Quokkaflux ingest service runs Redis 7 on cache1.internal:6379; staging is still on Redis 6."
MARKER = "quokkaflux"
#: The note's two self-contained clauses (text/clauses.py splits at the semicolon): derived
#: whatever the LLM says, since they are the source's own words.
SOURCE_CLAUSES = {"The Quokkaflux ingest service runs Redis 7 on cache1.internal:6379",
                  "Staging is still on Redis 6"}
STAGING_15 = "The staging database is Postgres 15 on db1:5432"
STAGING_16 = "The staging database is Postgres 16 on db1:5432"
PRODUCTION_14 = "The production database is Postgres 14 on db1:5432"
AGENT_EXTRACT, AGENT_REFLECT = "e2e-extract", "e2e-reflect"

#: A hang guard for one batch of four extractions on a loaded machine (never a speed claim).
LLM_TIMEOUT_S = 1500.0
#: Words a faithful restatement may add that the source need not contain. Negations are
#: deliberately absent: "not"/"no" change what the source says.
FUNCTION_WORDS = {"the", "a", "an", "is", "are", "was", "were", "be", "on", "in", "at", "of", "to",
                  "for", "by", "with", "and", "it", "its", "this", "that", "has", "have", "uses"}


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _ungrounded(fact: str, source: str) -> list[str]:
    """The fact's words found neither in the source (allowing a plural s) nor among FUNCTION_WORDS."""
    have = set(_words(source))
    return [w for w in _words(fact)
            if w not in have and w.rstrip("s") not in have and w not in FUNCTION_WORDS]


def _wait_finished(d: E2EDaemon, pass_name: str, targets: list[str], timeout_s: float) -> None:
    """Wait until each target's job of the pass is done or dead; then require done."""
    marks = ",".join("?" * len(targets))

    def states() -> dict[str, str]:
        return dict(d.query(f"SELECT target, state FROM jobs WHERE pass = ? AND target IN ({marks})",
                            (pass_name, *targets)))

    wait_until(lambda: len(states()) == len(targets) and set(states().values()) <= {"done", "dead"},
               timeout_s=timeout_s, interval_s=0.5, message=f"{pass_name} jobs to finish")
    failed = {t: s for t, s in states().items() if s != "done"}
    assert not failed, (failed, d.query(f"SELECT target, last_error FROM jobs WHERE pass = ? "
                                        f"AND target IN ({marks})", (pass_name, *targets)))


def _fts_entries(d: E2EDaemon, seq: int) -> int:
    """Terms the full-text index holds for this row: fts5vocab reads SQLite's index itself; on
    PostgreSQL, the lexemes of the row's generated tsvector (what its GIN index holds)."""
    if d.db_url is not None:
        return int(d.scalar("SELECT coalesce(length(content_tsv), 0) FROM memories WHERE seq = ?", (seq,)))
    with d.db() as conn:
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.e2e_vocab "
                     "USING fts5vocab(main, memories_fts, instance)")
        return int(conn.execute("SELECT count(*) FROM temp.e2e_vocab WHERE doc = ?", (seq,)).fetchone()[0])


def _vectors(d: E2EDaemon, seq: int) -> tuple[int, int]:
    """(durable vectors, vector-index entries) of this row: vec0's table on SQLite; on
    PostgreSQL the HNSW index is over memory_vectors itself, so both count its rows."""
    stored = int(d.scalar("SELECT count(*) FROM memory_vectors WHERE memory_seq = ?", (seq,)))
    if d.db_url is not None:
        return stored, stored
    return stored, int(d.scalar("SELECT count(*) FROM memory_vec WHERE memory_seq = ?", (seq,)))


@dataclass
class LLMWorld:
    d: E2EDaemon
    source: str
    staging_15: str
    staging_16: str
    production_14: str
    _extracted: dict[str, Any] | None = None
    _erased: bool = False
    texts: list[str] = field(default_factory=list)

    def extracted(self) -> dict[str, Any]:
        """What extract made of the source, read once its facts are embedded (before any forget)."""
        if self._extracted is None:
            d = self.d
            _wait_finished(d, "extract", [self.source], LLM_TIMEOUT_S)
            facts = [r[0] for r in d.query(
                "SELECT src_id FROM memory_links WHERE dst_id = ? AND kind = 'cites'", (self.source,))]
            if facts:
                _wait_finished(d, "embed", facts, LLM_TIMEOUT_S)
            rows = [self.source, *facts]
            seqs = dict(d.query(f"SELECT id, seq FROM memories WHERE id IN ({','.join('?' * len(rows))})",
                                tuple(rows)))
            self._extracted = {
                "source": get(d, self.source, include=["entities"]),
                "facts": {f: get(d, f, include=["citations"]) for f in facts},
                "seqs": seqs,
                "fts": {m: _fts_entries(d, s) for m, s in seqs.items()},
                "vectors": {m: _vectors(d, s) for m, s in seqs.items()},
                "proposals": [p for p in proposals(d, "open") if set(p["memory_ids"]) & set(facts)],
            }
            self.texts += [row["content"] for row in self._extracted["facts"].values()]
        return self._extracted

    def erased(self) -> dict[str, Any]:
        """Forget the source by id over the agent socket and wait for the retention pass."""
        snapshot = self.extracted()
        if not self._erased:
            d = self.d
            answer = d.call("memory.forget", {"id": self.source})
            assert answer["matched"] >= 1
            wait_until(lambda: get(d, self.source)["status"] == "forgotten", timeout_s=LLM_TIMEOUT_S,
                       interval_s=0.25, message="the retention pass to erase the source")
            self._erased = True
        return snapshot


@pytest.fixture(scope="module")
def world(module_new_db_url: Callable[[], str | None]) -> Iterator[LLMWorld]:
    """The module's daemon with both bundled models and its memories, on each backend."""
    require_bundled_llm()
    root = Path(tempfile.mkdtemp(prefix="md-", dir="/tmp"))
    d = new_daemon(root, "llm", embedder="bundled", llm="bundled", log_level="debug",
                   config={"llm_timeout_s": 600.0, "model_timeout_s": 900.0}, db_url=module_new_db_url())
    try:
        d.start(timeout_s=MODEL_START_TIMEOUT_S)
        source = d.write(SOURCE, agent_id=AGENT_EXTRACT)["id"]
        ids = [d.write(text, agent_id=AGENT_REFLECT)["id"]
               for text in (STAGING_15, STAGING_16, PRODUCTION_14)]
        yield LLMWorld(d, source, *ids, texts=[SOURCE, STAGING_15, STAGING_16, PRODUCTION_14])
        stop_cleanly([d])
    finally:
        d.kill()
        shutil.rmtree(root, ignore_errors=True)


def test_reflect_proposes_a_supersede_for_a_changed_value_and_nothing_for_another_database(
        world: LLMWorld) -> None:
    d = world.d
    old, new, other = world.staging_15, world.staging_16, world.production_14
    _wait_finished(d, "reflect", [old, new, other], LLM_TIMEOUT_S)

    proposed = all_proposals(d)  # every status, from the file
    assert len([p for p in proposed if {old, new} <= set(p["memory_ids"])]) == 1, proposed
    supersedes = [p for p in proposals(d, "open")  # review.list on the operator socket
                  if p["kind"] == "supersede" and {old, new} <= set(p["memory_ids"])]
    assert len(supersedes) == 1, supersedes
    proposal = supersedes[0]
    assert proposal["memory_ids"] == [old, new]  # older -> newer, by record time
    assert proposal["status"] == "open" and proposal["created_by"] == "reflect"
    assert proposal["payload"]["old_id"] == old and proposal["payload"]["new_id"] == new
    assert proposal["payload"]["relation"] in ("updates", "contradicts")
    # The reason quotes the change as old value -> new value, whichever row's job proposed it.
    assert re.search(r"\b15 → 16\b", proposal["reason"]), proposal["reason"]
    # Similar is not contradictory: production's Postgres 14 is another database's version.
    assert [p for p in proposed if other in p["memory_ids"] and ({old, new} & set(p["memory_ids"]))] == []
    # Reflect proposes; it never changes a row.
    assert status_of_rows(d, [old, new, other]) == dict.fromkeys([old, new, other], "active")


def test_extract_derives_candidate_facts_that_cite_the_source_and_only_say_what_it_says(
        world: LLMWorld) -> None:
    snapshot = world.extracted()
    facts = snapshot["facts"]
    assert facts, "extract derived no fact from a two-clause note"
    for fact_id, row in facts.items():
        assert (row["status"], row["derived"], row["kind"]) == ("candidate", True, "fact"), row
        assert row["citations"] == [world.source]
        assert row["importance_raw"] == 0.4  # 0.8 x the source's 0.5 (docs/protocol.md)
        assert _ungrounded(row["content"], SOURCE) == [], row["content"]
        promote = [p for p in snapshot["proposals"] if p["memory_ids"] == [fact_id]]
        assert [(p["kind"], p["created_by"]) for p in promote] == [("promote", "extract")]
    contents = {row["content"] for row in facts.values()}
    assert contents >= SOURCE_CLAUSES, contents
    entities = {(e["surface"], e["type"]) for e in snapshot["source"]["entities"]}
    assert ("cache1.internal:6379", "host") in entities, entities
    assert snapshot["source"]["status"] == "active" and snapshot["source"]["derived"] is False


@pytest.mark.sqlite_only("reads the FTS5 index (fts5vocab), the vec0 index and the SQLite file's bytes; "
                         "erasure on PostgreSQL is checked by tests/postgres_store/test_pg_forget.py")
def test_retention_erases_a_forgotten_row_with_its_index_entries_and_derived_facts(world: LLMWorld) -> None:
    snapshot = world.erased()
    d = world.d
    facts = list(snapshot["facts"])
    seqs = snapshot["seqs"]
    # Positive control, taken before the forget: the rows were indexed and embedded.
    for memory_id in [world.source, *facts]:
        assert snapshot["fts"][memory_id] > 0 and snapshot["vectors"][memory_id] == (1, 1), memory_id

    shown = get(d, world.source)
    assert (shown["id"], shown["status"], shown["content"]) == (world.source, "forgotten", None)
    row = d.query("SELECT content, owner, agent_id, metadata FROM memories WHERE id = ?", (world.source,))
    assert row == [(None, "", None, "{}")]
    for memory_id in [world.source, *facts]:
        assert d.scalar("SELECT status FROM memories WHERE id = ?", (memory_id,)) == "forgotten"
        assert d.scalar("SELECT content FROM memories WHERE id = ?", (memory_id,)) is None
        assert _vectors(d, seqs[memory_id]) == (0, 0), memory_id
        assert _fts_entries(d, seqs[memory_id]) == 0, memory_id
    assert d.query("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?", (MARKER,)) == []
    assert d.scalar("SELECT count(*) FROM entity_mentions WHERE memory_id = ?", (world.source,)) == 0
    assert d.scalar("SELECT count(*) FROM entities WHERE lower(name) LIKE ?", (f"%{MARKER}%",)) == 0
    found = d.call("memory.search", {"query": "Quokkaflux Redis", "mode": "lexical",
                                     "agent_id": AGENT_EXTRACT, "include_candidates": True})
    assert found["results"] == []

    # The retention pass did it, and the audit trail says so without the text.
    erasers = d.query("SELECT actor FROM audit_events WHERE action = 'memory.erase' AND memory_id = ?",
                      (world.source,))
    assert erasers == [("pass:retention",)]
    texts = [SOURCE, *(snapshot["facts"][f]["content"] for f in facts)]
    audit = "\n".join(json.dumps(r) for r in d.query("SELECT * FROM audit_events")).lower()
    assert MARKER not in audit
    for text in texts:
        assert text.lower() not in audit
    assert d.call("daemon.status")["forget_requests_pending"] == 0
    # Nor do the file's pages: the WAL was checkpointed and freed pages are zeroed (secure_delete).
    for path in (d.db_path, d.db_path.with_name("memoryd.db-wal")):
        if path.exists():
            assert MARKER.encode() not in path.read_bytes().lower(), path


def test_the_daemon_log_never_holds_memory_text_over_write_embed_extract_and_forget(world: LLMWorld) -> None:
    world.erased()  # the whole cycle: written, embedded, extracted (facts derived), forgotten, erased
    d = world.d
    wait_until(lambda: '"pass_": "retention"' in d.stderr_text(), timeout_s=30,
               message="the retention pass's log line")
    log = d.stderr_text()
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    done = {(e.get("pass_"), e.get("event")) for e in events}
    # Positive control: the log covers the cycle, at debug level, JSON formatted.
    for name in ("embed", "extract", "retention"):
        assert (name, "pass.done") in done, name
    assert "--log-level debug" in log.splitlines()[0]
    assert "Using selector:" in log  # asyncio's own DEBUG record: the root logger is at debug

    lowered = log.lower()
    assert MARKER not in lowered
    assert "cache1.internal:6379" not in lowered
    for text in world.texts:
        assert text.lower() not in lowered, text
