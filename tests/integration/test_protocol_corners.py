"""The corners of docs/protocol.md, each over a real daemon's real socket.

Every expected value is the literal the docs state: the connection limit
and its refusal frame, a crashed handler's 1003, empty lines, the duplicate
notice, a resent ``kind: "auto"`` under one idempotency key (1007), the
64-word query cap, the ``kind: "auto"`` search filter, unknown parameters,
and ``ttl_s``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from memoryd.service.client import ClientError
from tests.integration.harness import DaemonHandle, RawConnection, wait_until

#: docs/protocol.md "Connections": the refusal frame's message, as sent.
TOO_MANY = "too many connections; close idle ones and retry"
#: docs/protocol.md "memory.write": the duplicate answer's notice, as sent.
DUPLICATE_NOTICE = "an identical live memory exists in this scope; nothing was written"


@pytest.fixture
def daemon(module_daemon: DaemonHandle) -> DaemonHandle:
    return module_daemon


def error_of(daemon: DaemonHandle, method: str, params: dict[str, Any], *,
             admin: bool = False) -> ClientError:
    with pytest.raises(ClientError) as info:
        daemon.call(method, params, admin=admin)
    return info.value


def parse_time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


# -- the connection limit ---------------------------------------------------------------------------

@contextlib.contextmanager
def held_connections(path: Any, n: int) -> Iterator[list[RawConnection]]:
    """``n`` open connections, each shown to be served (a ping answered) before the next opens."""
    conns: list[RawConnection] = []
    try:
        for i in range(n):
            conn = RawConnection(path, timeout_s=30)
            conns.append(conn)
            conn.request("daemon.ping", req_id=i)
            reply = conn.read()
            assert reply.get("id") == i and "result" in reply, f"connection {i + 1} of {n} refused: {reply}"
        yield conns
    finally:
        for conn in conns:
            conn.close()


def pings(daemon: DaemonHandle) -> bool:
    """A new connection is served (False while it is refused for too many connections)."""
    try:
        return bool(daemon.call("daemon.ping")["pid"] == daemon.proc.pid)  # type: ignore[union-attr]
    except ClientError as exc:
        assert exc.message == TOO_MANY, exc
        return False
    except OSError:  # refused and closed before the request could be sent
        return False


def assert_refused_for_too_many(path: Any) -> None:
    """One more connection gets the documented 1003 frame with id null, then is closed."""
    with RawConnection(path, timeout_s=30) as extra:
        frame = extra.read()  # sent before the client says anything
        assert frame["id"] is None
        assert frame["error"]["code"] == 1003
        assert frame["error"]["message"] == TOO_MANY
        assert frame["error"]["data"]["name"] == "store_unavailable"
        with pytest.raises(ConnectionError):
            extra.read()  # and the daemon closed it
        assert extra.nothing_more_within(0.2) is False  # closed is not "no answer"


def test_one_connection_over_max_connections_gets_1003_and_is_closed(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    limit = 4
    daemon = start_daemon("limit4", config={"max_connections": limit})
    with held_connections(daemon.socket, limit) as conns:
        assert_refused_for_too_many(daemon.socket)
        # The limit is per socket: the operator socket still serves.
        assert daemon.call("daemon.ping", admin=True)["pid"] == daemon.proc.pid  # type: ignore[union-attr]
        # "at once": closing one held connection makes room for a new one.
        conns.pop().close()

        wait_until(lambda: pings(daemon), timeout_s=10, message="a freed slot to serve a new connection")
        # The held connections were never disturbed, and an open idle one is a non-answer
        # to the harness (the refused one above, closed by the daemon, was not).
        for i, conn in enumerate(conns):
            conn.request("daemon.ping", req_id=f"again-{i}")
            assert conn.read()["id"] == f"again-{i}"
        assert conns[0].nothing_more_within(0.3) is True


def test_the_default_limit_is_256_connections_per_socket(start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon("limit-default")
    with held_connections(daemon.socket, 256):
        assert_refused_for_too_many(daemon.socket)
    daemon.assert_alive()


# -- a crashed handler --------------------------------------------------------------------------------

def test_a_handler_that_crashes_is_answered_1003_naming_the_method_and_writes_nothing(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    """A real crash, not a simulated one: the entity tables are dropped behind the daemon's back
    (a damaged store no code path expects), so ``memory.get`` with ``include: ["entities"]``
    raises inside its handler. The answer is 1003 with the documented message, on the request's
    id, and the connection and the daemon go on serving."""
    daemon = start_daemon("crash")
    memory_id = daemon.write("The on-call rota lives in the ops wiki")["id"]
    with daemon.db() as conn:
        conn.execute("DROP TABLE entity_mentions")
    before = daemon.scalar("SELECT count(*) FROM audit_events")
    with RawConnection(daemon.socket) as conn:
        conn.request("memory.get", {"id": memory_id, "include": ["entities"]}, req_id="boom")
        reply = conn.read()
        assert reply["id"] == "boom"
        assert reply["error"]["code"] == 1003
        message = reply["error"]["message"]
        assert message.startswith("internal error in memory.get: ")
        assert message.endswith("; see the daemon log")
        assert "entity_mentions" in message
        # Positive control on the same connection: the same call without the broken part works.
        conn.request("memory.get", {"id": memory_id}, req_id="fine")
        assert conn.read()["result"]["content"] == "The on-call rota lives in the ops wiki"
    assert daemon.scalar("SELECT count(*) FROM audit_events") == before
    assert '"request.crashed"' in daemon.stderr_text()  # logged with its traceback
    daemon.assert_alive()


# -- framing ------------------------------------------------------------------------------------------

def test_empty_and_blank_lines_are_ignored_and_the_connection_stays_open(daemon: DaemonHandle) -> None:
    with RawConnection(daemon.socket) as conn:
        conn.send(b"\n\n   \n\t\r\n")
        assert conn.nothing_more_within(0.5)  # no answer to any of them, and not closed
        conn.send(b'\n{"jsonrpc":"2.0","id":"after","method":"daemon.ping"}\n\n\n')
        assert conn.read()["id"] == "after"
        assert conn.nothing_more_within(0.5)  # the trailing empty lines got no answer either
        conn.request("daemon.ping", req_id="still-open")
        assert conn.read()["id"] == "still-open"


# -- memory.write ---------------------------------------------------------------------------------------

def test_a_duplicate_write_carries_the_documented_notice_and_corroborates(daemon: DaemonHandle) -> None:
    first = daemon.write("The build cache is warmed nightly at 02:00", agent_id="dup-agent")
    assert first["notices"] == [] and "duplicate_of" not in first
    again = daemon.write("  The build cache is warmed nightly at 02:00 ", agent_id="dup-agent")
    assert again["notices"] == [DUPLICATE_NOTICE]
    assert again["duplicate_of"] == again["id"] == first["id"] and again["queued"] == []
    row = daemon.call("memory.get", {"id": first["id"], "include": ["history"]})
    assert row["corroboration"] == 2
    assert [e["action"] for e in row["history"]] == ["memory.write", "memory.corroborate"]
    assert daemon.count_content("The build cache is warmed nightly at 02:00") == 1
    # Another owner's identical text is not a duplicate (per scope and owner).
    other = daemon.write("The build cache is warmed nightly at 02:00", agent_id="dup-other")
    assert other["id"] != first["id"] and other["notices"] == []


def test_resending_with_kind_auto_spelled_out_under_the_same_key_is_1007(daemon: DaemonHandle) -> None:
    params = {"content": "Rotate the TLS certs before March", "agent_id": "idem-agent",
              "idempotency_key": "rotate-certs-1"}
    first = daemon.call("memory.write", params)
    replay = daemon.call("memory.write", params)
    assert replay == first  # the same params: the stored first result, unchanged
    err = error_of(daemon, "memory.write", {**params, "kind": "auto"})  # auto is the default, yet new params
    assert err.code == 1007
    assert err.data["field"] == "idempotency_key"
    assert daemon.count_content("Rotate the TLS certs before March") == 1


def test_ttl_s_sets_expires_at_and_an_expired_row_leaves_searches_without_as_of(daemon: DaemonHandle) -> None:
    text = "The maintenance banner is up until the deploy ends"
    written = daemon.write(text, agent_id="ttl-agent", ttl_s=2.5)
    row = daemon.call("memory.get", {"id": written["id"]})
    assert parse_time(row["expires_at"]) - parse_time(row["recorded_at"]) == timedelta(seconds=2.5)
    query = {"query": "maintenance banner deploy", "agent_id": "ttl-agent", "mode": "lexical"}
    found = daemon.call("memory.search", query)["results"]
    assert [r["id"] for r in found] == [written["id"]]  # visible before it expires
    remaining = (parse_time(row["expires_at"]) - datetime.now(parse_time(row["expires_at"]).tzinfo))
    time.sleep(max(0.0, remaining.total_seconds()) + 0.2)
    assert daemon.call("memory.search", query)["results"] == []
    # With as_of the store's belief at that time counts: the row is still there.
    as_of = daemon.call("memory.search", {**query, "as_of": row["expires_at"]})["results"]
    assert [r["id"] for r in as_of] == [written["id"]]
    assert daemon.call("memory.get", {"id": written["id"]})["content"] == text  # not erased, only expired


@pytest.mark.parametrize("ttl_s", [0, -5, "60", True])
def test_ttl_s_that_is_not_a_positive_number_is_invalid_params(daemon: DaemonHandle, ttl_s: Any) -> None:
    err = error_of(daemon, "memory.write", {"content": f"ttl {ttl_s!r}", "agent_id": "ttl-agent",
                                            "ttl_s": ttl_s})
    assert (err.code, err.data["field"]) == (-32602, "ttl_s")
    assert daemon.count_content(f"ttl {ttl_s!r}") == 0


# -- memory.search --------------------------------------------------------------------------------------

def lexical_ids(daemon: DaemonHandle, query: str, owner: dict[str, str]) -> list[str]:
    result = daemon.call("memory.search", {"query": query, "mode": "lexical", **owner})
    return [r["id"] for r in result["results"]]


def test_only_the_first_64_words_of_a_query_are_used(daemon: DaemonHandle) -> None:
    owner = {"agent_id": "cap-agent"}
    at_64 = daemon.write("zebrafish tank maintenance schedule", **owner)["id"]
    at_65 = daemon.write("okapi enclosure heating repairs", **owner)["id"]
    filler = [f"filler{i}" for i in range(63)]  # words found in no memory
    query = " ".join([*filler, "zebrafish", "okapi"])  # zebrafish is word 64, okapi word 65
    assert lexical_ids(daemon, query, owner) == [at_64]
    # Positive control: okapi is found when it is within the first 64 words.
    early = " ".join([*filler[:62], "okapi", "zebrafish"])
    assert set(lexical_ids(daemon, early, owner)) == {at_64, at_65}


def test_kind_auto_is_a_search_filter(daemon: DaemonHandle) -> None:
    owner = {"agent_id": "kind-agent"}
    auto = daemon.write("Grafana dashboards are provisioned from the infra repo", **owner)["id"]
    fact = daemon.write("Grafana listens on port 3000 in staging", kind="fact", **owner)["id"]
    query = {"query": "grafana", "mode": "lexical", **owner}
    assert {r["id"] for r in daemon.call("memory.search", query)["results"]} == {auto, fact}
    only_auto = daemon.call("memory.search", {**query, "kind": "auto"})["results"]
    assert [(r["id"], r["kind"]) for r in only_auto] == [(auto, "auto")]
    only_fact = daemon.call("memory.search", {**query, "kind": "fact"})["results"]
    assert [(r["id"], r["kind"]) for r in only_fact] == [(fact, "fact")]


# -- unknown parameters ----------------------------------------------------------------------------------

UNKNOWN = [
    pytest.param("memory.search", {"query": "grafana", "agent_id": "a", "scopes": "agent"}, "scopes", False,
                 id="search"),
    pytest.param("memory.get", {"id": "mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB", "includes": ["history"]}, "includes",
                 False, id="get"),
    pytest.param("memory.supersede", {"old_id": "mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB", "content": "new text",
                                      "agent_id": "a", "because": "typo"}, "because", False, id="supersede"),
    pytest.param("memory.forget", {"id": "mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB", "tombstones": False},
                 "tombstones", False, id="forget"),
    pytest.param("review.list", {"status": "open", "max": 5}, "max", True, id="review.list"),
    pytest.param("review.decide", {"id": "prp_01JD3Z8W6KQ2V7N4X9R5T1Y0AB", "decision": "approve",
                                   "comment": "ok"}, "comment", True, id="review.decide"),
]


@pytest.mark.parametrize(("method", "params", "unknown", "admin"), UNKNOWN)
def test_unknown_parameter_is_refused_naming_it(daemon: DaemonHandle, method: str, params: dict[str, Any],
                                                unknown: str, admin: bool) -> None:
    before = daemon.scalar("SELECT count(*) FROM audit_events")
    err = error_of(daemon, method, params, admin=admin)
    assert err.code == -32602
    assert err.data["field"] == unknown
    assert daemon.scalar("SELECT count(*) FROM audit_events") == before
    # Positive control: the same call without the unknown parameter gets past parameter checks.
    known = {k: v for k, v in params.items() if k != unknown}
    try:
        daemon.call(method, known, admin=admin)
    except ClientError as exc:
        assert exc.code != -32602, exc  # e.g. 1002 for the made-up id, never invalid params
