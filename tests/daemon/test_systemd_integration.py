"""systemd integration with the real tools: socket activation and sd_notify READY."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.daemon import systemd
from memoryd.service.client import Client
from tests.integration.harness import hermetic_env, wait_until


def test_notify_sends_to_the_notify_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(path))
        assert systemd.notify("READY=1", env={"NOTIFY_SOCKET": str(path)}) is True
        assert listener.recv(100) == b"READY=1"
    assert systemd.notify("READY=1", env={}) is False  # not under systemd: a no-op


def test_watchdog_interval_is_half_the_timeout() -> None:
    import os

    assert systemd.watchdog_interval_s({"WATCHDOG_USEC": "60000000"}) == 30.0
    assert systemd.watchdog_interval_s({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "1"}) is None \
        or os.getpid() == 1
    assert systemd.watchdog_interval_s({}) is None


@pytest.mark.skipif(shutil.which("systemd-socket-activate") is None,
                    reason="systemd-socket-activate is not installed")
def test_socket_activation_answers_a_write_sent_before_the_daemon_started() -> None:
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="md-sa-", dir="/tmp"))
    sock_dir = home / "s"
    sock_dir.mkdir(mode=0o700)
    agent, admin = sock_dir / "memoryd.sock", home / "memoryd-admin" / "memoryd-admin.sock"
    cmd = ["systemd-socket-activate", "-l", str(agent), "-l", str(admin),
           sys.executable, "-m", "memoryd", "run", "--data-dir", str(home / "data"),
           "--socket", str(agent), "--embedder", "none", "--log-format", "json"]
    err = open(home / "stderr", "wb")  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=hermetic_env(home), stdout=err, stderr=err)
    try:
        wait_until(agent.exists, timeout_s=10, message="systemd-socket-activate to listen")
        # The daemon is not running yet: this connection waits in the listen backlog.
        with Client(agent, timeout_s=60) as c:
            result = c.call("memory.write", {"content": "written before start", "agent_id": "a"})
            assert result["id"].startswith("mem_")
            got = c.call("memory.get", {"id": result["id"]})
            assert got["content"] == "written before start"
        with Client(admin, timeout_s=30) as c:
            assert c.call("queue.list", {})["jobs"]  # the operator socket came from systemd too
        log = (home / "stderr").read_text()
        assert '"activated": true' in log
    finally:
        proc.terminate()
        assert proc.wait(35) == 0
        err.close()
        shutil.rmtree(home, ignore_errors=True)
