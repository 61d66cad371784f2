"""memory.search reads time expressions in the query and boosts rows that happened then.

A real daemon with the bundled embedder. Three deploy notes differ only in
their wording and their ``occurred_at`` (March, May, July 2024); a fourth has
no ``occurred_at`` and falls back to ``recorded_at`` (now). The same query
text is asked with different reference times (``time_ref``), so any change in
the order comes from the time boost alone. Expected windows are literal dates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memoryd.client.errors import ClientError
from tests.search._daemon import stop_cleanly

AGENT = "time-agent"
ROWS = {
    "march": ("The billing service deploy to production went out, with the retry fix.",
              "2024-03-12T10:00:00Z"),
    # Fewer of the query's words than the March row: without the boost it ranks below it.
    "may": ("Billing went live in prod.", "2024-05-14T10:00:00Z"),
    "july": ("Billing service went to production again after the rollback.", "2024-07-02T10:00:00Z"),
    "undated": ("Production deploy of the billing service is scheduled by the release bot.", None),
}
QUERY = "When did the billing service deploy to production happen in May?"


@pytest.fixture(scope="module")
def daemon(spawn: Any, backend: str, module_new_db_url: Callable[[], str | None]) -> Iterator[Any]:
    d = spawn(f"search-time-{backend}", embedder="bundled", db_url=module_new_db_url())
    items = []
    for content, occurred in ROWS.values():
        item: dict[str, Any] = {"content": content, "agent_id": AGENT, "kind": "event"}
        if occurred:
            item["occurred_at"] = occurred
        items.append(item)
    ids = d.write_many(items)
    d.wait_embedded()
    yield {"daemon": d, "ids": dict(zip(ROWS, ids, strict=True))}
    stop_cleanly(d)


def _names(result: dict[str, Any], ids: dict[str, str]) -> list[str]:
    by_id = {v: k for k, v in ids.items()}
    return [by_id[r["id"]] for r in result["results"]]


def test_in_may_boosts_the_may_row_without_hiding_others(daemon: dict[str, Any]) -> None:
    d, ids = daemon["daemon"], daemon["ids"]
    # Read against 2026, "in May" is May 2026: no row is inside, the order is the fusion's own.
    control = d.search(QUERY, agent_id=AGENT, k=10, explain=True, time_ref="2026-06-10T12:00:00Z")
    assert control["mode_used"] == "hybrid"
    assert "time: 'in May' read as 2026-05-01..2026-06-01 (boost)" in control["notices"]
    assert all(r["explain"]["time_boost"] == 1.0 for r in control["results"])
    control_order = _names(control, ids)
    assert control_order[-1] == "may", "the control must rank the May row below the others"

    boosted = d.search(QUERY, agent_id=AGENT, k=10, explain=True, time_ref="2024-09-01T00:00:00Z")
    assert "time: 'in May' read as 2024-05-01..2024-06-01 (boost)" in boosted["notices"]
    order = _names(boosted, ids)
    assert order.index("may") < control_order.index("may"), (control_order, order)
    assert sorted(order) == sorted(control_order) == sorted(ROWS), "a boost never hides a row"
    boosts = {name: r["explain"]["time_boost"] for name, r in zip(order, boosted["results"], strict=True)}
    assert boosts == {"may": 1.5, "march": 1.0, "july": 1.0, "undated": 1.0}
    # The boost multiplies the May row's score by 1.5 and leaves the others' as they were.
    before = {name: r["score"] for name, r in zip(control_order, control["results"], strict=True)}
    after = {name: r["score"] for name, r in zip(order, boosted["results"], strict=True)}
    assert after["may"] == pytest.approx(before["may"] * 1.5, rel=1e-3)
    assert all(after[n] == pytest.approx(before[n], rel=1e-3) for n in ("march", "july", "undated"))


def test_null_occurred_at_falls_back_to_recorded_at(daemon: dict[str, Any]) -> None:
    d, ids = daemon["daemon"], daemon["ids"]
    # No time_ref, no as_of: "today" is the server's today, when every row was recorded;
    # only the row without occurred_at is dated by its recorded_at.
    result = d.search("billing service production deploy today", agent_id=AGENT, k=10, explain=True)
    boosts = {name: r["explain"]["time_boost"]
              for name, r in zip(_names(result, ids), result["results"], strict=True)}
    assert boosts == {"undated": 1.5, "march": 1.0, "may": 1.0, "july": 1.0}
    assert any(n.startswith("time: 'today' read as ") and n.endswith(" (boost)") for n in result["notices"])


def test_as_of_is_the_reference_when_time_ref_is_absent(daemon: dict[str, Any]) -> None:
    result = daemon["daemon"].search(QUERY, agent_id=AGENT, k=10, as_of="2030-08-01T00:00:00Z")
    assert "time: 'in May' read as 2030-05-01..2030-06-01 (boost)" in result["notices"]
    assert len(result["results"]) == len(ROWS)


def test_single_leg_modes_say_the_boost_is_not_applied(daemon: dict[str, Any]) -> None:
    result = daemon["daemon"].search(QUERY, agent_id=AGENT, k=10, mode="lexical",
                                     time_ref="2024-09-01T00:00:00Z")
    assert result["mode_used"] == "lexical"
    assert ("time: 'in May' read as 2024-05-01..2024-06-01 "
            "(not applied: the time boost is a hybrid-mode stage)") in result["notices"]


def test_query_without_time_has_no_time_notice_or_stage(daemon: dict[str, Any]) -> None:
    result = daemon["daemon"].search("billing service production deploy", agent_id=AGENT, k=10,
                                     explain=True, time_ref="2024-09-01T00:00:00Z")
    assert not any(n.startswith("time:") for n in result["notices"])
    assert all("time_boost" not in r["explain"] for r in result["results"])


@pytest.mark.parametrize("bad", ["2024-05-01", "yesterday", 20240501, "2024-05-01T00:00:00"])
def test_bad_time_ref_is_refused_naming_the_field(daemon: dict[str, Any], bad: Any) -> None:
    with pytest.raises(ClientError) as err:
        daemon["daemon"].search(QUERY, agent_id=AGENT, time_ref=bad)
    assert err.value.code == -32602
    assert err.value.data["field"] == "time_ref"
