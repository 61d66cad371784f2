"""The real HostProbe: the host's CPU is read over the probe's own interval, whichever thread reads it."""

from __future__ import annotations

import threading
import time

import psutil

from memoryd.daemon.governor import HostProbe, Readings
from tests.daemon._burners import cpu_burners


def read_in_a_new_thread(probe: HostProbe) -> Readings:
    """The daemon's scheduler samples from any of its pool threads, some never used before."""
    out: list[Readings] = []
    t = threading.Thread(target=lambda: out.append(probe.read()))
    t.start()
    t.join()
    return out[0]


def test_a_busy_host_reads_busy_from_a_thread_that_never_read_before() -> None:
    probe = HostProbe()
    with cpu_burners(psutil.cpu_count() or 2):
        time.sleep(1.5)
        first = read_in_a_new_thread(probe)
        time.sleep(1.0)
        second = read_in_a_new_thread(probe)
    # A burner on every core: other processes hold (nearly) all of the machine. Half is
    # the governor's default busy threshold; a thread's first psutil.cpu_percent read 0.
    assert first.cpu_percent >= 50.0, first
    assert second.cpu_percent >= 50.0, second


def test_an_interval_after_the_burners_stop_reads_below_the_busy_one() -> None:
    probe = HostProbe()
    with cpu_burners(psutil.cpu_count() or 2):
        time.sleep(1.0)
        busy = read_in_a_new_thread(probe)
        psutil.cpu_percent(interval=None)  # this thread's own reading of the host starts here
    time.sleep(1.0)
    quiet = read_in_a_new_thread(probe)
    host = psutil.cpu_percent(interval=None)  # the host over the probe's last interval
    assert busy.cpu_percent >= 50.0, busy
    # Only the last interval counts: the busy second before it does not linger. On a machine
    # that other work kept busy meanwhile, the probe must say so too.
    if host >= 80.0:
        assert quiet.cpu_percent >= 50.0, (busy, quiet, host)
    else:
        assert quiet.cpu_percent < busy.cpu_percent and abs(quiet.cpu_percent - host) <= 25.0, \
            (busy, quiet, host)
