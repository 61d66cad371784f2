"""systemd integration without libsystemd: sd_notify and socket activation.

Both are no-ops when the daemon was not started by systemd.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

LISTEN_FDS_START = 3


def notify(message: str, env: Mapping[str, str] | None = None) -> bool:
    """Send one sd_notify message ("READY=1", "WATCHDOG=1", ...); False when not under systemd."""
    env = os.environ if env is None else env
    address = env.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(address)
            sock.sendall(message.encode())
        except OSError:
            return False
    return True


def watchdog_interval_s(env: Mapping[str, str] | None = None) -> float | None:
    """Half of systemd's watchdog timeout, or None when there is no watchdog."""
    env = os.environ if env is None else env
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2_000_000


def inherited_sockets(env: Mapping[str, str] | None = None) -> dict[str, socket.socket]:
    """Listening Unix sockets passed by systemd (LISTEN_FDS), keyed by their path."""
    env = os.environ if env is None else env
    if env.get("LISTEN_PID") != str(os.getpid()):
        return {}
    count = int(env.get("LISTEN_FDS", "0") or 0)
    found = {}
    for fd in range(LISTEN_FDS_START, LISTEN_FDS_START + count):
        sock = socket.socket(fileno=fd)
        if sock.family != socket.AF_UNIX:
            sock.detach()
            continue
        name = sock.getsockname()
        if isinstance(name, str) and name:
            sock.setblocking(False)
            found[str(Path(name))] = sock
    return found
