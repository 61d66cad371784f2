"""The daemon's recent history, kept in memory in fixed-size rings: ``metrics.series``.

Every ``metrics_interval_s`` (10 s by default) the daemon takes one reading of
its cumulative counters (jobs processed and failed per pass, writes committed,
searches answered, its own CPU seconds) and its gauges (jobs waiting and dead
per pass, its RSS). A point is the difference of two readings divided by the
time between them, so a rate is per second over that step. Two rings keep the
points: the fine one a point per reading for the last hour (360 points at
10 s), the coarse one a point per 30 readings for the last day (288 at 5 min).
Both are ``deque(maxlen=...)``: memory stays bounded however long the daemon
runs, and a restart starts them empty (the history is a picture, not a record).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import psutil

from memoryd.clock import rfc3339_from_epoch

#: Points the fine ring holds (an hour at 10 s).
FINE_POINTS = 360
#: Readings per coarse point, and points the coarse ring holds (a day at 5 min).
COARSE_EVERY = 30
COARSE_POINTS = 288
WINDOWS = ("hour", "day")


@dataclass(frozen=True)
class Reading:
    """The daemon's counters and gauges at one instant (``at``: epoch seconds)."""

    at: float
    waiting: Mapping[str, int] = field(default_factory=dict)  # per pass: ready + failed + leased
    dead: Mapping[str, int] = field(default_factory=dict)
    processed: Mapping[str, int] = field(default_factory=dict)  # per pass, cumulative
    errors: Mapping[str, int] = field(default_factory=dict)  # per pass, cumulative
    writes: int = 0  # memories committed, cumulative
    searches: int = 0  # searches answered, cumulative
    cpu_s: float = 0.0  # this process's user + system CPU seconds, cumulative
    rss_bytes: int = 0


class ProcessProbe(Protocol):
    """The host readings a sample needs (psutil in the daemon, a fake in a unit test)."""

    def cpu_seconds(self) -> float: ...

    def rss_bytes(self) -> int: ...


class PsutilProbe:
    """This process's CPU seconds and resident memory, from psutil."""

    def __init__(self) -> None:
        self._proc = psutil.Process()

    def cpu_seconds(self) -> float:
        times = self._proc.cpu_times()
        return float(times.user + times.system)

    def rss_bytes(self) -> int:
        return int(self._proc.memory_info().rss)


def _rate(now: Mapping[str, int], before: Mapping[str, int], dt: float) -> dict[str, float]:
    # A pass absent before (registered later) counts from zero; a counter that went down
    # (a reset) reads as no work rather than a negative rate.
    return {name: round(max(0, n - before.get(name, 0)) / dt, 4) for name, n in now.items()}


def point(before: Reading, now: Reading) -> dict[str, Any]:
    """One chart point: the rates between two readings, and ``now``'s gauges."""
    dt = max(now.at - before.at, 1e-6)
    return {
        "t": rfc3339_from_epoch(now.at),
        "step_s": round(dt, 3),
        "queues": dict(now.waiting),
        "dead": dict(now.dead),
        "processed_per_s": _rate(now.processed, before.processed, dt),
        "errors_per_s": _rate(now.errors, before.errors, dt),
        "writes_per_s": round(max(0, now.writes - before.writes) / dt, 4),
        "searches_per_s": round(max(0, now.searches - before.searches) / dt, 4),
        "cpu_percent": round(max(0.0, now.cpu_s - before.cpu_s) / dt * 100.0, 2),
        "rss_bytes": now.rss_bytes,
    }


class MetricsSeries:
    """Two bounded rings of points, fed one reading at a time (thread-safe)."""

    def __init__(self, interval_s: float, fine_points: int = FINE_POINTS,
                 coarse_every: int = COARSE_EVERY, coarse_points: int = COARSE_POINTS):
        self.interval_s = interval_s
        self.coarse_every = coarse_every
        self.fine: deque[dict[str, Any]] = deque(maxlen=fine_points)
        self.coarse: deque[dict[str, Any]] = deque(maxlen=coarse_points)
        self._last: Reading | None = None
        self._coarse_base: Reading | None = None
        self._since_coarse = 0
        self._lock = threading.Lock()

    def add(self, reading: Reading) -> None:
        """Take one reading: a fine point from the last one, a coarse point every ``coarse_every``."""
        with self._lock:
            if self._last is None or self._coarse_base is None:
                self._last = self._coarse_base = reading  # the baseline: no rate yet
                return
            self.fine.append(point(self._last, reading))
            self._last = reading
            self._since_coarse += 1
            if self._since_coarse >= self.coarse_every:
                self.coarse.append(point(self._coarse_base, reading))
                self._coarse_base = reading
                self._since_coarse = 0

    def result(self, window: str) -> dict[str, Any]:
        """The ``metrics.series`` answer for ``window`` (``hour``: the fine ring, ``day``: the coarse)."""
        with self._lock:
            ring = self.fine if window == "hour" else self.coarse
            step = self.interval_s if window == "hour" else self.interval_s * self.coarse_every
            return {"window": window, "interval_s": step, "capacity": ring.maxlen,
                    "points": list(ring)}


class Sampler:
    """Takes a Reading from the daemon's parts and feeds it to a MetricsSeries.

    ``counters`` returns the cumulative ints (writes, searches) and per-pass totals that
    live in the daemon's objects; ``queues`` reads the jobs table (per pass stats).
    """

    def __init__(self, series: MetricsSeries, *, clock: Callable[[], float],
                 queues: Callable[[], Mapping[str, Mapping[str, Any]]],
                 passes: Callable[[], Mapping[str, Mapping[str, Any]]],
                 writes: Callable[[], int], searches: Callable[[], int],
                 probe: ProcessProbe | None = None):
        self.series = series
        self.clock = clock
        self.queues = queues
        self.passes = passes
        self.writes = writes
        self.searches = searches
        self.probe: ProcessProbe = probe or PsutilProbe()

    def read(self) -> Reading:
        """One reading of every counter and gauge."""
        queues = self.queues()
        passes = self.passes()
        return Reading(
            at=self.clock(),
            waiting={n: int(q.get("ready", 0)) + int(q.get("failed", 0)) + int(q.get("leased", 0))
                     for n, q in queues.items()},
            dead={n: int(q.get("dead", 0)) for n, q in queues.items()},
            processed={n: int(s.get("processed_total", 0)) for n, s in passes.items()},
            errors={n: int(s.get("errors_total", 0)) for n, s in passes.items()},
            writes=self.writes(), searches=self.searches(),
            cpu_s=self.probe.cpu_seconds(), rss_bytes=self.probe.rss_bytes(),
        )

    def sample(self) -> None:
        """Read and record (the scheduler calls this every ``metrics_interval_s``)."""
        self.series.add(self.read())
