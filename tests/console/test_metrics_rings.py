"""daemon/metrics.py's rings stay bounded and turn cumulative counters into per-second rates."""

from __future__ import annotations

from memoryd.daemon.metrics import MetricsSeries, Reading, Sampler


class FakeProbe:
    """CPU seconds that grow by half a second a reading, and a fixed RSS (beside the real
    psutil probe that test_daemon_methods reads through a running daemon)."""

    def __init__(self) -> None:
        self.cpu = 0.0

    def cpu_seconds(self) -> float:
        self.cpu += 0.5
        return self.cpu

    def rss_bytes(self) -> int:
        return 64 * 2**20


def test_the_rings_keep_at_most_their_capacity_however_long_it_runs() -> None:
    series = MetricsSeries(10.0, fine_points=360, coarse_every=30, coarse_points=288)
    for i in range(30 * 288 + 500):  # past both capacities
        series.add(Reading(at=i * 10.0, processed={"embed": i * 3}, writes=i))
    hour, day = series.result("hour"), series.result("day")
    assert len(hour["points"]) == 360 and hour["capacity"] == 360 and hour["interval_s"] == 10.0
    assert len(day["points"]) == 288 and day["interval_s"] == 300.0
    assert hour["points"][-1]["processed_per_s"] == {"embed": 0.3}
    assert day["points"][-1]["writes_per_s"] == 0.1 and day["points"][-1]["step_s"] == 300.0


def test_a_point_is_the_rate_between_two_readings_and_the_first_reading_is_only_a_baseline() -> None:
    t = [100.0]
    counters = {"writes": 0, "searches": 0}
    sampler = Sampler(MetricsSeries(10.0), clock=lambda: t[0],
                      queues=lambda: {"embed": {"ready": 4, "failed": 1, "leased": 2, "dead": 3}},
                      passes=lambda: {"embed": {"processed_total": counters["writes"], "errors_total": 0}},
                      writes=lambda: counters["writes"], searches=lambda: counters["searches"],
                      probe=FakeProbe())
    sampler.sample()
    assert sampler.series.result("hour")["points"] == []
    counters.update(writes=50, searches=20)
    t[0] += 10.0
    sampler.sample()
    [point] = sampler.series.result("hour")["points"]
    assert (point["writes_per_s"], point["searches_per_s"]) == (5.0, 2.0)
    assert point["queues"] == {"embed": 7} and point["dead"] == {"embed": 3}
    assert point["processed_per_s"] == {"embed": 5.0}
    assert point["cpu_percent"] == 5.0  # 0.5 CPU s over 10 s
    assert point["rss_bytes"] == 64 * 2**20
