"""Socket files: a private directory, a stale-socket probe, and an atomic bind."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from pathlib import Path

from memoryd.errors import MemorydError


class SocketInUse(MemorydError):
    """A live daemon already answers on the socket path."""


class SocketDirUnsafe(MemorydError):
    """The socket directory is looser than 0700 and not ours to tighten."""


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` as 0700, or tighten it when we own it; refuse otherwise."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if stat.S_IMODE(st.st_mode) & 0o077:
        if st.st_uid != os.getuid():
            raise SocketDirUnsafe(
                f"socket directory {path} is accessible to other users and owned by uid "
                f"{st.st_uid}; choose another --socket path or fix its mode to 0700"
            )
        path.chmod(0o700)


def probe(path: Path, timeout_s: float = 1.0) -> bool:
    """True when something accepts connections at ``path``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    try:
        s.connect(str(path))
        return True
    except (ConnectionRefusedError, FileNotFoundError, OSError):
        return False
    finally:
        s.close()


def bind_unix(path: Path, backlog: int = 128) -> socket.socket:
    """A listening socket at ``path``, mode 0600, in a 0700 directory.

    Binds under a temporary name, sets the mode, then renames into place, so
    no client ever sees the socket with looser permissions. A stale socket
    file (nobody answers) is replaced; a live one raises SocketInUse.
    """
    ensure_private_dir(path.parent)
    if path.exists() or path.is_symlink():
        if probe(path):
            raise SocketInUse(
                f"another memoryd is already serving {path}; stop it first "
                "(`memoryd status` shows its pid) or pass another --socket"
            )
        path.unlink()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(tmp))
        os.chmod(tmp, 0o600)
        os.rename(tmp, path)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    sock.setblocking(False)
    return sock
