"""The resource governor: is the machine free (idle), in use (busy), or short of
memory or battery (paused)?

All host readings go through one small object, :class:`HostProbe`, that tests
replace with a fake; the decision itself is a pure function of readings,
thresholds and the previous state.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from memoryd.config import Config

IDLE, BUSY, PAUSED = "idle", "busy", "paused"


@dataclass(frozen=True)
class Readings:
    """One sample of the host."""

    cpu_percent: float  # system CPU excluding memoryd itself, 0..100 over all cores
    load_per_cpu: float  # 1-minute load average divided by the core count
    mem_available_bytes: int
    battery_percent: float | None
    on_battery: bool
    rss_bytes: int


@dataclass(frozen=True)
class GovernorState:
    state: str
    reason: str
    readings: Readings

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "reason": self.reason, **asdict(self.readings)}


@dataclass(frozen=True)
class Thresholds:
    """When the governor changes state (all from the config file)."""

    busy_cpu_percent: float = 50.0
    idle_cpu_percent: float = 30.0
    busy_load_per_cpu: float = 1.5
    pause_mem_available_bytes: int = 512 * 1024 * 1024
    pause_battery_percent: float = 20.0
    busy_on_battery: bool = True
    enabled: bool = True

    @classmethod
    def from_config(cls, cfg: Config) -> Thresholds:
        return cls(
            enabled=cfg.governor_enabled,
            busy_cpu_percent=cfg.governor_busy_cpu_percent,
            idle_cpu_percent=cfg.governor_idle_cpu_percent,
            busy_load_per_cpu=cfg.governor_busy_load_per_cpu,
            pause_mem_available_bytes=int(cfg.governor_pause_mem_available_mb * 1024 * 1024),
            pause_battery_percent=cfg.governor_pause_battery_percent,
            busy_on_battery=cfg.governor_busy_on_battery,
        )


def decide(r: Readings, t: Thresholds, previous: str = IDLE) -> tuple[str, str]:
    """(state, reason) for one sample. Between the idle and busy CPU thresholds
    the previous state holds, so the state does not flap around one value."""
    if not t.enabled:
        return IDLE, "governor disabled in the config (governor_enabled = false)"
    if r.mem_available_bytes < t.pause_mem_available_bytes:
        return PAUSED, (f"memory pressure: {r.mem_available_bytes // 2**20} MiB available "
                        f"< {t.pause_mem_available_bytes // 2**20} MiB")
    if r.on_battery and r.battery_percent is not None and r.battery_percent < t.pause_battery_percent:
        return PAUSED, f"on battery at {r.battery_percent:.0f}% (< {t.pause_battery_percent:.0f}%)"
    if r.cpu_percent >= t.busy_cpu_percent:
        return BUSY, f"other processes use {r.cpu_percent:.0f}% CPU (>= {t.busy_cpu_percent:.0f}%)"
    if r.load_per_cpu >= t.busy_load_per_cpu:
        return BUSY, f"load average {r.load_per_cpu:.2f} per core (>= {t.busy_load_per_cpu:.2f})"
    if r.on_battery and t.busy_on_battery:
        return BUSY, "on battery power"
    if previous == BUSY and r.cpu_percent > t.idle_cpu_percent:
        return BUSY, (f"other processes use {r.cpu_percent:.0f}% CPU "
                      f"(waiting for < {t.idle_cpu_percent:.0f}% to resume full speed)")
    return IDLE, f"machine is free ({r.cpu_percent:.0f}% CPU used by others)"


def _total_seconds(times: Any) -> float:
    """All CPU time in a psutil.cpu_times() sample; guest time is already in user time on Linux."""
    return float(sum(times)) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def _idle_seconds(times: Any) -> float:
    return float(times.idle) + getattr(times, "iowait", 0.0)


class HostProbe:
    """psutil readings of the host and of this process. Replace it in tests.

    The host's CPU is measured between this probe's own samples, not with
    ``psutil.cpu_percent(interval=None)``: that one measures since the previous call *in the
    calling thread*, and the scheduler samples from whichever of its pool threads is free, so a
    thread's first sample read 0 % (the governor said "machine is free" under full load) and a
    later one spanned whatever time had passed since that thread last ran.
    """

    def __init__(self) -> None:
        self._proc = psutil.Process(os.getpid())
        self._ncpu = psutil.cpu_count() or 1
        self._children: dict[int, psutil.Process] = {}
        self._lock = threading.Lock()
        # Prime the counters: each reading measures since the previous one.
        self._system_times = psutil.cpu_times()
        self._proc.cpu_percent(interval=None)

    def _system_cpu_percent(self) -> float:
        """Busy share of all cores since the previous reading, 0..100."""
        now = psutil.cpu_times()
        before, self._system_times = self._system_times, now
        total = _total_seconds(now) - _total_seconds(before)
        if total <= 0:
            return 0.0
        busy = total - max(0.0, _idle_seconds(now) - _idle_seconds(before))
        return min(100.0, max(0.0, 100.0 * busy / total))

    def _own_cpu_percent(self) -> float:
        """CPU % of memoryd and its children (the model worker is us, not "others")."""
        total = self._proc.cpu_percent(interval=None)
        live = {}
        for child in self._proc.children(recursive=True):
            known = self._children.get(child.pid, child)
            try:
                total += known.cpu_percent(interval=None)
                live[child.pid] = known
            except psutil.Error:
                continue
        self._children = live
        return total

    def read(self) -> Readings:
        with self._lock:  # the host's and memoryd's CPU over the same interval
            system = self._system_cpu_percent()
            own = self._own_cpu_percent() / self._ncpu
        try:
            load = os.getloadavg()[0] / self._ncpu
        except OSError:  # pragma: no cover - platforms without load averages
            load = 0.0
        battery = psutil.sensors_battery() if hasattr(psutil, "sensors_battery") else None
        return Readings(
            cpu_percent=max(0.0, system - own),
            load_per_cpu=load,
            mem_available_bytes=psutil.virtual_memory().available,
            battery_percent=None if battery is None else float(battery.percent),
            on_battery=bool(battery is not None and not battery.power_plugged),
            rss_bytes=self._proc.memory_info().rss,
        )


class Governor:
    """Samples the probe and keeps the current state (thread-safe reads)."""

    def __init__(self, probe: HostProbe, thresholds: Thresholds):
        self.probe = probe
        self.thresholds = thresholds
        self._lock = threading.Lock()
        first = probe.read()
        state, reason = decide(first, thresholds)
        self._current = GovernorState(state, reason, first)

    def sample(self) -> GovernorState:
        """Take a reading and update the state; returns the new state."""
        readings = self.probe.read()
        with self._lock:
            state, reason = decide(readings, self.thresholds, self._current.state)
            self._current = GovernorState(state, reason, readings)
            return self._current

    @property
    def current(self) -> GovernorState:
        with self._lock:
            return self._current
