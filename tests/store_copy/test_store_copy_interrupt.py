"""``memoryd store copy`` stopped by Ctrl-C (SIGINT to the real command, mid-copy), both ways.

The target is then clearly unusable, not served as if whole: the copy exits
130 saying to run it again, its marker says it is unfinished, and a daemon
refuses to start on the target with the command that completes it. A second
run resumes, completes and verifies the copy, and a daemon then serves it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select

from memoryd.store.copy.tables import MARKER_KEY
from memoryd.store.engine import create_store_engine
from memoryd.store.schema import memories, meta
from tests.integration.harness import SRC_DIR, DaemonHandle
from tests.store_copy.conftest import run_copy, table_rows

pytestmark = pytest.mark.postgres

#: Rows enough that a copy one row per batch is still in its first table when the signal lands.
ROWS = 400


def _seeded_sqlite(start_daemon: Callable[..., DaemonHandle]) -> DaemonHandle:
    """A stopped SQLite daemon whose store holds ROWS memories (and their audit events and jobs)."""
    source = start_daemon("src")
    for start in range(0, ROWS, 100):
        source.call("memory.write_many", {"items": [
            {"content": f"note {i}: the build cache for module {i} lives on disk {i % 7}", "agent_id": "a1"}
            for i in range(start, start + 100)]})
    source.stop()
    return source


def _interrupt(source: str, target: str) -> subprocess.CompletedProcess[str]:
    """Run the copy one row per batch and send it SIGINT once it reports its first batch."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env["PYTHONPATH"] = str(SRC_DIR)
    command = [sys.executable, "-m", "memoryd", "store", "copy", "--from", source, "--to", target,
               "--batch-size", "1"]
    proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("memories:"):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(seen) + err)


def _marker_and_count(url: str) -> tuple[dict[str, object], int]:
    engine = create_store_engine(url)
    try:
        with engine.connect() as conn:
            value = conn.execute(select(meta.c.value).where(meta.c.key == MARKER_KEY)).scalar_one()
            marker = json.loads(value)
            return marker, int(conn.execute(select(func.count()).select_from(memories)).scalar_one())
    finally:
        engine.dispose()


def _assert_unusable_then_completed(source: str, target: str, daemon_on_target: Callable[[str], DaemonHandle]
                                    ) -> None:
    stopped = _interrupt(source, target)
    assert stopped.returncode == 130, stopped.stderr
    assert "interrupted" in stopped.stderr and "run the same command again" in stopped.stderr
    marker, copied = _marker_and_count(target)
    assert marker["done"] is False
    assert 0 < copied < ROWS, copied  # it stopped mid-table

    refused = daemon_on_target("refused")
    assert refused.run_to_exit() == 2
    said = refused.stderr_text()
    assert "memoryd store copy" in said and "interrupted" in said and "again" in said, said

    done = run_copy(source, target, "--json")
    summary = json.loads(done.stdout) if done.returncode == 0 else None
    assert summary is not None, done.stderr
    assert summary["resumed"] and summary["verified"]
    assert summary["tables"]["memories"]["copied"] == ROWS - copied
    want, got = table_rows(source), table_rows(target)
    assert got == want
    served = daemon_on_target("served")
    served.start()  # positive control: the same daemon start succeeds on the completed copy
    assert len(served.call("memory.list", {"agent_id": "a1", "limit": 1000})["memories"]) == ROWS
    served.stop()


def test_sqlite_to_postgres_interrupted_by_sigint_is_refused_then_completed(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    source = _seeded_sqlite(start_daemon)
    _assert_unusable_then_completed(
        source.store_url, pg_url, lambda name: start_daemon(name, db_url=pg_url, start=False))


def test_postgres_to_sqlite_interrupted_by_sigint_is_refused_then_completed(
        start_daemon: Callable[..., DaemonHandle], pg_url: str, short_tmp: Path) -> None:
    source = _seeded_sqlite(start_daemon)
    first = run_copy(source.store_url, pg_url, "--json")
    assert first.returncode == 0, first.stderr
    back = short_tmp / "back"
    back.mkdir(mode=0o700)
    target = f"sqlite:///{back / 'memoryd.db'}"
    _assert_unusable_then_completed(
        pg_url, target, lambda name: start_daemon(name, data_dir=back, start=False))
