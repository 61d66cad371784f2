"""The ``memoryd`` command: a thin click shell over the client and the daemon.

One module per command group (daemon, memories, data, queue, review, audit,
service, project, store, reembed, capture, mcp, console), each importing the
shared options, client session and output helpers from ``common``; ``app``
gathers them under one group. Nothing here imports back: ``common`` imports no
command, and no command imports ``app``.
"""

from memoryd.cli.app import main

__all__ = ["main"]
