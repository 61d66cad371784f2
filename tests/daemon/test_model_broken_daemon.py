"""A daemon whose LLM crashes its model worker natively: the model is marked broken and its jobs wait.

Real daemon, real socket, real worker, real crash: ``--llm`` is a GGUF that
makes llama.cpp abort (SIGABRT) when the first completion builds its context
(tests/daemon/crashing_gguf.py), the way the AMX build of issue 11 dies by
SIGSEGV. The bundled embedder runs, because extract waits for it too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DAEMONS
from tests.daemon.crashing_gguf import CRASH_CODE, CRASH_SIGNAL, write_crashing_gguf
from tests.integration.harness import DaemonHandle, hermetic_env, render_toml, run_cli, wait_until

pytestmark = pytest.mark.slow

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python)")


@pytest.fixture
def crashing_daemon(request: pytest.FixtureRequest, short_tmp: Path) -> Iterator[DaemonHandle]:
    home = short_tmp / "c1"
    home.mkdir(mode=0o700)
    gguf = write_crashing_gguf(home / "zero-layers.gguf")
    handle = DaemonHandle(name="c1", home=home, data_dir=home / "data",
                               socket=home / "s" / "memoryd.sock", embedder="bundled",
                               env=hermetic_env(home, {"COLUMNS": "250"}), llm=str(gguf))
    handle.config_path = home / "config.toml"
    handle.config_path.write_text(render_toml({"governor_enabled": False, "backoff_base_s": 0.2,
                                               "backoff_max_s": 0.5}))
    request.node.stash[DAEMONS] = [handle]
    yield handle.start(timeout_s=120.0)
    handle.close_clients()
    if handle.running:
        assert handle.stop() == 0


def llm_status(d: DaemonHandle) -> dict[str, Any]:
    status: dict[str, Any] = d.call("daemon.status")["models"]["llm"]
    return status


def extract_jobs(d: DaemonHandle) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in d.query("SELECT target, state, attempts FROM jobs WHERE pass = 'extract' "
                                      "ORDER BY id")]


def test_an_llm_that_crashes_the_worker_twice_is_marked_broken_and_its_jobs_wait(
        crashing_daemon: DaemonHandle) -> None:
    d = crashing_daemon
    first = d.write("Prod runs Redis 7 on cache1.internal:6379; staging is still on Redis 6.")["id"]
    wait_until(lambda: llm_status(d)["broken"], timeout_s=600, interval_s=0.5,
               message="the LLM to be marked broken after two crashes")

    status = d.call("daemon.status")
    llm = status["models"]["llm"]
    assert llm["model"] == "zero-layers.gguf"
    assert llm["broken"]["signal"] == CRASH_SIGNAL and llm["broken"]["exit_code"] == CRASH_CODE
    assert llm["broken"]["op"] == "complete" and llm["crashes_in_a_row"] == 2
    assert status["health"] == "degraded"
    problem = next(p for p in status["problems"] if "zero-layers.gguf" in p)
    assert f"{CRASH_SIGNAL} (exit {CRASH_CODE})" in problem and "memoryd doctor" in problem
    extract = status["passes"]["extract"]
    assert extract["state"] == "paused" and "crashed the model worker" in extract["reason"]
    assert "worker.died" in d.stderr_text() and "model.broken" in d.stderr_text()
    # The embedder was a bystander: not blamed, still usable.
    assert status["models"]["embedder"]["broken"] is None

    # The crashed job waits: ready, never dead, at most the first crash's attempt charged.
    [(target, state, attempts)] = extract_jobs(d)
    assert target == first and state == "ready" and attempts <= 1

    # A job queued after the mark is never tried: it waits with no attempt, and no worker
    # is started for the LLM (the embed pass still runs: positive control).
    starts_llm = llm_status(d)["crashes_total"]
    second = d.write("The build cache lives under /var/cache/build on ci-runner-3.")["id"]
    wait_until(lambda: "embed" not in d.call("memory.get", {"id": second})["pending"], timeout_s=300,
               message="the second memory's embed")
    time.sleep(2.0)  # runner cycles in which it could (wrongly) try the new extract job
    jobs = dict((t, (s, a)) for t, s, a in extract_jobs(d))
    assert jobs[second] == ("ready", 0)
    assert llm_status(d)["crashes_total"] == starts_llm
    assert d.scalar("SELECT count(*) FROM jobs WHERE state = 'dead'") == 0

    # `memoryd status` (the table) names the model, the signal and doctor; exit 1 = degraded.
    shown = run_cli(["status", "--socket", str(d.socket)], d.env)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    for part in ("BROKEN: zero-layers.gguf", f"{CRASH_SIGNAL} (exit {CRASH_CODE})", "memoryd doctor"):
        assert part in shown.stdout

    # `memoryd doctor` reports the daemon's mark (the model checks are test_doctor_models.py's).
    doctor = run_cli(["doctor", "--skip-models", "--json", "--socket", str(d.socket),
                      "--data-dir", str(d.data_dir)], d.env)
    findings = {f["check"]: f for f in json.loads(doctor.stdout)["findings"]}
    assert doctor.returncode == 1
    mark = findings["daemon.models.llm"]
    assert mark["level"] == "fail" and CRASH_SIGNAL in mark["detail"] and "restart memoryd" in mark["fix"]

    # A restart clears the mark.
    assert d.stop() == 0
    d.start(timeout_s=120.0)
    assert d.call("daemon.status")["models"]["llm"]["broken"] is None
