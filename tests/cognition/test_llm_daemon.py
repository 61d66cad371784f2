"""The LLM-backed passes in a real daemon: paused without a model, citing sources with one."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import DaemonHandle, wait_until

pytestmark = pytest.mark.slow


def get(d: DaemonHandle, memory_id: str, **params: Any) -> dict[str, Any]:
    result: dict[str, Any] = d.call("memory.get", {"id": memory_id, **params})
    return result


def test_without_an_llm_extract_and_reflect_stay_queued_and_nothing_is_derived(
        start_llm_daemon: Callable[..., DaemonHandle]) -> None:
    d = start_llm_daemon("none")
    a = d.write("Terraform is on 1.5.7 in every workspace.")["id"]
    b = d.write("Terraform is on 1.7.4 in every workspace.")["id"]
    # Positive control: the embedder works, so embed runs and chains reflect.
    wait_until(lambda: all("embed" not in get(d, m)["pending"] for m in (a, b)), timeout_s=180,
               message="embed to finish")
    time.sleep(2.0)  # give the runner cycles in which it could (wrongly) run extract or reflect
    status = d.call("daemon.status")
    for name in ("extract", "reflect"):
        entry = status["passes"][name]
        assert entry["state"] == "paused", entry
        assert "LLM" in entry["reason"], entry
        queue = status["queues"][name]
        assert queue["ready"] + queue["failed"] == 2 and queue["leased"] == 0 and queue["dead"] == 0, queue
        assert entry["processed_total"] == 0
    for m in (a, b):
        assert {"extract", "reflect"} <= set(get(d, m)["pending"])
    assert d.scalar("SELECT count(*) FROM memories WHERE derived = 1") == 0
    assert d.scalar("SELECT count(*) FROM memories") == 2
    for table in ("entities", "entity_mentions", "extractions", "proposals"):
        assert d.scalar(f"SELECT count(*) FROM {table}") == 0, table


def test_derived_facts_cite_live_sources_shown_by_memory_get(
        start_llm_daemon: Callable[..., DaemonHandle], bundled_gguf_path: Path) -> None:
    # bundled_gguf_path: skips when the model packages are missing. The bundled model needs
    # ~10-150 s per extraction on a 2-core machine, depending on what else runs there.
    d = start_llm_daemon("bundled", config={"llm_timeout_s": 600.0, "model_timeout_s": 900.0})
    source = d.write("Prod runs Redis 7 on cache1.internal:6379; staging is still on Redis 6.")["id"]
    wait_until(lambda: "extract" not in get(d, source)["pending"], timeout_s=900, interval_s=1.0,
               message="extract to finish")
    assert d.scalar("SELECT count(*) FROM jobs WHERE pass = 'extract' AND state = 'done'") == 1
    derived = [r[0] for r in d.query("SELECT id FROM memories WHERE derived = 1")]
    assert derived, "the bundled model derived no grounded fact from the note"
    for fact_id in derived:
        fact = get(d, fact_id, include=["citations"])
        assert fact["derived"] is True and fact["status"] == "candidate"
        assert fact["citations"] == [source]
        cited = get(d, fact["citations"][0])
        assert cited["status"] == "active" and cited["derived"] is False
    # Candidates stay out of search unless asked for.
    found = d.call("memory.search", {"query": "Redis", "mode": "lexical", "agent_id": "agent-a"})
    assert {r["id"] for r in found["results"]} == {source}
    found = d.call("memory.search", {"query": "Redis", "mode": "lexical", "agent_id": "agent-a",
                                     "include_candidates": True})
    assert set(derived) <= {r["id"] for r in found["results"]}
    assert d.scalar("SELECT count(*) FROM entity_mentions WHERE memory_id = ?", (source,)) >= 1
