"""`memoryd import` streams into a real daemon: progress as it goes, and an import stopped with
Ctrl-C and run again writes every row, link and key once.

On both store backends (tests/conftest.py pytest_generate_tests).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration.harness import DaemonHandle, run_cli

QUIET = {"governor_enabled": False}
N = 1500


def _export(path: Path, n: int = N) -> int:
    """An export of ``n`` memories in which every 10th cites the one before it and every 25th
    supersedes a row further down the file (a forward link); returns how many links it holds."""
    links = 0
    with path.open("w") as out:
        out.write(json.dumps({"record": "header", "format": "memoryd-export", "format_version": 1,
                              "memoryd_version": "t", "exported_at": "2026-01-01T00:00:00.000000Z",
                              "filters": {}, "with_vectors": False, "total": n}) + "\n")
        for i in range(n):
            record: dict[str, Any] = {
                "record": "memory", "id": f"mem_src{i:06d}", "content": f"note {i}: the build cache lives on "
                f"host{i % 7} and is pruned every {i % 13 + 1} days", "kind": "fact", "scope": "agent",
                "agent_id": "a1", "status": "active", "recorded_at": "2026-01-01T00:00:00.000000Z",
                "links": []}
            if i % 10 == 9:
                record["links"].append({"kind": "cites", "to": f"mem_src{i - 1:06d}",
                                        "created_at": "2026-01-02T00:00:00.000000Z"})
            if i % 25 == 0 and i + 5 < n:
                record["links"].append({"kind": "supersedes", "to": f"mem_src{i + 5:06d}",
                                        "created_at": "2026-01-02T00:00:00.000000Z"})
            links += len(record["links"])
            out.write(json.dumps(record) + "\n")
        out.write(json.dumps({"record": "end", "count": n}) + "\n")
    return links


def _import(daemon: DaemonHandle, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
    return run_cli(["import", "--json", *args, str(path)], env, timeout_s=300.0)


def test_an_import_stopped_with_ctrl_c_and_run_again_writes_everything_once(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon("dst", config=QUIET)
    path = daemon.home / "big.jsonl"
    links = _export(path)
    # The child gets SIGINT's default action, as a terminal's foreground job has it: pytest
    # started in the background by a shell without job control runs with SIGINT ignored, which
    # every child inherits, and the import then ran to the end and exited 0 (clean-clone CI
    # runs, both backends; e70aa03's smaller batches were the wrong cure and are undone).
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "import", "--batch-size", "20", str(path)],
        env={**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while daemon.scalar("SELECT count(*) FROM memories") < 100 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "interrupted" in err and "run the same import again" in err
    stopped_at = daemon.scalar("SELECT count(*) FROM memories")
    assert 100 <= stopped_at < N  # it stopped part way

    done = _import(daemon, path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["refused"] == [] and summary["records"] == N
    # What the first run wrote is answered from its keys, and said so.
    assert summary["already_imported"] >= 100 and summary["already_imported"] + summary["written"] == N
    assert summary["duplicates"] == 0
    assert (summary["links_restored"], summary["links_skipped"]) == (links, 0)
    assert daemon.scalar("SELECT count(*) FROM memories") == N
    assert daemon.scalar("SELECT count(DISTINCT content) FROM memories") == N
    assert daemon.scalar("SELECT count(*) FROM memory_links") == links
    assert daemon.scalar("SELECT count(*) FROM idempotency_keys") == N
    assert daemon.scalar("SELECT count(*) FROM audit_events WHERE action = 'memory.import'") == N
    # The forward link (row 0 supersedes row 5, further down the file) points the right way.
    src, dst = daemon.query("SELECT src.content, dst.content FROM memory_links l "
                            "JOIN memories src ON src.id = l.src_id JOIN memories dst ON dst.id = l.dst_id "
                            "WHERE l.kind = 'supersedes' ORDER BY src.seq LIMIT 1")[0]
    assert (src.split(":")[0], dst.split(":")[0]) == ("note 0", "note 5")


def test_import_shows_progress_and_reads_stdin(start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon("dst", config=QUIET)
    path = daemon.home / "small.jsonl"
    _export(path, 300)
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
    done = subprocess.run([sys.executable, "-m", "memoryd", "import", "--json", "--progress", "-"],
                          env=env, stdin=path.open("rb"), capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["written"] == 300
    lines = [line for line in done.stderr.splitlines() if line.startswith("import: ")]
    assert lines and lines[-1].startswith("import: 300 of 300 memories (100%)"), done.stderr
    assert "/s" in lines[-1]
    # Positive control: without --progress and off a terminal, nothing is drawn.
    quiet = _import(daemon, path)
    assert quiet.returncode == 0 and "import: " not in quiet.stderr
