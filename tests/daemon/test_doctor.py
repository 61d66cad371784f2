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


def test_doctor_fails_with_a_fix_when_the_data_dir_or_store_files_are_open_to_others(
        start_daemon: Callable[..., DaemonHandle], backend: str) -> None:
    """Issue 20 item 1: doctor checks the data directory and the store's files, not only the socket."""
    d = start_daemon(config={"governor_enabled": False})
    d.write("doctor checks who can read this")
    healthy = {f["check"]: f for f in json.loads(doctor(d).stdout)["findings"]}
    assert healthy["data_dir.permissions"]["level"] == "ok"
    assert healthy["data_dir.permissions"]["detail"] == f"data directory {d.data_dir} is 0700"
    store_files = [d.data_dir / n for n in ("memoryd.db", "memoryd.db-wal", "memoryd.db-shm")]
    if backend == "sqlite":
        assert healthy["store.permissions"] == {
            "check": "store.permissions", "level": "ok", "fix": "",
            "detail": "memoryd.db 0600, memoryd.db-wal 0600, memoryd.db-shm 0600"}
    else:
        assert "store.permissions" not in healthy  # the store is PostgreSQL's files, not ours

    d.data_dir.chmod(0o755)
    if backend == "sqlite":
        for path in store_files:
            path.chmod(0o644)
    result = doctor(d)
    checks = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    assert result.returncode == 1
    data_dir = checks["data_dir.permissions"]
    assert data_dir["level"] == "fail"
    assert f"data directory {d.data_dir} is accessible to other users (mode 0755)" in data_dir["detail"]
    assert data_dir["fix"].startswith(f"chmod 700 {d.data_dir} ")
    if backend == "sqlite":
        store = checks["store.permissions"]
        assert store["level"] == "fail"
        assert "memoryd.db 0644, memoryd.db-wal 0644, memoryd.db-shm 0644" in store["detail"]
        assert store["fix"].startswith(f"chmod 600 {' '.join(str(p) for p in store_files)} ")

    # Positive control: the restart the fix names makes them private again, and doctor passes.
    assert d.stop() == 0
    d.start()
    result = doctor(d)
    assert result.returncode == 0, result.stdout
    assert all(f["level"] == "ok" for f in json.loads(result.stdout)["findings"])


def test_doctor_fails_when_the_socket_directory_is_writable_by_others(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    d = start_daemon(config={"governor_enabled": False})
    sock_dir = d.socket.parent
    sock_dir.chmod(0o777)
    try:
        checks = {f["check"]: f for f in json.loads(doctor(d).stdout)["findings"]}
        perms = checks["socket.permissions"]
        assert perms["level"] == "fail"
        assert f"socket directory {sock_dir} is writable by other users (mode 0777)" in perms["detail"]
        assert f"chmod 700 {sock_dir}" in perms["fix"]
        # Positive control: a directory the user made that others may only list is the user's
        # choice (the socket in it is 0600): memoryd accepts it and so does doctor.
        sock_dir.chmod(0o755)
        checks = {f["check"]: f for f in json.loads(doctor(d).stdout)["findings"]}
        assert checks["socket.permissions"] == {"check": "socket.permissions", "level": "ok", "fix": "",
                                                "detail": "socket 0o600, directory 0o755"}
    finally:
        sock_dir.chmod(0o700)
