"""Who is on the other end of a Unix socket (SO_PEERCRED / LOCAL_PEERCRED)."""

from __future__ import annotations

import os
import socket
import struct
import sys


def peer_credentials(sock: socket.socket) -> tuple[int | None, int | None]:
    """(pid, uid) of the peer; pid is None where the platform does not say."""
    if hasattr(socket, "SO_PEERCRED"):
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", raw)
        return pid, uid
    if sys.platform == "darwin":  # pragma: no cover - exercised on macOS only
        local_peercred = 0x001
        raw = sock.getsockopt(0, local_peercred, struct.calcsize("iIh16I"))
        _version, uid = struct.unpack_from("iI", raw)
        return None, uid
    return None, None  # pragma: no cover


def allowed(uid: int | None, own_uid: int | None = None) -> bool:
    """Same user as the daemon, or root; an unknown peer is refused."""
    mine = os.getuid() if own_uid is None else own_uid
    return uid is not None and (uid == mine or uid == 0)
