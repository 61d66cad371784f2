"""The governor's decision is a pure function of readings, thresholds and the previous state."""

from __future__ import annotations

from dataclasses import replace

from memoryd.daemon.governor import BUSY, IDLE, PAUSED, Governor, Readings, Thresholds, decide

FREE = Readings(cpu_percent=5.0, load_per_cpu=0.2, mem_available_bytes=8 << 30,
                battery_percent=None, on_battery=False, rss_bytes=80 << 20)
T = Thresholds()


def test_free_machine_is_idle() -> None:
    state, reason = decide(FREE, T)
    assert state == IDLE and "free" in reason


def test_other_processes_cpu_above_threshold_is_busy() -> None:
    state, reason = decide(replace(FREE, cpu_percent=75.0), T)
    assert state == BUSY and "75%" in reason


def test_high_load_average_is_busy() -> None:
    assert decide(replace(FREE, load_per_cpu=2.0), T)[0] == BUSY


def test_busy_holds_between_idle_and_busy_thresholds() -> None:
    between = replace(FREE, cpu_percent=40.0)
    assert decide(between, T, previous=BUSY)[0] == BUSY
    assert decide(between, T, previous=IDLE)[0] == IDLE  # positive control: no flap up either


def test_memory_pressure_pauses_with_reason() -> None:
    state, reason = decide(replace(FREE, mem_available_bytes=100 << 20), T)
    assert state == PAUSED and "memory pressure" in reason


def test_low_battery_pauses_and_battery_alone_is_busy() -> None:
    assert decide(replace(FREE, on_battery=True, battery_percent=10.0), T)[0] == PAUSED
    assert decide(replace(FREE, on_battery=True, battery_percent=80.0), T)[0] == BUSY
    relaxed = replace(T, busy_on_battery=False)
    assert decide(replace(FREE, on_battery=True, battery_percent=80.0), relaxed)[0] == IDLE


def test_disabled_governor_is_always_idle() -> None:
    state, reason = decide(replace(FREE, cpu_percent=99.0), replace(T, enabled=False))
    assert state == IDLE and "disabled" in reason


class FakeProbe:
    """Replays readings; the real HostProbe is exercised by the integration test."""

    def __init__(self, readings: list[Readings]):
        self.readings = readings

    def read(self) -> Readings:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def test_governor_follows_samples_and_keeps_the_latest_readings() -> None:
    probe = FakeProbe([FREE, replace(FREE, cpu_percent=90.0), replace(FREE, cpu_percent=10.0)])
    gov = Governor(probe, T)  # type: ignore[arg-type]
    assert gov.current.state == IDLE
    assert gov.sample().state == BUSY
    after = gov.sample()
    assert after.state == IDLE and after.readings.cpu_percent == 10.0
    assert after.as_dict()["state"] == IDLE and "mem_available_bytes" in after.as_dict()
