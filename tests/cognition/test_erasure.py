"""Forget after the real passes have spread a memory around (bundled models, slow).

A memory takes part in a collapse (consolidate), a merge proposal
(consolidate), a supersede proposal (reflect, judged by the bundled LLM), an
extraction (extract) and a failed job; then it is forgotten by id. Its text
must be absent from every file of the data directory and from every
method's answers, while the memories that were not forgotten keep theirs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memoryd.queue import jobs as jobq
from tests.integration.harness import DaemonHandle, wait_until
from tests.lifecycle.helpers import engine_on

# The bundled LLM extracts and judges on the CPU: minutes on a loaded 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

TEXT = "The zanzibar-quokka artifact store listens on port 7731"
COPY = TEXT + "."
NEAR = "The zanzibar-quokka artifact store now listens on port 7731"
CHANGED = "The zanzibar-quokka artifact store listens on port 7732"


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def _open_proposals(daemon: DaemonHandle) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = daemon.call("review.list", {"limit": 100}, admin=True)["proposals"]
    return found


def test_forget_reaches_collapsed_copies_proposals_derived_rows_and_failed_jobs(
        start_llm_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_llm_daemon("bundled", config={"retention_interval_s": 3600})
    ids = {name: daemon.write(text, agent_id="agent-a", kind="fact")["id"]
           for name, text in (("text", TEXT), ("copy", COPY), ("near", NEAR), ("changed", CHANGED))}

    def spread() -> bool:
        kinds = {(p["kind"], tuple(sorted(p["memory_ids"]))) for p in _open_proposals(daemon)}
        merged = ("merge", tuple(sorted([ids["text"], ids["near"]]))) in kinds
        superseding = ("supersede", tuple(sorted([ids["text"], ids["changed"]]))) in kinds
        collapsed = daemon.call("memory.get", {"id": ids["copy"]})["status"] == "superseded"
        # Every pass done for all four, so no LLM batch holds the runner when forget arrives.
        settled = all(not daemon.call("memory.get", {"id": i})["pending"] for i in ids.values())
        return merged and superseding and collapsed and settled

    wait_until(spread, timeout_s=1200, interval_s=1.0,
               message="collapse, merge and supersede proposals, and extraction of the memory")
    with engine_on(daemon) as engine, engine.begin() as conn:
        jobq.enqueue(conn, "classify", ids["text"], now=time.time() + 3600, max_attempts=5)
    with engine_on(daemon) as engine, engine.begin() as conn:
        claimed = jobq.claim(conn, "classify", owner="test", now=time.time() + 7200, lease_s=60, limit=50)
        job = next(j for j in claimed if j.target == ids["text"])
        jobq.fail(conn, job, f"ValueError: the answer for {TEXT!r} was invalid", now=time.time() + 7200)
        jobq.release(conn, [j for j in claimed if j is not job], now=time.time())
    assert _files_holding(daemon.data_dir, TEXT.encode())  # positive control: the text is on disk

    reply = daemon.call("memory.forget", {"id": ids["text"], "reason": "test erasure"})
    assert reply["matched"] == 2  # the memory and the copy collapsed into it

    def erased() -> bool:
        rows = [daemon.call("memory.get", {"id": ids[n]}) for n in ("text", "copy")]
        return all(r["status"] == "forgotten" for r in rows) and not _files_holding(
            daemon.data_dir, TEXT.encode())

    # A hang guard: the retention job waits behind whatever batch the runner holds.
    wait_until(erased, timeout_s=600, interval_s=0.5, message="the memory and its copy to be erased")
    proposals_seen = [p for status in ("open", "approved", "rejected", "stale", "withdrawn")
                      for p in daemon.call("review.list", {"status": status}, admin=True)["proposals"]]
    assert all(TEXT not in str(p) and "7731" not in p["reason"] for p in proposals_seen
               if ids["text"] in p["memory_ids"])
    answers = [
        daemon.call("memory.search", {"query": "zanzibar-quokka artifact store port", "agent_id": "agent-a",
                                      "k": 50, "include_candidates": True}),
        daemon.call("memory.get", {"id": ids["text"], "include": ["history", "links", "citations"]}),
        daemon.call("queue.list", {"limit": 1000}, admin=True),
        daemon.call("daemon.status"),
        proposals_seen,
    ]
    for answer in answers:
        assert TEXT not in str(answer) and COPY not in str(answer)
    # What was not forgotten keeps its text (positive controls).
    assert daemon.call("memory.get", {"id": ids["near"]})["content"] == NEAR
    assert daemon.call("memory.get", {"id": ids["changed"]})["content"] == CHANGED
    assert daemon.stop() == 0
    assert _files_holding(daemon.data_dir, TEXT.encode()) == []
    assert _files_holding(daemon.data_dir, NEAR.encode())
