"""Fixtures for the console: a real daemon, the console app on it, seeded proposals and dead jobs.

The daemon takes a metrics reading every 0.2 s (``metrics_interval_s``), so the
overview's charts have points within a second of its start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memoryd.store import proposals
from tests.conftest import _new_handle, _short_dir, _stop_all
from tests.integration.harness import DaemonHandle
from tests.lifecycle.helpers import engine_on

CONSOLE_CONFIG: dict[str, Any] = {"metrics_interval_s": 0.2, "governor_enabled": False}
MEMORYD = Path(sys.executable).with_name("memoryd")


@pytest.fixture(scope="module")
def console_daemon() -> Iterator[DaemonHandle]:
    """One SQLite daemon for a module (``--embedder none``: embed jobs wait, so they can be killed)."""
    root = _short_dir()
    handle = _new_handle(root, "console", config=CONSOLE_CONFIG)
    try:
        handle.start()
        yield handle
        _stop_all([handle])
    finally:
        handle.kill()
        shutil.rmtree(root, ignore_errors=True)


def propose_supersede(daemon: DaemonHandle, old_id: str, new_id: str, reason: str) -> str:
    """An open supersede proposal, as the reflect pass raises one (written into the daemon's store)."""
    with engine_on(daemon) as engine, engine.begin() as conn:
        pid = proposals.propose(conn, kind="supersede", memory_ids=[old_id, new_id], reason=reason,
                                payload={"old_id": old_id, "new_id": new_id}, created_by="reflect",
                                now=datetime.now(UTC))
    assert pid is not None
    return pid


def kill_embed_job(daemon: DaemonHandle, memory_id: str) -> int:
    """Turn the memory's waiting embed job dead, as a job that failed every attempt ends."""
    with daemon.db() as conn:
        conn.execute(
            "UPDATE jobs SET state = 'dead', attempts = max_attempts, finished_at = updated_at, "
            "last_error = 'seeded by the console test: every attempt failed' "
            "WHERE pass = 'embed' AND target = ? AND state = 'ready'", (memory_id,))
        job_id: int = conn.execute("SELECT id FROM jobs WHERE pass = 'embed' AND target = ? AND "
                                   "state = 'dead'", (memory_id,)).fetchone()[0]
    return job_id


class ConsoleProcess:
    """``memoryd console --json`` as a child process: its URL, port and how to stop it."""

    def __init__(self, daemon: DaemonHandle, *args: str):
        env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
        self.started = time.monotonic()
        self.proc = subprocess.Popen([str(MEMORYD), "console", "--json", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            raise AssertionError(f"memoryd console printed nothing: {self.proc.stderr.read()}")  # type: ignore[union-attr]
        self.printed: dict[str, Any] = json.loads(line)
        self.url: str = self.printed["url"]
        self.port: int = self.printed["port"]
        self.origin = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def console_process(console_daemon: DaemonHandle) -> Iterator[ConsoleProcess]:
    """A running ``memoryd console`` on the module's daemon."""
    proc = ConsoleProcess(console_daemon)
    try:
        yield proc
    finally:
        proc.stop()


def chromium_paths() -> tuple[str, str] | None:
    """Debian's chromium and chromedriver, when installed (nothing is downloaded)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver")
              else shutil.which("chromedriver"))
    return (browser, driver) if browser and driver else None
