"""A real ``memoryd run`` daemon for the search suite, driven over its real socket.

The daemon is a child process on a fresh directory under /tmp (so the socket
path stays far below the 108-byte limit), seeded over the socket and stopped
with SIGTERM. Tests that change the store behind the daemon's back (states the
tests must set at a chosen instant, or that no verb produces yet, such as a
candidate row) open the same SQLite file through ``create_store_engine``, i.e.
the same driver and hooks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from memoryd.service.client import Client, NotRunning

EMBED_TIMEOUT_S = 900.0
#: Search tests are about search, not about yielding the CPU: the governor would
#: shrink embed batches on a shared machine, and an idle model worker would exit.
DEFAULT_CONFIG: dict[str, Any] = {"governor_enabled": False, "model_idle_s": 3600.0}


class SearchDaemon:
    """One ``memoryd run`` child process and a client connection to it."""

    def __init__(self, root: Path, label: str, embedder: str, config: dict[str, Any] | None = None,
                 db_url: str | None = None):
        self.root = root
        #: ``--db-url`` (a PostgreSQL database); None keeps the SQLite file in the data dir.
        self.store_url = db_url
        self.label = label
        self.embedder = embedder
        self.data_dir = root / f"{label}-data"
        self.socket = root / f"{label}-run" / "s" / "m.sock"
        self.log_path = root / f"{label}.log"
        values = {**DEFAULT_CONFIG, **(config or {})}
        self.config_path = root / f"{label}.toml"
        self.config_path.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in values.items()))
        self.proc: subprocess.Popen[bytes] | None = None
        self._client: Client | None = None
        self._engines: list[Engine] = []
        assert len(str(self.socket)) < 100, self.socket

    # -- life -----------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> SearchDaemon:
        self.socket.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
        env["HF_HUB_OFFLINE"] = "1"
        cmd = [sys.executable, "-m", "memoryd", "run", "--data-dir", str(self.data_dir),
               "--socket", str(self.socket), "--embedder", self.embedder, "--llm", "none",
               "--log-format", "json"]
        cmd += ["--config", str(self.config_path)]
        if self.store_url is not None:
            cmd += ["--db-url", self.store_url]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=env, cwd=str(self.root))
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self.proc.returncode} at start:\n"
                                   f"{self.log_tail()}")
            if self.socket.exists():
                try:
                    self.call("daemon.ping")
                    return self
                except (OSError, ConnectionError, NotRunning):
                    # The socket file appears at bind, a moment before listen: refused until then.
                    self._drop_client()
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"{self.label} did not answer daemon.ping in {timeout_s} s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 40.0) -> int | None:
        """SIGTERM and wait; returns the exit code (None if it had to be killed)."""
        self._drop_client()
        for engine in self._engines:
            engine.dispose()
        self._engines.clear()
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def log_tail(self, n: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-n:] if self.log_path.exists() else ""

    # -- protocol ---------------------------------------------------------------
    def _drop_client(self) -> None:
        if self._client is not None:
            with contextlib.suppress(OSError):
                self._client.close()
            self._client = None

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One request on the kept connection (reopened after a transport failure)."""
        if self._client is None:
            self._client = Client(self.socket, timeout_s=120.0)
        try:
            return self._client.call(method, params)
        except (OSError, ConnectionError):
            self._drop_client()
            raise

    def write(self, content: str, **params: Any) -> str:
        """memory.write; returns the new id (a duplicate fails the test)."""
        result = self.call("memory.write", {"content": content, **params})
        assert "duplicate_of" not in result, (content, params)
        return str(result["id"])

    def write_many(self, items: list[dict[str, Any]]) -> list[str]:
        """memory.write_many in chunks of 1000; returns the ids in order."""
        ids: list[str] = []
        for start in range(0, len(items), 1000):
            out = self.call("memory.write_many", {"items": items[start:start + 1000]})["results"]
            assert not any("duplicate_of" in r for r in out)
            ids += [r["id"] for r in out]
        return ids

    def search(self, query: str, **params: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.call("memory.search", {"query": query, **params})
        return result

    def search_ids(self, query: str, **params: Any) -> list[str]:
        return [r["id"] for r in self.search(query, **params)["results"]]

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.call("daemon.status")
        return result

    def wait_embedded(self, timeout_s: float = EMBED_TIMEOUT_S) -> dict[str, Any]:
        """Wait until no embed job is open and the embedder is loaded; return the status.

        A store with nothing to embed never loads the model, so a vector
        search (answered lexically meanwhile) starts the load.
        """
        deadline = time.monotonic() + timeout_s
        nudged = 0.0
        while True:
            status = self.status()
            queue = status["queues"]["embed"]
            loaded = status["models"]["embedder"]["loaded"]
            assert queue["dead"] == 0, (queue, status["passes"]["embed"], self.log_tail())
            if loaded and queue["ready"] + queue["leased"] + queue["failed"] == 0:
                return status
            if not loaded and queue["ready"] + queue["leased"] == 0 and time.monotonic() > nudged:
                self.search("warm up the embedder", mode="vector")
                nudged = time.monotonic() + 2.0
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.label}: embedding not done in {timeout_s} s: {queue}, "
                                     f"{status['models']['embedder']}")
            time.sleep(0.2)

    # -- the store, behind the daemon's back ---------------------------------------
    @property
    def db_url(self) -> str:
        return self.store_url or f"sqlite:///{self.data_dir / 'memoryd.db'}"

    def engine(self) -> Engine:
        """An engine on the daemon's database (same driver, same hooks); disposed at stop."""
        from memoryd.store.engine import create_store_engine

        engine = create_store_engine(self.db_url, busy_timeout_ms=30000)
        self._engines.append(engine)
        return engine


class DaemonFolder:
    """A short folder under /tmp (a socket path must fit in 108 bytes) for the daemons a test
    starts; :meth:`close` stops every one of them, a failed test's too, and removes it."""

    def __init__(self, prefix: str):
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        self.started: list[SearchDaemon] = []

    def daemon(self, label: str, embedder: str, config: dict[str, Any],
               db_url: str | None = None) -> SearchDaemon:
        daemon = SearchDaemon(self.path, label, embedder, config, db_url=db_url)
        self.started.append(daemon)
        return daemon

    def close(self) -> None:
        for daemon in self.started:
            daemon.stop()
        shutil.rmtree(self.path, ignore_errors=True)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def ids_of(result: dict[str, Any]) -> set[str]:
    return {r["id"] for r in result["results"]}


def stop_cleanly(daemon: SearchDaemon) -> None:
    """SIGTERM the daemon and require a clean exit (PROTOCOL.md: exit 0 within 30 s)."""
    code = daemon.stop()
    assert code == 0, f"{daemon.label} exited with {code}:\n{daemon.log_tail()}"
