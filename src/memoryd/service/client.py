"""The client the CLI, tests and benchmarks have always imported from here.

It is :mod:`memoryd.client`, the public client library; this module re-exports
it so ``from memoryd.service.client import Client, ClientError, NotRunning``
keeps working (``Client.send_raw`` and ``Client.read_message`` included).
"""

from __future__ import annotations

from memoryd.client import AccessDenied, Client, ClientError, Disconnected, NotRunning, Timeout

__all__ = ["AccessDenied", "Client", "ClientError", "Disconnected", "NotRunning", "Timeout"]
