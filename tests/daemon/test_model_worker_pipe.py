"""The daemon ↔ model worker pipe: bounded frames, a worker that stops reading, options off argv.

Real ``python -m memoryd.models.worker`` processes started by the real client
(models off: ``ping`` and the unknown-op error need none), except one stand-in
(tests/daemon/runaway_worker.py) for an answer that runs away, which a real
worker refuses to send. Each wait has a hang guard; none is a claim about speed.
"""

from __future__ import annotations

import http.server
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from memoryd.models.worker_client import (
    ModelUnavailable,
    ModelWorker,
    RequestTooLarge,
    WorkerCrashed,
    WorkerLLM,
)

REPO = Path(__file__).resolve().parents[2]
#: Hang guard for a request, and the client's timeout (a stopped worker is given up after it).
TIMEOUT_S = 3.0
LIMIT = 1 << 20
TOKEN = "tok-3f9a1c5e-secret"


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.fixture
def worker() -> Iterator[ModelWorker]:
    w = ModelWorker(["--embedder", "none", "--llm", "none", "--log-level", "warning"], timeout_s=TIMEOUT_S,
                    max_frame_bytes=LIMIT)
    yield w
    w.stop()


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = int(server.server_address[1])
    server.server_close()
    return port


def test_the_workers_command_line_carries_its_pipe_and_nothing_it_was_configured_with(
        tmp_path: Path, closed_port: int) -> None:
    url = f"http://user:{TOKEN}@127.0.0.1:{closed_port}/v1"
    w = ModelWorker(["--embedder", "none", "--llm", url, "--data-dir", str(tmp_path),
                     "--log-level", "warning"], timeout_s=30)
    llm = WorkerLLM(w, url)
    try:
        pid = w.request("ping")
        line = cmdline(pid)
        assert "memoryd.models.worker --fd" in line  # positive control: it is the worker's
        assert TOKEN not in line and "--llm" not in line and str(tmp_path) not in line
        # The options did arrive, by the pipe: the worker tries the configured server.
        with pytest.raises(ModelUnavailable) as refused:
            llm.load()
        assert f"127.0.0.1:{closed_port}" in str(refused.value)
        assert TOKEN not in str(refused.value)
        status = llm.status()
        assert status["spec"] == f"http://user:***@127.0.0.1:{closed_port}/v1"
        assert TOKEN not in repr(status)
        assert TOKEN not in cmdline(os.getpid())
    finally:
        w.stop()


def test_a_request_over_the_frame_limit_is_refused_unsent_and_the_worker_goes_on(worker: ModelWorker) -> None:
    pid = worker.request("ping")
    with pytest.raises(RequestTooLarge, match=f"over the {LIMIT}-byte frame limit"):
        worker.request("embed", texts=["x" * (2 * LIMIT)])
    # Positive control: a request under the limit still goes through, to the same worker.
    assert worker.request("ping") == pid
    assert worker.started_total == 1


def test_a_real_worker_refuses_to_send_an_answer_over_the_limit_as_an_error_answer(
        worker: ModelWorker) -> None:
    pid = worker.request("ping")
    # The unknown-op error quotes the op's repr: four bytes for each \x01, so the answer is
    # twice the limit while the request is half of it.
    with pytest.raises(RuntimeError) as refused:
        worker.request("\x01" * (LIMIT // 2))
    shown = str(refused.value)[:300]
    assert shown.startswith("FrameTooLarge: a ") and f"over the {LIMIT}-byte frame limit" in shown, shown
    assert worker.request("ping") == pid
    with pytest.raises(RuntimeError, match="unknown op 'yy'"):  # positive control: the same path, small
        worker.request("yy")


class RunawayWorker(ModelWorker):
    module = "tests.daemon.runaway_worker"


def test_an_answer_whose_header_is_over_the_limit_is_never_read_and_its_worker_is_killed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    w = RunawayWorker(["--log-level", "warning"], timeout_s=30, max_frame_bytes=LIMIT)
    me = psutil.Process()
    before = me.memory_info().rss
    try:
        with pytest.raises(WorkerCrashed, match="over the pipe's limit") as failed:
            w.request("ping", wait_s=30)
        grown = me.memory_info().rss - before
        # It claimed 1 GiB and streams 256 MiB: none of it was read or allocated.
        assert grown < 32 << 20, f"the daemon's side grew by {grown} bytes"
        assert "1073741824-byte frame" in str(failed.value)
        assert w.pid is None
    finally:
        w.kill()


def test_a_worker_that_stops_reading_is_killed_and_its_request_fails_instead_of_hanging(
        worker: ModelWorker) -> None:
    pid = worker.request("ping")
    os.kill(pid, signal.SIGSTOP)  # it reads nothing more, as a wedged worker would
    outcome: dict[str, Any] = {}

    def send_big() -> None:
        try:
            worker.request("embed", texts=["y" * (LIMIT // 2)] * 1 + ["z" * (LIMIT // 3)])
        except Exception as exc:  # the assertions below judge it
            outcome["error"] = exc

    # Larger than the socket's buffers, under the frame limit: the write must wait for the reader.
    sender = threading.Thread(target=send_big, name="big-request")
    try:
        sender.start()
        sender.join(60)
        assert not sender.is_alive(), "the request to a worker that stopped reading never returned"
    finally:
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGCONT)
    assert isinstance(outcome.get("error"), WorkerCrashed), outcome
    assert "stopped reading requests" in str(outcome["error"])
    # Killed by us, so not a model crash; the next request gets a fresh worker.
    assert worker.health.status("embedder")["crashes_total"] == 0
    new_pid = worker.request("ping")
    assert new_pid != pid and worker.started_total == 2
