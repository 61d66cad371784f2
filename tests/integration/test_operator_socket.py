"""The operator socket lives in a directory of its own (PROTOCOL 1.1).

A sandbox given the agent socket's directory must not find the operator
socket in it; the operator verbs answer only there.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from memoryd.service.client import ClientError
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


#: Every operator-only method (docs/security.md's agent row names them all).
OPERATOR_ONLY = ("queue.list", "queue.retry", "review.list", "review.decide", "audit.verify",
                 "memory.export", "project.adopt", "review.get", "metrics.series")


def test_every_operator_only_method_is_unknown_on_the_agent_socket(daemon: DaemonHandle) -> None:
    for method in OPERATOR_ONLY:
        assert error_of(daemon, method, {}).code == -32601, method
        # positive control: the operator socket knows the method (an answer, or bad params)
        try:
            daemon.call(method, {}, admin=True)
        except ClientError as err:
            assert err.code != -32601, method


def test_the_operator_only_list_is_every_method_the_agent_socket_lacks() -> None:
    """A new operator method must join OPERATOR_ONLY (and docs/security.md) to pass."""
    import ast
    import inspect
    import textwrap

    from memoryd.service import handlers

    source = inspect.getsource(handlers.Dispatcher.__init__)
    tables: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Attribute)
                and isinstance(node.value, ast.Dict)):
            tables[node.target.attr] = {k.value for k in node.value.keys
                                        if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    assert "memory.write" in tables["agent_methods"]  # positive control: the parse found the tables
    assert tables["admin_methods"] - tables["agent_methods"] == set(OPERATOR_ONLY)
