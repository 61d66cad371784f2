"""The operator socket lives in a directory of its own (PROTOCOL 1.1).

A sandbox given the agent socket's directory must not find the operator
socket in it; the operator verbs answer only there.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from tests.integration.harness import DaemonHandle, run_cli
from tests.lifecycle.helpers import error_of


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_operator_socket_is_in_its_own_0700_directory_outside_the_agent_sockets(
        daemon: DaemonHandle) -> None:
    agent_dir = daemon.socket.parent
    admin = agent_dir.parent / "memoryd-admin" / "memoryd-admin.sock"
    assert stat.S_ISSOCK(admin.stat().st_mode)
    assert (_mode(admin), _mode(admin.parent), _mode(agent_dir)) == (0o600, 0o700, 0o700)
    # Nothing in the agent socket's directory leads to the operator socket.
    assert sorted(p.name for p in agent_dir.iterdir()) == ["memoryd.sock"]
    status = daemon.call("daemon.status")
    assert status["admin_socket"] == str(admin)
    assert status["sockets"] == {"agent": str(daemon.socket), "admin": str(admin)}


def test_operator_verbs_answer_only_on_the_operator_socket(daemon: DaemonHandle) -> None:
    for method in ("review.list", "queue.list", "audit.verify"):
        assert error_of(daemon, method, {}).code == -32601
        daemon.call(method, {}, admin=True)  # positive control: served on the operator socket


def test_admin_socket_flag_moves_the_operator_socket_for_daemon_and_cli(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path) -> None:
    chosen = short_tmp / "ops" / "admin.sock"
    daemon = start_daemon(env={"MEMORYD_ADMIN_SOCKET": str(chosen)})
    assert stat.S_ISSOCK(chosen.stat().st_mode)
    assert _mode(chosen.parent) == 0o700
    assert daemon.call("daemon.status")["admin_socket"] == str(chosen)
    assert not (daemon.socket.parent.parent / "memoryd-admin").exists()
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
    listed = run_cli(["queue", "list", "--json", "--admin-socket", str(chosen)], env)
    assert listed.returncode == 0, listed.stderr
    missing = run_cli(["queue", "list", "--json", "--admin-socket", str(short_tmp / "nope.sock")], env)
    assert missing.returncode == 3, missing.stderr
    assert os.path.exists(chosen)
