"""The daemon-side methods the console reads: review.get, metrics.series, memory.list's time filter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from memoryd.service.client import ClientError
from tests.console.conftest import CONSOLE_CONFIG, propose_supersede
from tests.integration.harness import DaemonHandle, wait_until
from tests.lifecycle.helpers import error_of


def test_review_get_answers_one_proposal_with_its_memories_in_any_status(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=CONSOLE_CONFIG)
    old = daemon.write("The build cache lives on cache-01", agent_id="a1")["id"]
    new = daemon.write("The build cache lives on cache-02", agent_id="a1")["id"]
    pid = propose_supersede(daemon, old, new, "the cache host moved")
    got = daemon.call("review.get", {"id": pid}, admin=True)
    assert got["proposal"]["id"] == pid and got["proposal"]["status"] == "open"
    assert got["proposal"]["reason"] == "the cache host moved"
    assert got["memories"][old]["content"] == "The build cache lives on cache-01"
    assert got["memories"][new]["content"] == "The build cache lives on cache-02"
    daemon.call("review.decide", {"id": pid, "decision": "approve", "note": "yes"}, admin=True)
    decided = daemon.call("review.get", {"id": pid}, admin=True)  # decided ones too, not only open
    assert decided["proposal"]["status"] == "approved" and decided["proposal"]["note"] == "yes"
    assert decided["memories"][old]["status"] == "superseded"


def test_review_get_refuses_an_unknown_id_and_unknown_params_and_is_absent_on_the_agent_socket(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=CONSOLE_CONFIG)
    with pytest.raises(ClientError) as missing:
        daemon.call("review.get", {"id": "prp_" + "0" * 26}, admin=True)
    assert missing.value.code == 1002 and "memoryd review list" in missing.value.message
    with pytest.raises(ClientError) as extra:
        daemon.call("review.get", {"id": "prp_x", "status": "open"}, admin=True)
    assert extra.value.code == -32602
    assert error_of(daemon, "review.get", {"id": "prp_x"}).code == -32601


def test_metrics_series_counts_writes_and_searches_between_readings(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=CONSOLE_CONFIG)
    for i in range(5):
        daemon.write(f"Fact number {i} about the deploy window", agent_id="a1")
    daemon.call("memory.search", {"query": "deploy window", "agent_id": "a1", "mode": "lexical"})

    def busy_points() -> list[dict[str, Any]] | None:
        points = daemon.call("metrics.series", {}, admin=True)["points"]
        return points if sum(p["writes_per_s"] * p["step_s"] for p in points) > 4.5 \
            and any(p["searches_per_s"] > 0 for p in points) else None

    points = wait_until(busy_points, timeout_s=10, message="the writes and the search to show in the series")
    last = points[-1]
    assert last["rss_bytes"] > 10 * 2**20 and last["cpu_percent"] >= 0
    assert "embed" in last["queues"] and last["queues"]["embed"] >= 5  # --embedder none: the jobs wait
    assert set(last["processed_per_s"]) >= {"embed", "classify"}
    # The writes are counted once: the rates times their steps add up to the writes made.
    assert round(sum(p["writes_per_s"] * p["step_s"] for p in points)) == 5
    result = daemon.call("metrics.series", {"window": "hour"}, admin=True)
    assert result["interval_s"] == 0.2 and result["capacity"] == 360
    day = daemon.call("metrics.series", {"window": "day"}, admin=True)
    assert day["interval_s"] == pytest.approx(6.0) and day["capacity"] == 288
    with pytest.raises(ClientError) as bad:
        daemon.call("metrics.series", {"window": "week"}, admin=True)
    assert bad.value.code == -32602


def test_memory_list_filters_by_recorded_time(start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=CONSOLE_CONFIG)
    first = daemon.write("The first note of the morning", agent_id="a1")
    second = daemon.write("The second note of the morning", agent_id="a1")
    after = daemon.call("memory.list", {"agent_id": "a1", "recorded_after": second["recorded_at"]})
    assert [m["id"] for m in after["memories"]] == [second["id"]]
    before = daemon.call("memory.list", {"agent_id": "a1", "recorded_before": second["recorded_at"]})
    assert [m["id"] for m in before["memories"]] == [first["id"]]
    both = daemon.call("memory.list", {"agent_id": "a1"})  # positive control: no filter, both rows
    assert {m["id"] for m in both["memories"]} == {first["id"], second["id"]}
    with pytest.raises(ClientError) as bad:
        daemon.call("memory.list", {"agent_id": "a1", "recorded_after": "yesterday"})
    assert bad.value.code == -32602 and bad.value.data.get("field") == "recorded_after"
