"""audit.verify over the operator socket and the CLI: an intact chain, a tampered one, no text in events."""

from __future__ import annotations

import json
from collections.abc import Callable

from memoryd.store.memories import content_hash
from tests.integration.harness import DaemonHandle, run_cli
from tests.lifecycle.helpers import QUIET, error_of, wait_status

TEXTS = [
    "The payments service deploys from the release branch",
    "The payments service deploys from main after review",
    "The on-call rotation changes every Monday",
    "Grandma's cake recipe uses cardamom and orange zest",
    "The VPN config lives in the ops repo",
]


def _mixed_history(daemon: DaemonHandle) -> dict[str, str]:
    """Writes, a supersede and a forget that has been erased; returns the ids by role."""
    first = daemon.write(TEXTS[0], agent_id="agent-a")
    daemon.write(TEXTS[2], agent_id="agent-a")
    doomed = daemon.write(TEXTS[3], scope="user", user_id="u1")
    daemon.call("memory.write_many", {"items": [{"content": TEXTS[4], "agent_id": "agent-a"},
                                                {"content": TEXTS[2], "agent_id": "agent-b"}]})
    sup = daemon.call("memory.supersede", {"old_id": first["id"], "content": TEXTS[1], "agent_id": "agent-a"})
    daemon.call("memory.forget", {"id": doomed["id"], "reason": "user asked"})
    wait_status(daemon, doomed["id"], "forgotten")
    return {"superseded": first["id"], "new": sup["new_id"], "forgotten": doomed["id"]}


def test_audit_verify_reports_ok_after_writes_supersedes_and_forgets(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    ids = _mixed_history(daemon)

    result = daemon.call("audit.verify", admin=True)

    assert result["ok"] is True
    assert result["first_break_seq"] is None
    total = daemon.scalar("SELECT count(*) FROM audit_events")
    assert result["events"] == total
    actions = {a for (a,) in daemon.query("SELECT DISTINCT action FROM audit_events")}
    assert {"memory.write", "memory.supersede", "memory.forget", "memory.erase"} <= actions
    assert daemon.scalar("SELECT count(*) FROM audit_events WHERE memory_id = ?", (ids["forgotten"],)) >= 3
    # The agent socket has no audit verb.
    assert error_of(daemon, "audit.verify", {}).code == -32601


def test_audit_verify_finds_the_first_tampered_event(start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    ids = _mixed_history(daemon)
    cli = ["audit", "verify", "--socket", str(daemon.socket)]
    intact = run_cli(cli, daemon.env)
    assert intact.returncode == 0, intact.stdout + intact.stderr  # positive control before the tamper
    assert "verified" in intact.stdout

    target = daemon.scalar("SELECT seq FROM audit_events WHERE action = 'memory.supersede' AND memory_id = ?",
                           (ids["superseded"],))
    last = daemon.scalar("SELECT max(seq) FROM audit_events")
    assert 1 < target < last  # an event in the middle of the chain
    with daemon.db() as conn:
        conn.execute("UPDATE audit_events SET detail = ? WHERE seq = ?",
                     (json.dumps({"reason": "nothing happened here"}), target))

    result = daemon.call("audit.verify", admin=True)

    assert result["ok"] is False
    assert result["first_break_seq"] == target
    assert result["events"] == daemon.scalar("SELECT count(*) FROM audit_events WHERE seq < ?", (target,))
    broken = run_cli(cli, daemon.env)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert str(target) in broken.stdout
    as_json = run_cli([*cli, "--json"], daemon.env)
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["first_break_seq"] == target


def test_audit_events_hold_ids_and_content_hashes_never_the_text(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon(config=QUIET)
    ids = _mixed_history(daemon)

    rows = daemon.query("SELECT seq, at, actor, action, memory_id, detail, prev_hash, hash FROM audit_events")
    dump = "\n".join("|".join("" if v is None else str(v) for v in row) for row in rows)

    for text in TEXTS:
        for needle in (text, text.lower(), json.dumps(text)[1:-1]):
            assert needle not in dump, f"audit events hold memory text: {text!r}"
    for word in ("cardamom", "Grandma"):
        assert word not in dump
    erase = daemon.query("SELECT detail FROM audit_events WHERE action = 'memory.erase' AND memory_id = ?",
                         (ids["forgotten"],))
    assert len(erase) == 1
    detail = json.loads(erase[0][0])
    assert detail["content_hash"] == content_hash(TEXTS[3])
    forget = daemon.query("SELECT detail FROM audit_events WHERE action = 'memory.forget' AND memory_id = ?",
                          (ids["forgotten"],))
    assert json.loads(forget[0][0])["content_hash"] == content_hash(TEXTS[3])
    # Positive control: the same dump does name the ids and hashes of what happened.
    for memory_id in ids.values():
        assert memory_id in dump
    assert content_hash(TEXTS[1]) in dump
    # ...and the text of a memory that was not forgotten is in its row, so the search above can find text.
    assert daemon.count_content(TEXTS[1]) == 1
