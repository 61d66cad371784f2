"""The console's pages over a real daemon (TestClient with a session): what each shows and does."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

pytest.importorskip("starlette", reason="the console extra (starlette, jinja2, uvicorn) is not installed")

from starlette.testclient import TestClient

from memoryd.client.aio import AsyncClient
from memoryd.console.app import create_app
from memoryd.console.security import Secrets
from tests.console.conftest import propose_supersede
from tests.integration.harness import DaemonHandle

PORT = 48766
ORIGIN = f"http://127.0.0.1:{PORT}"


@pytest.fixture
def client(console_daemon: DaemonHandle) -> Iterator[TestClient]:
    secrets_ = Secrets()
    app = create_app(lambda: AsyncClient(console_daemon.admin_socket), secrets_, port=PORT)
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as tc:
        assert tc.get(f"/?token={secrets_.token}").status_code == 303
        yield tc


def csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found
    return found.group(1)


def test_supersede_from_a_memory_page_replaces_it_and_keeps_the_old_one(
        console_daemon: DaemonHandle, client: TestClient) -> None:
    old = console_daemon.write("The on-call rotation changes on Mondays", user_id="u7", scope="user")["id"]
    page = client.get(f"/memories/{old}").text
    answer = client.post(f"/memories/{old}/supersede", headers={"origin": ORIGIN},
                         data={"csrf": csrf(page), "content": "The on-call rotation changes on Tuesdays",
                               "reason": "moved"})
    assert answer.status_code == 303
    new_id = answer.headers["location"].rsplit("/", 1)[1]
    new = console_daemon.call("memory.get", {"id": new_id})
    assert new["content"] == "The on-call rotation changes on Tuesdays"
    assert (new["scope"], new["user_id"]) == ("user", "u7")  # written as the old row's owner
    assert console_daemon.call("memory.get", {"id": old})["status"] == "superseded"
    assert "Tuesdays" in client.get(f"/memories/{new_id}").text


def test_the_list_filters_by_owner_status_and_recorded_time(console_daemon: DaemonHandle,
                                                             client: TestClient) -> None:
    first = console_daemon.write("Listing probe one: the wiki moved", agent_id="lister")
    second = console_daemon.write("Listing probe two: the wiki is read-only", agent_id="lister")
    both = client.get("/memories?agent_id=lister").text
    assert "probe one" in both and "probe two" in both
    assert "probe one" not in client.get("/memories?agent_id=someone-else").text
    later = client.get("/memories", params={"agent_id": "lister", "recorded_after": second["recorded_at"]})
    assert "probe two" in later.text and "probe one" not in later.text
    earlier = client.get("/memories", params={"agent_id": "lister", "recorded_before": second["recorded_at"]})
    assert "probe one" in earlier.text and "probe two" not in earlier.text
    assert first["id"] in earlier.text
    bad = client.get("/memories", params={"agent_id": "lister", "recorded_after": "last week"})
    assert bad.status_code == 400 and "recorded_after" in bad.text


def test_an_unknown_memory_or_proposal_is_a_404_page_with_the_daemons_reason(client: TestClient) -> None:
    missing = client.get("/memories/mem_01ZZZZZZZZZZZZZZZZZZZZZZZZ")
    assert missing.status_code == 404 and "no memory with id" in missing.text
    proposal = client.get("/review/prp_01ZZZZZZZZZZZZZZZZZZZZZZZZ")
    assert proposal.status_code == 404 and "memoryd review list" in proposal.text


def test_rejecting_several_proposals_at_once_reports_each(console_daemon: DaemonHandle,
                                                          client: TestClient) -> None:
    pids = []
    for n in range(2):
        a = console_daemon.write(f"Batch {n}: the queue limit is 10", agent_id="rev")["id"]
        b = console_daemon.write(f"Batch {n}: the queue limit is 20", agent_id="rev")["id"]
        pids.append(propose_supersede(console_daemon, a, b, f"batch {n}"))
    page = client.get("/review").text
    assert all(p in page for p in pids)
    answer = client.post("/review/decide", headers={"origin": ORIGIN},
                         data={"csrf": csrf(page), "ids": pids, "decision": "reject", "note": "both true"})
    assert answer.status_code == 200
    for pid in pids:
        assert f"{pid}</span>: rejected" in answer.text
        got = console_daemon.call("review.get", {"id": pid}, admin=True)["proposal"]
        assert (got["status"], got["note"]) == ("rejected", "both true")
