"""Where the daemon's sockets are, by PROTOCOL.md's rules.

Agent socket, first that applies: an explicit path, ``$MEMORYD_SOCKET``, the
config file's ``socket`` key, ``$XDG_RUNTIME_DIR/memoryd/memoryd.sock``, the
platform state dir. Operator socket: ``$MEMORYD_ADMIN_SOCKET`` or the config
file's ``admin_socket_path``, else ``memoryd-admin/memoryd-admin.sock`` in the
parent of the agent socket's directory. The rules live once, in
:class:`memoryd.config.Config` (the daemon binds by the same code); that module
imports only the standard library and platformdirs, so the client stays quick
to import.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from memoryd.config import Config, load_config


def socket_path(socket: str | os.PathLike[str] | None = None, *, admin: bool = False,
                config: str | os.PathLike[str] | Config | None = None) -> Path:
    """The socket to connect to.

    ``socket`` is the agent socket's path when given (``--socket``); with
    ``admin=True`` the operator socket is found beside it. ``config`` is a
    config file path or a loaded :class:`Config`; by default the file named by
    ``$MEMORYD_CONFIG``, else the platform config dir's, is read when it exists.
    """
    if isinstance(config, Config):
        cfg = config
        if socket is not None:
            cfg = dataclasses.replace(cfg, socket=os.fspath(socket))
    else:
        cfg = load_config(config, socket=os.fspath(socket) if socket is not None else None)
    return cfg.admin_socket() if admin else cfg.resolved_socket()
