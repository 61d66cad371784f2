"""Socket files: a private directory, a stale-socket probe, and an atomic bind.

Which socket directories memoryd may tighten: its own. A directory it creates
is made 0700 (every missing component). An existing one is memoryd's own when
memoryd named it itself: the default agent socket directory
(``$XDG_RUNTIME_DIR/memoryd/``, else the platform state dir) and any
``memoryd-admin/`` (the operator socket's directory, whose place memoryd picks
beside the agent socket's). Such a directory that exists looser is tightened
when the user owns it, as PROTOCOL.md says. The folder of a path the user gave
(``--socket /tmp/x.sock``: /tmp) is not memoryd's: its mode is never changed;
it is used as it is when only its owner can write it, and refused when others
can (a shared /tmp included), with the fix in the message.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import structlog

from memoryd import privatefs
from memoryd.config import ADMIN_DIR_NAME, Config
from memoryd.errors import MemorydError

log = structlog.get_logger(__name__)


class SocketInUse(MemorydError):
    """A live daemon already answers on the socket path."""


class SocketDirUnsafe(MemorydError):
    """The socket directory is open to other users and not memoryd's to tighten."""


def is_memoryd_socket_dir(path: Path) -> bool:
    """Whether ``path`` is a socket directory memoryd names itself (so it may tighten it)."""
    if path.name == ADMIN_DIR_NAME:
        return True
    return path.absolute() == Config().resolved_socket().parent.absolute()


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` 0700, or check the existing one: see the module's docstring."""
    try:
        verdict = privatefs.ensure_private_dir(path, what="socket directory", own=is_memoryd_socket_dir(path))
    except privatefs.NotPrivate as exc:
        raise SocketDirUnsafe(exc.message) from None
    if verdict.action == privatefs.TIGHTEN:
        log.warning("socket.dir_tightened", path=str(path), mode=privatefs.mode_text(verdict.mode))


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
