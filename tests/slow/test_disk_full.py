"""A full disk under a real daemon: clear refusals, no acknowledged write lost, recovery.

The data directory sits on a tmpfs of 16 MiB that the test mounts (root only; skipped with the
reason otherwise). A filler file takes most of it, then memory.write runs until the disk is full.
What PROTOCOL.md promises:

- a write past full is answered 1003 ("store unavailable ... disk full ...; nothing was
  written") with a message that says what to do, never another code and never no answer;
- every id that was acknowledged is readable, with its content, while full, after space is
  freed, and after a restart;
- reads (get, search, status, ping) keep being served while the disk is full;
- writes succeed again once space is freed (the filler deleted), without a restart;
- the database is intact: filled a second time and the daemon killed (SIGKILL) while full, then
  space freed and the daemon restarted, ``PRAGMA integrity_check`` is ``ok``, and again after a
  clean stop.

Counts (writes acknowledged, refusals by code, rows lost) go to a JSON file and stdout (``-s``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryd.service.client import Client, ClientError
from tests.integration.harness import DaemonHandle, hermetic_env

pytestmark = pytest.mark.slow

FS_BYTES = 16 * 1024 * 1024
#: Room the filler leaves for the database to grow into before the disk is full (each commit
#: adds some tens of KiB of WAL frames until a checkpoint).
HEADROOM_BYTES = 6 * 1024 * 1024
#: Writes in a row refused as full before the test calls the disk full.
FULL_STREAK = 10
MAX_WRITES = 20_000
AGENT = "disk-full"


@contextlib.contextmanager
def small_filesystem(root: Path) -> Iterator[Path]:
    """A tmpfs of FS_BYTES mounted at ``root/fs`` (skip the test when mounting is not permitted)."""
    if os.geteuid() != 0:
        pytest.skip("the disk-full test mounts a small tmpfs, which needs root")
    mount_point = root / "fs"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES},mode=0700", "tmpfs",
                           str(mount_point)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}); "
                    "the disk-full test needs root in a namespace that may mount")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _fill(path: Path, leave: int) -> Path:
    """A filler file that leaves about ``leave`` bytes free on ``path``'s filesystem."""
    filler = path / "filler.bin"
    size = max(0, _free_bytes(path) - leave)
    with open(filler, "wb") as f:
        chunk = b"\0" * (1 << 20)
        while size > 0:
            n = min(size, len(chunk))
            f.write(chunk[:n])
            size -= n
    return filler


def _content(i: int) -> str:
    # Distinct text per write (never a duplicate), long enough that the disk fills in a few hundred.
    return f"disk-full write {i}: " + " ".join(f"token{i}x{j}" for j in range(200))


@pytest.fixture
def daemon_on_small_fs() -> Iterator[DaemonHandle]:
    root = Path(tempfile.mkdtemp(prefix="md-", dir="/tmp"))
    try:
        with small_filesystem(root) as fs:
            home = root / "home"
            home.mkdir(mode=0o700)
            handle = DaemonHandle(name="diskfull", home=home, data_dir=fs / "data",
                                  socket=home / "s" / "memoryd.sock", env=hermetic_env(home))
            try:
                handle.start()
                yield handle
            except BaseException:
                sys.stderr.write(f"--- memoryd stderr ---\n{handle.stderr_tail()}\n")
                raise
            finally:
                if handle.running:
                    handle.stop()
                handle.kill()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _integrity(handle: DaemonHandle) -> str:
    with handle.db() as conn:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
    return "; ".join(str(r[0]) for r in rows)


def test_full_disk_refuses_writes_clearly_keeps_acknowledged_ones_and_recovers(
        daemon_on_small_fs: DaemonHandle, tmp_path: Path) -> None:
    d = daemon_on_small_fs
    fs = d.data_dir.parent
    acked: dict[str, str] = {}
    refused: Counter[str] = Counter()
    messages: list[str] = []
    counts: dict[str, Any] = {}
    serial = iter(range(10**9))

    def write(c: Client) -> bool:
        content = _content(next(serial))
        try:
            result = c.call("memory.write", {"content": content, "agent_id": AGENT})
        except ClientError as exc:
            refused[str(exc.code)] += 1
            messages.append(exc.message)
            return False
        acked[result["id"]] = content
        return True

    def fill_until_full(c: Client) -> int:
        """Write until FULL_STREAK writes in a row are refused; return the writes acknowledged."""
        before, streak, tries = len(acked), 0, 0
        while streak < FULL_STREAK and tries < MAX_WRITES:
            streak = 0 if write(c) else streak + 1
            tries += 1
        assert streak == FULL_STREAK, f"the disk never filled after {tries} writes"
        return len(acked) - before

    def readable(c: Client) -> None:
        for mid in list(acked)[:: max(1, len(acked) // 25)]:
            assert c.call("memory.get", {"id": mid})["content"] == acked[mid]

    filler = _fill(fs, HEADROOM_BYTES)
    with Client(d.socket, timeout_s=60) as c:
        counts["acknowledged_until_full"] = fill_until_full(c)
        assert counts["acknowledged_until_full"] > 20, "the filler left no room for acknowledged writes"
        assert set(refused) == {"1003"}, f"a full disk must answer 1003 only: {dict(refused)}"
        for message in messages:
            assert all(words in message for words in ("disk is full", "free space", "nothing was written")), \
                message

        # Reads keep being served while the disk is full.
        assert c.call("daemon.ping")["pid"] == d.proc.pid  # type: ignore[union-attr]
        status = c.call("daemon.status")
        counts["status_while_full"] = {"health": status.get("health"), "problems": status.get("problems")}
        assert status["health"] == "degraded"  # PROTOCOL: store errors make status degraded
        assert any("disk is full" in p for p in status["problems"]), status["problems"]
        readable(c)
        found = c.call("memory.search", {"query": "token0x5", "agent_id": AGENT, "mode": "lexical"})
        assert [r["id"] for r in found["results"]][:1] == [next(iter(acked))]

        # Space freed: writes succeed again, no restart.
        filler.unlink()
        after = [write(c) for _ in range(20)]
        counts["acknowledged_after_freeing"] = sum(after)
        assert all(after), f"writes still refused after freeing space: {messages[-3:]}"
        assert c.call("daemon.status")["health"] == "healthy"  # a commit clears the store error

        # Full again, and this time the daemon is killed while full: the WAL must recover.
        filler = _fill(fs, 512 * 1024)
        counts["acknowledged_until_full_again"] = fill_until_full(c)
    d.kill()
    filler.unlink()
    d.start()
    assert _integrity(d) == "ok"
    with Client(d.socket, timeout_s=60) as c:
        readable(c)
        after = [write(c) for _ in range(20)]
        counts["acknowledged_after_restart"] = sum(after)
        assert all(after), f"writes refused after the restart: {messages[-3:]}"

    # A clean stop, and the file checked again; then every acknowledged write, by content.
    assert d.stop() == 0
    assert _integrity(d) == "ok"
    with d.db() as conn:
        stored = dict(conn.execute("SELECT id, content FROM memories WHERE agent_id = ?", (AGENT,)))
    lost = sorted(mid for mid, content in acked.items() if stored.get(mid) != content)

    counts.update(writes_acknowledged=len(acked), refused_by_code=dict(refused), rows_lost=len(lost),
                  first_refusal=messages[0] if messages else None)
    text = json.dumps(counts, indent=1)
    (tmp_path / "disk_full.json").write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(f"\ndisk_full: {tmp_path / 'disk_full.json'}\n{text}\n")
    assert lost == [], f"acknowledged writes lost: {lost[:10]}"
    assert set(refused) == {"1003"}, dict(refused)
