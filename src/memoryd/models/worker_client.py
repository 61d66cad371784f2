"""The daemon's side of the model worker: start it on demand, send requests,
notice when it exits (idle) or dies (crash).

Each worker process is a *generation* with its own table of requests in
flight. A request that meets a worker on its way out (it stopped reading when
its idle timer fired) is sent again to a fresh worker: a worker answers all
it read before it says bye, so what is still pending then was never read. A
worker that dies of a native crash fails its requests, and the crash is
counted against the model that was running (models/health.py): twice in a
row marks that model broken and its passes wait.

:class:`WorkerEmbedder` has the embedder interface (models/embedder.py), so
passes and searches do not know whether the model runs here or there.

The pipe is bounded (models/frames.py): a request over the frame limit is
refused before it is written (:class:`RequestTooLarge`); an answer whose
header is over it is never read into memory, and a worker that stops reading
our requests for ``timeout_s`` is killed, instead of a write blocking every
caller for ever. The worker's options go down the pipe as its first message,
not on its command line (``ps`` shows every user the command line; an LLM URL
may hold a token).
"""

from __future__ import annotations

import contextlib
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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psutil
import structlog

from memoryd.clock import rfc3339_from_epoch
from memoryd.errors import PassUnavailable
from memoryd.masking import mask_url
from memoryd.models.embedder import EmbedderBase, EmbedderUnavailable
from memoryd.models.frames import MAX_FRAME_BYTES, FramedSocket, FrameTooLarge, PeerNotReading
from memoryd.models.health import CrashLedger, describe_exit

log = structlog.get_logger(__name__)


class ModelUnavailable(PassUnavailable):
    """The worker says the model is switched off or cannot load."""


class ModelBroken(ModelUnavailable):
    """The model crashed the worker too often in a row (models/health.py); its jobs wait."""


class WorkerCrashed(RuntimeError):
    """The worker died (or hung past its timeout) while it had our request."""


class RequestTooLarge(RuntimeError):
    """A request is over the pipe's frame limit; it was not sent (the worker is unharmed)."""


class _Unread(Exception):
    """The worker stopped reading (idle exit, or asked to) before this request: send it again."""


#: Which model each op runs, for crash accounting (``ping`` runs none).
OP_MODEL = {"load": "embedder", "embed": "embedder", "llm_load": "llm", "complete": "llm"}
#: Ops whose answer shows the model ran: they end a run of crashes. A load is not
#: enough (the LLM's only checks its file; its context is built by the first completion).
OP_RAN_MODEL = frozenset({"embed", "complete"})
#: Times a request that met a worker on its way out is sent again to a fresh one.
SEND_TRIES = 3


@dataclass(eq=False)
class _Generation:
    """One worker process and the requests sent to it.

    Each process has its own table, so the reader of a worker that died fails
    that worker's requests and never those of the worker that replaced it.
    """

    proc: subprocess.Popen[bytes]
    conn: FramedSocket
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: request id -> (future, the model the op runs); guarded by ``lock``.
    pending: dict[int, tuple[Future[Any], str | None, str]] = field(default_factory=dict)
    #: Said bye: it reads no more requests (guarded by ``lock``).
    retiring: bool = False
    #: Its stream has ended: nothing may be added; its reader fails what is left (guarded by ``lock``).
    closed: bool = False
    #: We killed it (timeout, stop): its death is not the model's crash.
    killed: bool = False
    #: Why we killed it, when that is what its requests fail with (an answer over the limit…).
    killed_because: str | None = None

    def usable(self) -> bool:
        with self.lock:
            if self.retiring or self.closed:
                return False
        return self.proc.poll() is None

    def kill(self, because: str | None = None) -> None:
        if because is not None and self.killed_because is None:
            self.killed_because = because
        self.killed = True
        if self.proc.poll() is None:
            self.proc.kill()


class ModelWorker:
    """The model worker process of the moment, and the requests in flight to it.

    ``args`` are the worker's options (models/worker.py's ``main``); they are
    sent down its pipe, never put on its command line.
    """

    #: The module the worker runs (``python -m``).
    module = "memoryd.models.worker"

    def __init__(self, args: list[str], timeout_s: float, max_frame_bytes: int = MAX_FRAME_BYTES):
        self.args = args
        self.timeout_s = timeout_s
        self.max_frame_bytes = max_frame_bytes
        self._lock = threading.Lock()  # guards _gen: one worker started at a time
        self._gen: _Generation | None = None
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self.started_total = 0
        #: Native crashes per model, and the broken marks (cleared by a daemon restart).
        self.health = CrashLedger()

    @property
    def pid(self) -> int | None:
        gen = self._gen
        return gen.proc.pid if gen is not None and gen.proc.poll() is None else None

    def alive(self) -> bool:
        return self.pid is not None

    def _start(self) -> _Generation:
        parent, child = socket.socketpair()
        # Only the pipe's number on the command line: the options (an LLM URL may hold a
        # token) are the pipe's first message.
        cmd = [sys.executable, "-m", self.module, "--fd", str(child.fileno())]
        # Own session: a Ctrl-C at the daemon's terminal is the daemon's to handle;
        # it stops the worker itself.
        proc = subprocess.Popen(cmd, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                                start_new_session=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        child.close()
        conn = FramedSocket(parent, max_frame_bytes=self.max_frame_bytes, send_timeout_s=self.timeout_s)
        # If it died at once, its reader sees the end of the stream and reports that.
        with contextlib.suppress(OSError):
            conn.send({"id": 0, "op": "configure",
                       "args": [*self.args, "--max-frame-bytes", str(self.max_frame_bytes)]})
        gen = _Generation(proc, conn)
        self.started_total += 1
        threading.Thread(target=self._read, args=(gen,), name="memoryd-worker-reader", daemon=True).start()
        log.info("worker.started", pid=proc.pid)
        return gen

    def _current(self) -> _Generation:
        """The running worker that still reads requests, started if there is none."""
        with self._lock:
            gen = self._gen
            if gen is None or not gen.usable():
                gen = self._gen = self._start()
            return gen

    def _read(self, gen: _Generation) -> None:
        said_bye = False
        while True:
            try:
                msg = gen.conn.recv()
            except FrameTooLarge as exc:
                # Its body was never read: the stream cannot be followed any further.
                log.error("worker.answer_too_large", pid=gen.proc.pid, error=str(exc))
                gen.kill(because=f"the model worker sent an answer over the pipe's limit ({exc}); "
                                 "it was killed and a fresh one starts on the next request")
                break
            except (EOFError, OSError):
                break
            except Exception as exc:  # not a message of ours (unpickling failed): stop following it
                log.error("worker.answer_unreadable", pid=gen.proc.pid, error=f"{type(exc).__name__}: {exc}")
                gen.kill(because=f"the model worker sent an unreadable answer ({type(exc).__name__}); "
                                 "it was killed and a fresh one starts on the next request")
                break
            if not isinstance(msg, dict):
                continue
            if msg.get("id") is None:
                # The worker answers everything it read before it says bye.
                said_bye = True
                with gen.lock:
                    gen.retiring = True
                continue
            with gen.lock:
                entry = gen.pending.pop(msg["id"], None)
            if entry is None:
                continue  # its caller gave up waiting
            fut, model, op = entry
            if msg["ok"]:
                if model is not None and op in OP_RAN_MODEL:
                    self.health.succeeded(model)
                fut.set_result(msg["result"])
            elif msg.get("unavailable"):
                fut.set_exception(ModelUnavailable(msg["error"]))
            else:
                fut.set_exception(RuntimeError(msg["error"]))
        with gen.lock:
            # The stream ended: take no more requests, even before the process is reaped
            # (its sockets close before it becomes a zombie that poll() can see).
            gen.closed = True
        code = gen.proc.wait()
        with gen.lock:
            stranded = list(gen.pending.values())
            gen.pending.clear()
        with self._lock:
            if self._gen is gen:
                self._gen = None
        gen.conn.close()
        if said_bye:
            # Still pending after the bye: never read. The callers send them again.
            for fut, _, _ in stranded:
                fut.set_exception(_Unread())
            log.info("worker.exited_idle", pid=gen.proc.pid, code=code, resent=len(stranded))
            return
        in_flight: dict[str, str] = {}
        for _, model, op in stranded:
            if model is not None:
                in_flight.setdefault(model, op)
        broken = self.health.died(code, in_flight, killed=gen.killed, at=time.time())
        how = describe_exit(code)
        for fut, model, _ in stranded:
            if model in broken:
                fut.set_exception(ModelBroken(self.health.reason(model) or f"the {model} is broken"))
            else:
                fut.set_exception(WorkerCrashed(gen.killed_because
                                                or f"the model worker died mid-request ({how})"))
        log.warning("worker.died", pid=gen.proc.pid, code=code, exit=how, killed=gen.killed,
                    failed_requests=len(stranded), models=sorted(in_flight), broken=sorted(broken))

    def request(self, op: str, wait_s: float | None = None, **params: Any) -> Any:
        """Send one request (starting the worker if needed) and wait for its answer.

        Raises WorkerCrashed when the worker dies with it or does not answer in
        time, ModelBroken when that death marked the op's model broken.
        """
        model = OP_MODEL.get(op)
        timeout = wait_s or self.timeout_s
        for _ in range(SEND_TRIES):
            gen = self._current()
            req_id = next(self._ids)
            fut: Future[Any] = Future()
            with gen.lock:
                if gen.retiring or gen.closed:
                    continue  # it said bye since: take the next one
                gen.pending[req_id] = (fut, model, op)
            try:
                with self._send_lock:
                    gen.conn.send({"id": req_id, "op": op, **params})
            except FrameTooLarge as exc:
                with gen.lock:
                    gen.pending.pop(req_id, None)
                raise RequestTooLarge(f"the {op!r} request was not sent to the model worker: {exc}; "
                                      "fewer or shorter texts per request fit") from None
            except PeerNotReading:
                # Half a frame may be in the pipe: this worker cannot be spoken to any more.
                gen.kill(because=f"the model worker stopped reading requests (none taken for "
                                 f"{self.timeout_s:.0f} s); it was killed")
            except (OSError, ValueError):
                # The worker is going or gone: its reader settles the request (unread, or crashed).
                pass
            except BaseException:
                with gen.lock:
                    gen.pending.pop(req_id, None)
                raise
            try:
                return fut.result(timeout=timeout)
            except _Unread:
                continue
            except FutureTimeout:
                with gen.lock:
                    gen.pending.pop(req_id, None)
                gen.kill()
                raise WorkerCrashed(f"the model worker did not answer {op!r} within "
                                    f"{timeout:.0f} s; it was killed") from None
        raise WorkerCrashed(f"the model worker exited {SEND_TRIES} times before reading {op!r}; "
                            "see the daemon log")

    def stop(self) -> None:
        """Ask the worker to exit; kill it if it does not within 5 s."""
        with self._lock:
            gen = self._gen
        if gen is None:
            return
        try:
            with self._send_lock:
                gen.conn.send({"id": 0, "op": "exit"})
            gen.proc.wait(5)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            gen.kill()

    def kill(self) -> None:
        """Kill the worker now (its requests fail; not counted as a model crash)."""
        gen = self._gen
        if gen is not None:
            gen.kill()

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
        reason = self.worker.health.reason("embedder", self.name)
        if reason:
            raise ModelBroken(reason)
        try:
            self.path = self.worker.request("load")
        except (WorkerCrashed, ModelBroken):
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

    def unavailable_reason(self) -> str | None:
        """Off, failed to load, or marked broken by its crashes (then its jobs wait)."""
        return super().unavailable_reason() or self.worker.health.reason("embedder", self.name)

    def release(self) -> None:
        self.worker.stop()
        self._model_ready = False
        self.forget_queries()

    def status(self) -> dict[str, Any]:
        return {
            "loaded": self.loaded,
            "model": self.name,
            "spec": self.spec,
            "enabled": self.enabled,
            "path": self.path or (None if not self.enabled else self.spec),
            "last_used_at": None if self.last_used_at is None else rfc3339_from_epoch(self.last_used_at),
            "error": self.load_error,
            "worker_pid": self.worker.pid,
            "worker_rss_bytes": self.worker.rss_bytes(),
            "worker_starts": self.worker.started_total,
            **self.worker.health.status("embedder", self.name),
        }


class WorkerLLM:
    """The LLM, run in the model worker process (same interface as models.llm.LLM)."""

    def __init__(self, worker: ModelWorker, spec: str):
        self.worker = worker
        #: The spec as shown (masked: an LLM URL may hold a token); the worker has the real one.
        self.spec = mask_url(spec)
        self.name = self.spec
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
        broken = self.worker.health.reason("llm", self.name)
        if broken:
            return broken
        if self.load_error:
            return f"LLM failed to load: {self.load_error}"
        return None

    def load(self) -> None:
        if not self.enabled:
            raise ModelUnavailable(self.unavailable_reason() or "disabled")
        broken = self.worker.health.reason("llm", self.name)
        if broken:
            # Never start a worker for a model that crashed it twice: it would crash again.
            raise ModelBroken(broken)
        if self.loaded:
            return
        try:
            self.name = mask_url(str(self.worker.request("llm_load")))
        except ModelBroken:
            raise
        except ModelUnavailable as exc:
            self.load_error = mask_url(str(exc))
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
        return {"loaded": self.loaded, "enabled": self.enabled, "model": self.name, "spec": self.spec,
                "path": self.name if self._ready else None, "last_used_at": used, "error": self.load_error,
                **self.worker.health.status("llm", self.name)}
