"""Socket files and exclusivity: private modes, stale files, and one daemon per socket and data dir."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.harness import DaemonHandle

NOBODY = 65534


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_sockets_are_mode_0600_inside_a_0700_directory(daemon: DaemonHandle) -> None:
    for path in (daemon.socket, daemon.admin_socket):
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert _mode(path) == 0o600, f"{path} is {oct(_mode(path))}"
        assert path.stat().st_uid == os.getuid()
    assert _mode(daemon.socket.parent) == 0o700
    assert daemon.call("daemon.ping", admin=True)["protocol"] == 1  # the admin socket answers too


def test_existing_socket_directory_the_user_made_is_used_as_it_is(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path) -> None:
    """``--socket`` in a directory the user made (0755: others may list it, not write it) is not
    memoryd's to chmod (issue 20 item 8): it keeps its mode, and the socket in it is 0600, so no
    other user can connect. memoryd's own directories are tightened (test_file_modes.py)."""
    loose = short_tmp / "loose"
    loose.mkdir()
    loose.chmod(0o755)
    daemon = start_daemon(socket=loose / "memoryd.sock")
    assert _mode(loose) == 0o755
    assert _mode(daemon.socket) == 0o600
    daemon.assert_alive()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give the directory to another user")
def test_looser_socket_directory_owned_by_another_user_is_refused(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path) -> None:
    theirs = short_tmp / "theirs"
    theirs.mkdir()
    theirs.chmod(0o755)
    os.chown(theirs, NOBODY, NOBODY)
    refused = start_daemon("refused", socket=theirs / "memoryd.sock", start=False)
    assert refused.run_to_exit() == 2
    assert "accessible to other users" in refused.stderr_text()
    assert _mode(theirs) == 0o755  # not ours: left as it was
    assert not refused.socket.exists()

    # Positive control: once the directory is ours, the same daemon starts in it; a directory
    # memoryd did not create keeps its mode (others may list it, not write it).
    os.chown(theirs, os.getuid(), os.getgid())
    refused.start()
    assert _mode(theirs) == 0o755
    assert _mode(refused.socket) == 0o600
    refused.assert_alive()


def test_stale_socket_file_is_replaced_at_start(start_daemon: Callable[..., DaemonHandle],
                                               short_tmp: Path) -> None:
    sock_dir = short_tmp / "stale"
    sock_dir.mkdir(mode=0o700)
    path = sock_dir / "memoryd.sock"
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(path))
    leftover.close()  # the file stays; nobody listens (a daemon that was killed)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with pytest.raises(ConnectionRefusedError):
        probe.connect(str(path))
    probe.close()

    daemon = start_daemon(socket=path)  # start() waits for a ping answered by this daemon's pid
    assert _mode(path) == 0o600
    daemon.assert_alive()


def test_second_daemon_on_the_same_socket_exits_2_and_the_first_keeps_serving(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    first = start_daemon("first")
    second = start_daemon("second", socket=first.socket, start=False)
    assert second.run_to_exit() == 2
    assert "already serving" in second.stderr_text()
    # The loser must not remove the winner's socket files on its way out.
    assert first.socket.exists(), "the second daemon deleted the first daemon's agent socket"
    assert first.admin_socket.exists(), "the second daemon deleted the first daemon's admin socket"
    first.assert_alive()
    assert first.call("daemon.ping", admin=True)["pid"] == first.proc.pid  # type: ignore[union-attr]


def test_second_daemon_on_the_same_data_dir_exits_2_and_the_first_keeps_serving(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    first = start_daemon("first")
    written = first.write("written before the second daemon tried to start")
    second = start_daemon("second", data_dir=first.data_dir, start=False)
    assert second.run_to_exit() == 2
    assert "owns the data directory" in second.stderr_text()
    assert not second.socket.exists()
    first.assert_alive()
    assert first.call("memory.get", {"id": written["id"]})["status"] == "active"
