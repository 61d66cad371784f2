"""The review queue: proposals seeded in the daemon's store, decided over the operator socket and the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from memoryd.clock import to_rfc3339
from memoryd.store import proposals
from memoryd.store.ids import new_memory_id
from tests.integration.harness import DaemonHandle, run_cli
from tests.lifecycle.helpers import QUIET, engine_on, error_of, get, insert_candidate


def _propose(daemon: DaemonHandle, kind: str, memory_ids: Sequence[str], payload: dict[str, Any],
             reason: str = "seeded by the lifecycle suite") -> str | None:
    """proposals.propose on the daemon's own file, as a deriving pass would call it."""
    with engine_on(daemon) as engine, engine.begin() as conn:
        return proposals.propose(conn, kind=kind, memory_ids=memory_ids, reason=reason, payload=payload,
                                 created_by="reflect", now=datetime.now(UTC))


def _listed(daemon: DaemonHandle, status: str = "open") -> dict[str, dict[str, Any]]:
    found = daemon.call("review.list", {"status": status}, admin=True)["proposals"]
    return {p["id"]: p for p in found}


def _ids(listed: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(listed)


def _candidate(daemon: DaemonHandle, content: str, agent_id: str = "agent-a") -> str:
    memory_id = new_memory_id()
    with engine_on(daemon) as engine:
        insert_candidate(engine, memory_id, content, agent_id=agent_id, at=to_rfc3339(datetime.now(UTC)))
    return memory_id


def test_review_list_shows_seeded_proposals_on_the_admin_socket_only(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    a = daemon.write("Service A listens on port 8080", agent_id="agent-a")["id"]
    b = daemon.write("Service A listens on port 9090", agent_id="agent-a")["id"]
    c = _candidate(daemon, "agent-a prefers small pull requests")

    sup = _propose(daemon, "supersede", [a, b], {"old_id": a, "new_id": b}, reason="port changed")
    pro = _propose(daemon, "promote", [c], {})
    assert sup and pro

    listed = _listed(daemon)
    assert set(listed) == {sup, pro}
    assert listed[sup]["kind"] == "supersede"
    assert sorted(listed[sup]["memory_ids"]) == sorted([a, b])
    assert listed[sup]["reason"] == "port changed"
    assert listed[sup]["created_by"] == "reflect"
    assert listed[sup]["created_at"]
    assert daemon.call("daemon.status")["reviews_open"] == 2
    for method, params in (("review.list", {}), ("review.decide", {"id": sup, "decision": "approve"})):
        assert error_of(daemon, method, params).code == -32601  # as if it did not exist
    assert get(daemon, a)["status"] == "active"  # the refused decide changed nothing


def test_approving_a_supersede_proposal_supersedes_through_the_same_path(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    old = daemon.write("The release train leaves on Tuesdays", agent_id="agent-a")["id"]
    new = daemon.write("The release train leaves on Thursdays", agent_id="agent-a")["id"]
    other = daemon.write("The release notes live in the wiki", agent_id="agent-a")["id"]
    pid = _propose(daemon, "supersede", [old, new], {"old_id": old, "new_id": new})

    decided = daemon.call("review.decide", {"id": pid, "decision": "approve", "note": "confirmed"},
                          admin=True)

    assert decided["decision"] == "approve"
    assert (decided["old_id"], decided["new_id"]) == (old, new)
    closed, kept = get(daemon, old, include=["links"]), get(daemon, new)
    assert closed["status"] == "superseded"
    assert closed["valid_to"] == kept["valid_from"] and closed["retired_at"]
    assert [(lk["kind"], lk["from"], lk["to"]) for lk in closed["links"]] == [("supersedes", new, old)]
    assert kept["status"] == "active" and get(daemon, other)["status"] == "active"
    assert _ids(_listed(daemon, "approved")) == [pid]
    assert _listed(daemon) == {}
    assert daemon.scalar("SELECT count(*) FROM audit_events WHERE action = 'memory.supersede'") == 1
    assert daemon.scalar("SELECT count(*) FROM audit_events WHERE action = 'review.decide'") == 1
    # Deciding twice is a conflict.
    assert error_of(daemon, "review.decide", {"id": pid, "decision": "reject"}, admin=True).code == 1007


def test_a_rejected_proposal_is_never_raised_again(start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    a = daemon.write("The frontend port is 3000", agent_id="agent-a")["id"]
    b = daemon.write("The backend port is 3000", agent_id="agent-a")["id"]
    c = daemon.write("The docs port is 3000", agent_id="agent-a")["id"]
    pid = _propose(daemon, "supersede", [a, b], {"old_id": a, "new_id": b}, reason="same port")

    daemon.call("review.decide", {"id": pid, "decision": "reject", "note": "both are true"}, admin=True)

    assert _propose(daemon, "supersede", [a, b], {"old_id": a, "new_id": b}) is None
    assert _propose(daemon, "supersede", [b, a], {"old_id": b, "new_id": a}) is None  # order-free identity
    rejected = _listed(daemon, "rejected")
    assert list(rejected) == [pid] and rejected[pid]["note"] == "both are true"
    assert _listed(daemon) == {}
    assert get(daemon, a)["status"] == "active" and get(daemon, b)["status"] == "active"
    # Positive control: a proposal over other rows is still raised.
    fresh = _propose(daemon, "supersede", [a, c], {"old_id": a, "new_id": c})
    assert fresh is not None and list(_listed(daemon)) == [fresh]


def test_rejecting_a_promote_proposal_tombstones_the_candidates_value(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    rejected_value = "agent-a should always force-push to main"
    doomed = _candidate(daemon, rejected_value)
    good = _candidate(daemon, "agent-a should run the linter before committing")
    p_reject = _propose(daemon, "promote", [doomed], {})
    p_approve = _propose(daemon, "promote", [good], {})

    daemon.call("review.decide", {"id": p_reject, "decision": "reject"}, admin=True)
    daemon.call("review.decide", {"id": p_approve, "decision": "approve"}, admin=True)

    assert get(daemon, doomed)["status"] == "rejected"
    refused = error_of(daemon, "memory.write", {"content": rejected_value, "agent_id": "agent-a"})
    assert refused.code == 1006
    assert daemon.count_content(rejected_value) == 1  # only the rejected candidate itself
    # Positive controls: the approved candidate is live, and another owner may write the rejected value.
    assert get(daemon, good)["status"] == "active"
    assert daemon.write(rejected_value, agent_id="agent-b")["id"]


def test_approving_a_merge_proposal_writes_the_merged_row_and_keeps_the_originals_superseded(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    a = daemon.write("The CI runs on GitHub Actions", agent_id="agent-a", importance=0.4)["id"]
    b = daemon.write("CI uses GitHub Actions with a macOS runner", agent_id="agent-a", importance=0.8)["id"]
    bystander = daemon.write("The CI cache is keyed on the lockfile", agent_id="agent-a")["id"]
    merged_text = "The CI runs on GitHub Actions, including a macOS runner"
    pid = _propose(daemon, "merge", [a, b], {"merged_text": merged_text})

    decided = daemon.call("review.decide", {"id": pid, "decision": "approve"}, admin=True)

    merged_id = decided["merged_id"]
    merged = get(daemon, merged_id, include=["links"])
    assert merged["content"] == merged_text and merged["status"] == "active"
    assert merged["agent_id"] == "agent-a" and merged["importance_raw"] == 0.8
    assert sorted((lk["kind"], lk["from"], lk["to"]) for lk in merged["links"]) == sorted(
        [("merged_into", a, merged_id), ("merged_into", b, merged_id)])
    for original, text in ((a, "The CI runs on GitHub Actions"),
                           (b, "CI uses GitHub Actions with a macOS runner")):
        row = get(daemon, original)
        assert row["status"] == "superseded" and row["retired_at"] and row["content"] == text
    assert get(daemon, bystander)["status"] == "active"
    assert daemon.count_content(merged_text) == 1


def test_review_cli_lists_shows_approves_and_rejects_against_a_running_daemon(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    old = daemon.write("The log level in prod is debug", agent_id="agent-a")["id"]
    new = daemon.write("The log level in prod is info", agent_id="agent-a")["id"]
    cand = _candidate(daemon, "agent-a writes commit messages in the imperative")
    sup = _propose(daemon, "supersede", [old, new], {"old_id": old, "new_id": new}, reason="level changed")
    pro = _propose(daemon, "promote", [cand], {})
    sock = ["--socket", str(daemon.socket)]

    def cli(*args: str) -> str:
        done = run_cli(list(args) + sock, daemon.env)
        assert done.returncode == 0, f"memoryd {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    listed = cli("review", "list")
    assert "supersede" in listed and "promote" in listed
    as_json = json.loads(cli("review", "list", "--json"))
    assert {p["id"] for p in as_json["proposals"]} == {sup, pro}
    shown = cli("review", "show", str(sup))
    assert "level changed" in shown and old in shown
    shown_json = json.loads(cli("review", "show", str(sup), "--json"))
    assert shown_json["proposal"]["id"] == sup
    assert shown_json["memories"][old]["content"] == "The log level in prod is debug"

    cli("review", "approve", str(sup), "--note", "yes")
    cli("review", "reject", str(pro))

    assert get(daemon, old)["status"] == "superseded"
    assert get(daemon, cand)["status"] == "rejected"
    assert json.loads(cli("review", "list", "--json"))["proposals"] == []
    approved = json.loads(cli("review", "list", "--status", "approved", "--json"))["proposals"]
    assert [p["id"] for p in approved] == [sup]
    # Unknown proposal: a non-zero exit with the reason, not a traceback.
    missing = run_cli(["review", "approve", "prp_" + "0" * 26, *sock], daemon.env)
    assert missing.returncode == 2 and "1002" in missing.stderr
