"""The model worker's client under the two races of its lifecycle.

A real worker process (``python -m memoryd.models.worker``, models off: the
``ping`` op needs none) is started by the real client. The interleavings are
forced at two points of the client's own process, never by sleeping:

* ``subprocess.Popen.wait`` (and ``poll``): holds the reader of a dead worker
  after it saw the end of the stream and before it fails that worker's
  requests, with the process not yet reaped (as the kernel has it for a moment);
* ``memoryd.models.frames.FramedSocket.send``: holds a request just before
  it is written, or writes an ``exit`` in front of it, which makes the worker
  stop reading exactly as its idle timeout does (the same ``break`` in
  ``worker.serve``), so the request arrives at a worker that will never read it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from memoryd.models.frames import FramedSocket
from memoryd.models.worker_client import ModelWorker

#: Hang guard for each wait; a request stranded by the old code waited for the worker timeout.
WAIT_S = 20.0


@pytest.fixture
def worker() -> Iterator[ModelWorker]:
    w = ModelWorker(["--embedder", "none", "--llm", "none", "--log-level", "warning"], timeout_s=WAIT_S)
    yield w
    w.stop()


def test_a_dead_workers_reader_never_fails_the_next_workers_request(
        worker: ModelWorker, monkeypatch: pytest.MonkeyPatch) -> None:
    first_pid = worker.request("ping")
    assert isinstance(first_pid, int)

    old_reader_at_wait = threading.Event()
    release_old_reader = threading.Event()
    old_readers: list[threading.Thread] = []
    real_wait = subprocess.Popen.wait

    def wait(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        if self.pid == first_pid and threading.current_thread().name == "memoryd-worker-reader":
            old_readers.append(threading.current_thread())
            old_reader_at_wait.set()
            release_old_reader.wait(WAIT_S)
        return real_wait(self, timeout)

    real_poll = subprocess.Popen.poll

    def poll(self: subprocess.Popen[bytes]) -> int | None:
        # A killed process closes its sockets before it can be reaped: until the old
        # reader goes on, the first worker still looks alive to poll().
        if self.pid == first_pid and not release_old_reader.is_set():
            return None
        return real_poll(self)

    send_held = threading.Event()
    release_send = threading.Event()
    real_send = FramedSocket.send

    def send(self: FramedSocket, obj: Any) -> None:
        # The request itself (a new worker's first message, its options, goes through too).
        if threading.current_thread().name == "second-request" and obj.get("op") == "ping":
            send_held.set()
            release_send.wait(WAIT_S)
        real_send(self, obj)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    monkeypatch.setattr(subprocess.Popen, "poll", poll)
    monkeypatch.setattr(FramedSocket, "send", send)

    os.kill(first_pid, signal.SIGKILL)
    assert old_reader_at_wait.wait(WAIT_S), "the first worker's reader never saw it die"

    outcome: dict[str, Any] = {}

    def second_request() -> None:
        try:
            outcome["pid"] = worker.request("ping")
        except Exception as exc:  # the assertion below reports it
            outcome["error"] = exc

    requester = threading.Thread(target=second_request, name="second-request")
    requester.start()
    # The second request is registered with a new worker and about to be written...
    assert send_held.wait(WAIT_S)
    # ...when the first worker's reader goes on and fails what it believes is its own.
    release_old_reader.set()
    old_readers[0].join(WAIT_S)
    release_send.set()
    requester.join(WAIT_S)

    assert "error" not in outcome, f"the second request failed: {outcome.get('error')!r}"
    assert isinstance(outcome.get("pid"), int) and outcome["pid"] != first_pid
    assert worker.started_total == 2


def test_a_request_that_meets_the_workers_idle_exit_is_served_by_a_fresh_worker(
        worker: ModelWorker, monkeypatch: pytest.MonkeyPatch) -> None:
    first_pid = worker.request("ping")
    real_send = FramedSocket.send
    raced: list[int] = []

    def send(self: FramedSocket, obj: Any) -> None:
        if obj.get("op") == "ping" and not raced:
            # The worker's idle timer fires just as this request is written: it reads
            # the exit first, stops reading, says bye and exits 0 with the ping unread.
            raced.append(1)
            real_send(self, {"id": 0, "op": "exit"})
        real_send(self, obj)

    monkeypatch.setattr(FramedSocket, "send", send)
    second_pid = worker.request("ping")

    assert raced == [1]
    assert isinstance(second_pid, int) and second_pid != first_pid
    assert worker.started_total == 2
