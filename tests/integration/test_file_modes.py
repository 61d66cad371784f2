"""Every file and directory memoryd creates is private, whichever command creates it first.

Issue 20 items 1 and 8. The user's umask here is 022 (the common default,
which makes plain ``mkdir`` 0755 and plain ``open`` 0644): memoryd must still
leave directories 0700 and files 0600. An existing directory others can read
is tightened only when it is memoryd's (the data directory, a socket directory
memoryd names itself) and the user's; a directory memoryd did not create keeps
its mode, sticky bit included, and one others can write is refused with the fix.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.harness import DaemonHandle, hermetic_env, run_cli, wait_until

DATA = Path(__file__).resolve().parents[1] / "data" / "claude_code"
SESSION = "5f3c2a9e-8b1d-4e7a-9c0f-2d6b8e4a1c37"
NOBODY = 65534
LOOSE_UMASK = 0o022


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextlib.contextmanager
def loose_umask() -> Iterator[None]:
    """Run the block (and every process it starts) under umask 022."""
    old = os.umask(LOOSE_UMASK)
    try:
        yield
    finally:
        os.umask(old)


def modes_under(root: Path) -> dict[str, str]:
    """Every directory and file under ``root`` (itself included) → its mode, as ``0755``."""
    found = {".": f"{_mode(root):04o}"}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            found[str(path.relative_to(root))] = f"{_mode(path):04o}"
    return found


def not_private(root: Path) -> dict[str, str]:
    """The entries under ``root`` that are not 0700 (a directory) or 0600 (a file)."""
    out = {}
    for rel, mode in modes_under(root).items():
        path = root / rel
        want = "0700" if path.is_dir() else "0600"
        if mode != want:
            out[rel] = mode
    return out


def capture_stop_event(handle: DaemonHandle) -> subprocess.CompletedProcess[str]:
    """A Claude Code Stop hook, as the editor runs it: the real ``memoryd capture claude-code``
    with the hook JSON on stdin, the data dir named by ``MEMORYD_DATA_DIR``, umask 022."""
    project = handle.home / "webshop"
    (project / ".git").mkdir(parents=True, exist_ok=True)
    transcript = handle.home / ".claude" / "projects" / "-webshop" / f"{SESSION}.jsonl"
    transcript.parent.mkdir(parents=True, exist_ok=True)
    transcript.write_text((DATA / "session.jsonl").read_text())
    payload = {"session_id": SESSION, "transcript_path": str(transcript), "cwd": str(project),
               "permission_mode": "default", "hook_event_name": "Stop", "stop_hook_active": False}
    env = {**handle.env, "MEMORYD_SOCKET": str(handle.socket), "MEMORYD_DATA_DIR": str(handle.data_dir)}
    return subprocess.run([sys.executable, "-m", "memoryd", "capture", "claude-code", "--budget-ms", "10000"],
                          input=json.dumps(payload), env=env, capture_output=True, text=True, timeout=60,
                          check=False, umask=LOOSE_UMASK)


# -- item 1: the data directory and everything in it ---------------------------------------------


def test_capture_before_the_daemon_ever_ran_then_run_leaves_every_file_private(
        start_daemon: Callable[..., DaemonHandle], backend: str) -> None:
    """The issue's repro: daemon down, a fresh data dir, umask 022, a Stop hook, then ``memoryd run``."""
    handle = start_daemon(start=False)
    assert not handle.data_dir.exists()
    with loose_umask():
        hooked = capture_stop_event(handle)
        assert (hooked.returncode, hooked.stdout) == (0, ""), hooked.stderr
        spooled = list((handle.data_dir / "spool" / "claude-code").glob("*.jsonl"))
        assert spooled, "the hook found the daemon down and spooled the turns"
        cursors = list((handle.data_dir / "capture" / "claude-code").glob("*.json"))
        assert cursors, "the hook kept its cursor"
        # What the hook created, before the daemon ever ran: the data dir itself included.
        assert not_private(handle.data_dir) == {}, modes_under(handle.data_dir)

        handle.start()
    # The spool is replayed at start (the turns reach the store), then each file is removed.
    wait_until(lambda: handle.scalar("SELECT count(*) FROM memories WHERE kind = 'conversation'"),
               message="the spooled turns to be written")
    handle.write("a memory written after the start, so the WAL holds a frame")
    created = modes_under(handle.data_dir)
    assert {"memoryd.lock", "node_id", "capture", "spool"} <= set(created)
    if backend == "sqlite":
        assert {"memoryd.db", "memoryd.db-wal", "memoryd.db-shm"} <= set(created)
    assert not_private(handle.data_dir) == {}, created


def test_existing_data_dir_readable_by_others_is_made_private_with_its_store_files(
        start_daemon: Callable[..., DaemonHandle], backend: str) -> None:
    """An older memoryd (or a user's mkdir) left the data dir 0755 and the store's files 0644."""
    handle = start_daemon()
    handle.write("written before the modes were loosened")
    assert handle.stop() == 0
    handle.data_dir.chmod(0o755)
    store_files = [p for p in handle.data_dir.iterdir() if p.name.startswith("memoryd.db")]
    assert (len(store_files) > 0) is (backend == "sqlite")
    for path in store_files:
        path.chmod(0o644)

    handle.start()
    assert _mode(handle.data_dir) == 0o700
    assert {p.name: _mode(p) for p in store_files} == {p.name: 0o600 for p in store_files}
    assert "datadir.tightened" in handle.stderr_text()
    assert handle.count_content("written before the modes were loosened") == 1


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give the directory to another user")
def test_data_dir_of_another_user_readable_by_others_is_refused_naming_the_fix(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path, backend: str) -> None:
    theirs = short_tmp / "theirs"
    theirs.mkdir()
    theirs.chmod(0o755)
    os.chown(theirs, NOBODY, NOBODY)
    refused = start_daemon("refused", data_dir=theirs, start=False)
    assert refused.run_to_exit() == 2
    err = refused.stderr_text()
    assert f"data directory {theirs} is accessible to other users (mode 0755)" in err
    assert f"chmod 700 {theirs}" in err and "uid 65534" in err
    assert _mode(theirs) == 0o755 and list(theirs.iterdir()) == []  # not ours: left as it was
    assert not refused.socket.exists()

    # Positive control: once it is ours, the same daemon starts and makes it private.
    os.chown(theirs, os.getuid(), os.getgid())
    refused.start()
    assert _mode(theirs) == 0o700


def test_shared_sticky_directory_as_data_dir_is_refused_and_keeps_its_mode(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path, backend: str) -> None:
    """``--data-dir /tmp``: a shared directory is never chmod-ed, even when we own it (root's /tmp)."""
    shared = short_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    refused = start_daemon("refused", data_dir=shared, start=False)
    assert refused.run_to_exit() == 2
    err = refused.stderr_text()
    assert "is a shared directory (mode 1777, sticky bit)" in err
    assert f"{shared / 'memoryd'}/" in err  # the fix: a directory of its own inside it
    assert _mode(shared) == 0o1777
    assert list(shared.iterdir()) == []

    # Positive control: a directory of its own inside the shared one.
    own = start_daemon("own", data_dir=shared / "memoryd")
    own.write("kept in a private directory")
    assert (_mode(shared), _mode(own.data_dir)) == (0o1777, 0o700)


# -- item 8: socket directories ------------------------------------------------------------------


def test_socket_in_a_shared_sticky_directory_is_refused_and_the_directory_keeps_its_mode(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path) -> None:
    """``--socket /tmp/x.sock`` (here a 1777 directory of the test's, owned by us as root owns /tmp)."""
    shared = short_tmp / "t"
    shared.mkdir()
    shared.chmod(0o1777)
    refused = start_daemon("refused", socket=shared / "x.sock", start=False)
    assert refused.run_to_exit() == 2
    err = refused.stderr_text()
    assert f"socket directory {shared} is a shared directory (mode 1777, sticky bit)" in err
    assert f"{shared / 'memoryd'}/" in err
    assert _mode(shared) == 0o1777  # the sticky bit included
    assert not (shared / "x.sock").exists()

    # Positive control: a directory memoryd creates inside it is its own (0700); the shared one
    # keeps its mode, and so does the directory above it, where memoryd-admin/ is created.
    above = _mode(short_tmp)
    own = start_daemon("own", socket=shared / "memoryd-me" / "memoryd.sock")
    assert (_mode(shared), _mode(own.socket.parent), _mode(own.admin_socket.parent)) == (0o1777, 0o700, 0o700)
    assert _mode(short_tmp) == above
    assert own.call("daemon.ping")["pid"] == own.proc.pid  # type: ignore[union-attr]


def test_socket_directory_the_user_made_group_writable_is_refused_and_left_as_is(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path) -> None:
    team = short_tmp / "team"
    team.mkdir()
    team.chmod(0o775)
    refused = start_daemon("refused", socket=team / "memoryd.sock", start=False)
    assert refused.run_to_exit() == 2
    err = refused.stderr_text()
    assert f"socket directory {team} is writable by other users (mode 0775)" in err
    assert f"chmod 700 {team}" in err
    assert _mode(team) == 0o775

    # Positive control: the user fixes it as the message says; memoryd starts and changes nothing.
    team.chmod(0o700)
    refused.start()
    assert _mode(team) == 0o700


def test_memoryd_own_admin_directory_found_looser_is_tightened(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    """PROTOCOL.md: memoryd's own socket directory (``memoryd-admin/``, named by memoryd) that exists
    looser is tightened when the user owns it."""
    handle = start_daemon(start=False)
    handle.admin_socket.parent.mkdir(parents=True)
    handle.admin_socket.parent.chmod(0o755)
    handle.start()
    assert _mode(handle.admin_socket.parent) == 0o700
    assert "socket.dir_tightened" in handle.stderr_text()
    assert handle.call("daemon.ping", admin=True)["pid"] == handle.proc.pid  # type: ignore[union-attr]


# -- files other commands write ------------------------------------------------------------------


def test_export_file_is_0600_new_or_rewritten(daemon: DaemonHandle, short_tmp: Path) -> None:
    daemon.write("a memory the export carries")
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
    new = short_tmp / "new.jsonl"
    old = short_tmp / "old.jsonl"
    old.write_text("an earlier export\n")
    old.chmod(0o644)
    with loose_umask():
        for path in (new, old):
            done = run_cli(["export", "-o", str(path)], env)
            assert done.returncode == 0, done.stderr
    assert "a memory the export carries" in new.read_text() and "an earlier" not in old.read_text()
    assert (_mode(new), _mode(old)) == (0o600, 0o600)


def test_editor_config_backup_is_0600_and_a_new_config_and_its_folder_are_private(tmp_path: Path) -> None:
    """``memoryd mcp install``: the backup of an editor's config may hold the editor's tokens."""
    seeded, fresh = tmp_path / "seeded", tmp_path / "fresh"
    config = seeded / ".cursor" / "mcp.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"mcpServers": {"other": {"command": "other-mcp"}}}))
    config.chmod(0o644)
    fresh.mkdir()
    for project in (seeded, fresh):
        done = subprocess.run([sys.executable, "-m", "memoryd", "mcp", "install", "--client", "cursor",
                               "--project-dir", str(project)], env=hermetic_env(tmp_path),
                              capture_output=True, text=True, timeout=60, check=False, umask=LOOSE_UMASK)
        assert done.returncode == 0, done.stderr
    [backup] = config.parent.glob("mcp.json.memoryd-backup-*")
    assert "other-mcp" in backup.read_text() and "memoryd" in json.loads(config.read_text())["mcpServers"]
    assert _mode(backup) == 0o600
    assert _mode(config) == 0o644  # the editor's own file keeps the mode its user gave it
    created = fresh / ".cursor" / "mcp.json"
    assert (_mode(created.parent), _mode(created)) == (0o700, 0o600)


def test_service_install_creates_its_directories_0700_and_its_files_0600(tmp_path: Path) -> None:
    from memoryd.osservice import install as inst
    from memoryd.osservice.units import Target

    def tool(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, "", "")  # no systemctl calls in a test

    root = tmp_path / "home"
    target = Target(platform="systemd", system=False, python=sys.executable, data_dir=root / "share" / "data",
                    unit_dir=root / "config" / "systemd" / "user", log_dir=root / "state" / "logs",
                    user="tester", db_url="postgresql://u:secret@h/db", env_file=root / "etc" / "memoryd.env")
    with loose_umask():
        inst.install(target, run=tool)
    assert not_private(root) == {}, modes_under(root)
    assert {"share/data", "config/systemd/user/memoryd.service", "state/logs", "etc/memoryd.env"} <= set(
        modes_under(root))


@pytest.mark.slow  # writes the 253 MB bundled model file
def test_assembled_model_file_is_0600_in_0700_directories(tmp_path: Path) -> None:
    """The bundled GGUF is assembled into the data directory by whichever process loads it first."""
    from memoryd.models.llm import bundled_gguf

    data_dir = tmp_path / "data"
    with loose_umask():
        path = bundled_gguf(data_dir)
    assert path.parent == data_dir / "models"
    assert (_mode(data_dir), _mode(path.parent), _mode(path)) == (0o700, 0o700, 0o600)
    # One an older memoryd assembled under umask 022 is made private when it is next used.
    path.chmod(0o644)
    assert bundled_gguf(data_dir) == path and _mode(path) == 0o600
