"""A real SQLite store built through a daemon's socket (writes in every scope, idempotency
keys, a supersede, a forget with its tombstone, vectors from the bundled embedder) and the
cognition passes' store functions (proposals, citations, entities, extractions), shared by
the module's copy tests; and how they run and compare copies."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from memoryd.clock import to_rfc3339
from memoryd.store import entities, links, proposals
from memoryd.store.copy.tables import TABLES, adapt_row
from memoryd.store.engine import create_store_engine
from memoryd.store.schema import extractions
from tests.integration.harness import SRC_DIR
from tests.search._daemon import SearchDaemon, stop_cleanly

#: scope -> the owner key and value of its rows.
OWNERS = {"agent": ("agent_id", "a1"), "user": ("user_id", "u1"), "project": ("project", "p1"),
          "session": ("session_id", "s1"), "org": (None, None)}
TOPICS = [
    "The staging database listens on port 5433, not 5432.",
    "Run the smoke tests against staging before tagging a release.",
    "Squash-merge feature branches and keep a linear history on main.",
    "The nightly backup job keeps seven daily snapshots in the cold bucket.",
    "Deploys to production happen on Tuesdays after the change review.",
    "The search service caches embeddings for one hour in Redis.",
]
#: A phrase of each scope's own memory, found by search on the copy.
PROBE = "{scope} owner note: the {scope} keyboard layout is dvorak"


def owner_params(scope: str) -> dict[str, str]:
    key, value = OWNERS[scope]
    return {"scope": scope, **({key: value} if key else {})}


@pytest.fixture(scope="session")
def source_store() -> Iterator[dict[str, Any]]:
    """The seeded SQLite store (its daemon stopped): {"url", "dir", "ids"}."""
    root = Path(tempfile.mkdtemp(prefix="mdcp-", dir="/tmp"))
    daemon = SearchDaemon(root, "src", "bundled").start()
    ids: dict[str, str] = {}
    try:
        for scope in OWNERS:
            for n, topic in enumerate(TOPICS):
                ids[f"{scope}{n}"] = daemon.write(f"{topic} ({scope})", kind="fact", **owner_params(scope),
                                                  idempotency_key=f"{scope}-{n}")
            ids[f"{scope}_probe"] = daemon.write(PROBE.format(scope=scope), kind="preference",
                                                 **owner_params(scope))
        out = daemon.call("memory.supersede", {"old_id": ids["agent0"], "agent_id": "a1",
                                               "content": "The staging database now listens on 6543.",
                                               "reason": "moved"})
        ids["agent0_new"] = out["new_id"]
        daemon.call("memory.forget", {"id": ids["user1"], "reason": "asked", "tombstone": True})
        daemon.wait_embedded()
        stop_cleanly(daemon)
        url = daemon.db_url
        _add_cognition_rows(url, ids)
        yield {"url": url, "dir": daemon.data_dir, "ids": ids, "root": root}
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def _add_cognition_rows(url: str, ids: dict[str, str]) -> None:
    """What the LLM passes would write: a derived memory's citations, a proposal, entities."""
    now = datetime.now(UTC)
    at = to_rfc3339(now)
    engine = create_store_engine(url)
    try:
        with engine.begin() as conn:
            links.add(conn, ids["project1"], ids["project2"], "cites", at)
            links.add(conn, ids["project1"], ids["project3"], "cites", at)
            proposals.propose(conn, kind="merge", memory_ids=[ids["org1"], ids["org2"]], reason="same topic",
                              payload={"merged_text": "one note"}, created_by="consolidate", now=now)
            ent = entities.create(conn, "project", "p1", "Redis", "redis", "tool", b"\x00\x01" * 8, at)
            entities.add_alias(conn, ent, "redis cache")
            entities.mention(conn, ent, ids["project5"], "Redis")
            conn.execute(extractions.insert().values(
                memory_id=ids["project5"], content_hash="h", extracted_at=at, method="test",
                entities_kept=1, facts_kept=0, dropped_ungrounded=0, dropped_vocabulary=0))
    finally:
        engine.dispose()


def run_copy(source: str, target: str, *extra: str, env: dict[str, str] | None = None,
             timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    """``memoryd store copy`` in a subprocess running the source tree under test."""
    import os

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    full_env.update(PYTHONPATH=str(SRC_DIR), **(env or {}))
    return subprocess.run([sys.executable, "-m", "memoryd", "store", "copy", "--from", source, "--to", target,
                           *extra], env=full_env, capture_output=True, text=True, timeout=timeout_s,
                          check=False, stdin=subprocess.DEVNULL)


def table_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every copied table's rows, as the copy carries them, sorted by key in Python (so both
    backends' collations give one order)."""
    engine = create_store_engine(url)
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        with engine.connect() as conn:
            for copied in TABLES:
                rows = [adapt_row(copied, dict(r)) for r in
                        conn.execute(select(copied.table).where(copied.rows_filter())).mappings()]
                out[copied.name] = sorted(rows, key=lambda r, c=copied: tuple(r[k] for k in c.key))  # type: ignore[misc]
    finally:
        engine.dispose()
    return out
