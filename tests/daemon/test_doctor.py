"""`memoryd doctor` against a real daemon: every check reported, with a fix when it fails."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

from tests.integration.harness import DaemonHandle, run_cli


def doctor(d: DaemonHandle) -> subprocess.CompletedProcess[str]:
    """``memoryd doctor`` on the daemon's socket, data dir and store (MEMORYD_DB_URL, as an
    operator of a PostgreSQL store sets it; on SQLite the store is the data dir's file)."""
    env = {**d.env, "MEMORYD_DB_URL": d.db_url} if d.db_url else d.env
    return run_cli(["doctor", "--skip-models", "--json", "--socket", str(d.socket),
                    "--data-dir", str(d.data_dir)], env)


def test_doctor_passes_on_a_healthy_daemon_and_names_each_check(
        start_daemon: Callable[..., DaemonHandle], backend: str) -> None:
    d = start_daemon(config={"governor_enabled": False})
    d.write("doctor was here")
    result = doctor(d)
    report = json.loads(result.stdout)
    checks = {f["check"]: f for f in report["findings"]}
    assert result.returncode == 0, result.stdout + result.stderr
    assert {"socket", "socket.permissions", "store.schema", "queue.dead", "queue.age", "disk",
            "clock"} <= set(checks)
    # docs/operations.md: the integrity check is SQLite's PRAGMA quick_check.
    assert ("store.integrity" in checks) is (backend == "sqlite")
    assert all(f["level"] == "ok" for f in checks.values())


def test_doctor_fails_with_a_fix_when_the_daemon_is_down(start_daemon: Callable[..., DaemonHandle],
                                                         backend: str) -> None:
    d = start_daemon()
    d.stop()
    result = doctor(d)
    report = json.loads(result.stdout)
    socket_check = next(f for f in report["findings"] if f["check"] == "socket")
    assert result.returncode == 1 and report["result"] == "fail"
    assert socket_check["level"] == "fail" and "memoryd run" in socket_check["fix"]
    # The store is still readable without the daemon (positive control).
    found = {f["check"]: f["level"] for f in report["findings"]}
    assert found["store.schema"] == "ok"
    if backend == "sqlite":
        assert found["store.integrity"] == "ok"
