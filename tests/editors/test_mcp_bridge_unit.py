"""The bridge's tool logic with a scripted client, for what a real daemon will not stage on demand.

test_mcp_tools.py runs the same tools against a real daemon; here a stand-in
client makes a search answer crowded with rows the binding may not read, and
makes a call crash, to show the recall over-fetch and the crash guard.
"""

from __future__ import annotations

import asyncio
from typing import Any

from memoryd.client import SearchResult
from memoryd.editors.mcp.binding import Binding
from memoryd.editors.mcp.bridge import Bridge
from memoryd.editors.mcp.tools import tool_specs

BINDING = Binding(agent_id="me", user_id="u", project="alpha", session_id="s")


def row(i: int, scope: str, **owner: str) -> dict[str, Any]:
    return {"id": f"mem_{i:04d}", "content": f"row {i}", "kind": "fact", "scope": scope, "status": "active",
            "score": 1.0 - i / 1000, "recorded_at": "2026-01-01T00:00:00.000000Z", **owner}


class CrowdedStore:
    """Search answers: the best 7 rows are org rows (not in the default scopes), then project rows."""

    def __init__(self) -> None:
        self.rows = [row(i, "org") for i in range(7)] + [row(i, "project", project="alpha")
                                                         for i in range(7, 30)]
        self.asked: list[int] = []

    async def search(self, query: str, *, k: int, **params: Any) -> SearchResult:
        self.asked.append(k)
        assert params.get("project") == "alpha" and "session_id" not in params  # only allowed keys
        return SearchResult.from_json({"results": self.rows[:k], "mode_used": "lexical", "notices": []})


class Crashing:
    async def status(self) -> Any:
        raise KeyError("boom")


def bridge(client: Any) -> Bridge:
    return Bridge(BINDING, client, tool_specs(["fact"], BINDING.scopes, BINDING.default_write_scope))


def test_recall_asks_for_more_until_k_readable_rows_remain() -> None:
    store = CrowdedStore()
    outcome = asyncio.run(bridge(store).call("recall", {"query": "rows", "k": 3}))
    assert not outcome.is_error and outcome.structured is not None
    assert [hit["id"] for hit in outcome.structured["results"]] == ["mem_0007", "mem_0008", "mem_0009"]
    # k=3: all 3 are org rows -> ask 2*3+3 = 9: 7 org, 2 readable -> ask 2*9+7 = 25: enough.
    assert store.asked == [3, 9, 25]


def test_a_crashing_handler_is_an_error_result_and_the_bridge_goes_on() -> None:
    b = bridge(Crashing())
    crashed = asyncio.run(b.call("memory_status", {}))
    assert crashed.is_error and "internal error in the memoryd bridge (KeyError)" in crashed.text
    unknown = asyncio.run(b.call("no_such_tool", {}))
    assert unknown.is_error and "unknown tool 'no_such_tool'" in unknown.text
