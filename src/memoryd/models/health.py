"""Which model keeps crashing the model worker, and when it is marked broken.

A native crash in a model (llama.cpp's AMX kernels dying by SIGSEGV on a
build made with native CPU detection, a failed GGML_ASSERT aborting) kills
the whole worker process. One such crash costs one job attempt and a fresh
worker retries; but a model that crashes every time would spend every
attempt of every job and leave them all ``dead``. So the daemon counts, per
model, the native crashes in a row: the second marks the model broken. A
broken model's passes wait with their jobs (``unavailable_reason``), status
names it with its signal and points at ``memoryd doctor``, and the mark lasts
until the daemon restarts (the usual fix, a rebuild of llama-cpp-python,
needs one anyway).

Only deaths by a crash signal count, and only when one model had requests in
flight: a worker killed by us (timeout, stop), by the OOM killer or an
operator (SIGKILL, SIGTERM), or one that died while both models were busy
says nothing certain about either model. A request that succeeds resets its
model's count, so a crash now and then (one poison input) never adds up to
"broken".
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from typing import Any

import structlog

from memoryd.clock import rfc3339_from_epoch

log = structlog.get_logger(__name__)

#: Signals of a native fault in the process itself (not sent to it from outside).
CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT,
                           signal.SIGSYS, signal.SIGTRAP})
#: Native crashes in a row, with only this model in flight, that mark it broken.
BROKEN_AFTER = 2
LABELS = {"llm": "LLM", "embedder": "embedder"}
FIX = ("run `memoryd doctor` for the cause and the fix, then restart memoryd; "
       "until then this model's jobs wait, uncounted")


def describe_exit(code: int) -> str:
    """``SIGSEGV (exit -11)`` for a death by signal, ``exit code 1`` otherwise."""
    if code < 0:
        try:
            return f"{signal.Signals(-code).name} (exit {code})"
        except ValueError:
            return f"signal {-code} (exit {code})"
    return f"exit code {code}"


def crash_signal(code: int) -> signal.Signals | None:
    """The crash signal a process with exit status ``code`` died of, or None."""
    if code >= 0:
        return None
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return None
    return sig if sig in CRASH_SIGNALS else None


@dataclass(frozen=True)
class Crash:
    """One native crash of the worker while it ran a model."""

    code: int
    op: str
    at: float

    def as_dict(self) -> dict[str, Any]:
        sig = crash_signal(self.code)
        return {"signal": sig.name if sig else None, "exit_code": self.code, "op": self.op,
                "at": rfc3339_from_epoch(self.at)}


@dataclass
class _Record:
    in_a_row: int = 0
    total: int = 0
    last: Crash | None = None
    broken: Crash | None = None


class CrashLedger:
    """Per model: native crashes in a row, the total, and the broken mark (thread-safe)."""

    def __init__(self, broken_after: int = BROKEN_AFTER):
        self.broken_after = broken_after
        self._lock = threading.Lock()
        self._models: dict[str, _Record] = {}

    def _record(self, model: str) -> _Record:
        return self._models.setdefault(model, _Record())

    def succeeded(self, model: str) -> None:
        """A request for ``model`` was answered: its crashes are no longer in a row."""
        with self._lock:
            record = self._models.get(model)
            if record is not None:
                record.in_a_row = 0

    def died(self, code: int, in_flight: dict[str, str], *, killed: bool, at: float) -> set[str]:
        """Note a worker death (exit status ``code``) with ``in_flight`` {model: op} requests.

        Returns the models that are broken now among those in flight.
        """
        sig = crash_signal(code)
        if killed or sig is None or len(in_flight) != 1:
            if sig is not None and len(in_flight) > 1:
                log.warning("worker.crash_unattributed", code=code, models=sorted(in_flight))
            with self._lock:
                return {m for m in in_flight if self._record(m).broken is not None}
        (model, op), = in_flight.items()
        crash = Crash(code=code, op=op, at=at)
        with self._lock:
            record = self._record(model)
            record.in_a_row += 1
            record.total += 1
            record.last = crash
            if record.broken is None and record.in_a_row >= self.broken_after:
                record.broken = crash
                log.error("model.broken", model=model, signal=sig.name, code=code, op=op,
                          crashes_in_a_row=record.in_a_row)
            return {model} if record.broken is not None else set()

    def broken(self, model: str) -> Crash | None:
        """The crash that marked ``model`` broken, or None."""
        with self._lock:
            record = self._models.get(model)
            return None if record is None else record.broken

    def reason(self, model: str, name: str | None = None) -> str | None:
        """Why ``model``'s passes wait (for status and ``unavailable_reason``), or None."""
        with self._lock:
            record = self._models.get(model)
            if record is None or record.broken is None:
                return None
            crash, in_a_row = record.broken, max(record.in_a_row, self.broken_after)
        label = LABELS.get(model, model) + (f" {name}" if name else "")
        return (f"the {label} crashed the model worker {in_a_row} times in a row, the last time by "
                f"{describe_exit(crash.code)} during {crash.op!r}; marked broken: {FIX}")

    def status(self, model: str, name: str | None = None) -> dict[str, Any]:
        """The crash fields of ``model``'s entry in daemon.status ``models``."""
        with self._lock:
            record = self._models.get(model) or _Record()
            last, broken, in_a_row, total = record.last, record.broken, record.in_a_row, record.total
        out: dict[str, Any] = {"crashes_total": total, "crashes_in_a_row": in_a_row,
                               "last_crash": None if last is None else last.as_dict(), "broken": None}
        if broken is not None:
            out["broken"] = {**broken.as_dict(), "message": self.reason(model, name),
                             "fix": "memoryd doctor"}
        return out
