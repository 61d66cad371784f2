"""The daemon's side of the model worker: start it on demand, send requests,
notice when it exits (idle) or dies (crash).

:class:`WorkerEmbedder` has the embedder interface (models/embedder.py), so
passes and searches do not know whether the model runs here or there.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import psutil
import structlog

from memoryd.clock import rfc3339_from_epoch
from memoryd.errors import PassUnavailable
from memoryd.models.embedder import EmbedderBase, EmbedderUnavailable

log = structlog.get_logger(__name__)


class ModelUnavailable(PassUnavailable):
    """The worker says the model is switched off or cannot load."""


class WorkerCrashed(RuntimeError):
    """The worker died (or hung past its timeout) while it had our request."""


class ModelWorker:
    """One child process and the requests in flight to it."""

    def __init__(self, args: list[str], timeout_s: float):
        self.args = args
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._pending: dict[int, Future[Any]] = {}
        self._ids = itertools.count(1)
        self.started_total = 0

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def alive(self) -> bool:
        return self.pid is not None

    def _start(self) -> Connection:
        parent, child = socket.socketpair()
        cmd = [sys.executable, "-m", "memoryd.models.worker", "--fd", str(child.fileno()), *self.args]
        # Own session: a Ctrl-C at the daemon's terminal is the daemon's to handle;
        # it stops the worker itself.
        proc = subprocess.Popen(cmd, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                                start_new_session=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        child.close()
        conn = Connection(parent.detach())
        self._proc, self._conn = proc, conn
        self.started_total += 1
        threading.Thread(target=self._read, args=(proc, conn), name="memoryd-worker-reader",
                         daemon=True).start()
        log.info("worker.started", pid=proc.pid)
        return conn

    def _read(self, proc: subprocess.Popen[bytes], conn: Connection) -> None:
        said_bye = False
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            if msg.get("id") is None:
                said_bye = True
                continue
            fut = self._pending.pop(msg["id"], None)
            if fut is None:
                continue
            if msg["ok"]:
                fut.set_result(msg["result"])
            elif msg.get("unavailable"):
                fut.set_exception(ModelUnavailable(msg["error"]))
            else:
                fut.set_exception(RuntimeError(msg["error"]))
        code = proc.wait()
        with self._lock:
            if self._proc is proc:
                self._proc, self._conn = None, None
        conn.close()
        pending = [f for i, f in list(self._pending.items()) if not f.done()]
        for fut in pending:
            fut.set_exception(WorkerCrashed(f"the model worker exited with code {code} mid-request"))
        self._pending.clear()
        if said_bye and code == 0:
            log.info("worker.exited_idle", pid=proc.pid)
        else:
            log.warning("worker.died", pid=proc.pid, code=code, failed_requests=len(pending))

    def request(self, op: str, wait_s: float | None = None, **params: Any) -> Any:
        """Send one request (starting the worker if needed) and wait for its answer."""
        with self._lock:
            conn = self._conn if self.alive() and self._conn is not None else self._start()
        req_id = next(self._ids)
        fut: Future[Any] = Future()
        self._pending[req_id] = fut
        try:
            with self._send_lock:
                conn.send({"id": req_id, "op": op, **params})
        except (OSError, ValueError) as exc:
            self._pending.pop(req_id, None)
            raise WorkerCrashed(f"the model worker is gone: {exc}") from exc
        try:
            return fut.result(timeout=wait_s or self.timeout_s)
        except FutureTimeout:
            self._pending.pop(req_id, None)
            self.kill()
            raise WorkerCrashed(f"the model worker did not answer {op!r} within "
                                f"{wait_s or self.timeout_s:.0f} s; it was killed") from None

    def stop(self) -> None:
        """Ask the worker to exit; kill it if it does not within 5 s."""
        with self._lock:
            proc, conn = self._proc, self._conn
        if proc is None or conn is None:
            return
        try:
            with self._send_lock:
                conn.send({"id": 0, "op": "exit"})
            proc.wait(5)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            proc.kill()

    def kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def rss_bytes(self) -> int | None:
        pid = self.pid
        if pid is None:
            return None
        try:
            return int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            return None


class WorkerEmbedder(EmbedderBase):
    """The embedder, run in the model worker process."""

    def __init__(self, worker: ModelWorker, spec: str = "bundled"):
        super().__init__(spec)
        self.worker = worker
        self.path: str | None = None
        self._model_ready = False

    @property
    def loaded(self) -> bool:
        return self._model_ready and self.worker.alive()

    def load(self) -> None:
        """Have the worker load the model (starting the worker if needed)."""
        if not self.enabled:
            raise EmbedderUnavailable(self.unavailable_reason() or "disabled")
        if self.loaded:
            return
        try:
            self.path = self.worker.request("load")
        except WorkerCrashed:
            raise
        except RuntimeError as exc:
            self.load_error = str(exc)
            log.error("model.load_failed", model="embedder", error=self.load_error)
            raise EmbedderUnavailable(self.load_error) from exc
        self._model_ready = True

    def encode(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
        """Vectors from the worker; raises WorkerCrashed if it dies meanwhile."""
        self.load()
        result = self.worker.request("embed", texts=list(texts), threads=threads)
        self.last_used_at = time.time()
        return np.asarray(result, dtype=np.float32)

    def release(self) -> None:
        self.worker.stop()
        self._model_ready = False
        self.forget_queries()

    def status(self) -> dict[str, Any]:
        return {
            "loaded": self.loaded,
            "model": self.name,
            "enabled": self.enabled,
            "path": self.path or (None if not self.enabled else self.spec),
            "last_used_at": None if self.last_used_at is None else rfc3339_from_epoch(self.last_used_at),
            "error": self.load_error,
            "worker_pid": self.worker.pid,
            "worker_rss_bytes": self.worker.rss_bytes(),
            "worker_starts": self.worker.started_total,
        }


class WorkerLLM:
    """The LLM, run in the model worker process (same interface as models.llm.LLM)."""

    def __init__(self, worker: ModelWorker, spec: str):
        self.worker = worker
        self.spec = spec
        self.name = spec
        self.load_error: str | None = None
        self.last_used_at: float | None = None
        self._ready = False

    @property
    def enabled(self) -> bool:
        return self.spec != "none"

    @property
    def loaded(self) -> bool:
        return self._ready and self.worker.alive()

    def unavailable_reason(self) -> str | None:
        if not self.enabled:
            return "LLM disabled (--llm none); its jobs stay queued"
        if self.load_error:
            return f"LLM failed to load: {self.load_error}"
        return None

    def load(self) -> None:
        if not self.enabled:
            raise ModelUnavailable(self.unavailable_reason() or "disabled")
        if self.loaded:
            return
        try:
            self.name = self.worker.request("llm_load")
        except ModelUnavailable as exc:
            self.load_error = str(exc)
            raise
        self._ready = True

    def complete(self, prompt: str, *, grammar: str | None = None, schema: dict[str, Any] | None = None,
                 max_tokens: int = 64, timeout_s: float = 60.0, threads: int | None = None,
                 stop: list[str] | None = None, family: str = "default") -> str:
        self.load()
        text = self.worker.request("complete", wait_s=timeout_s + 30, prompt=prompt, grammar=grammar,
                                   schema=schema, max_tokens=max_tokens, timeout_s=timeout_s,
                                   threads=threads, stop=stop, family=family)
        self.last_used_at = time.time()
        return str(text)

    def status(self) -> dict[str, Any]:
        used = None if self.last_used_at is None else rfc3339_from_epoch(self.last_used_at)
        return {"loaded": self.loaded, "enabled": self.enabled, "path": self.name if self._ready else None,
                "last_used_at": used, "error": self.load_error}
