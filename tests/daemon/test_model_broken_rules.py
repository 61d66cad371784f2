"""Which worker deaths count against a model, and how a broken model shows in status.

The ledger's rules (models/health.py) on literal exit statuses; the real
crash path runs in test_model_broken_worker.py and test_model_broken_daemon.py.
"""

from __future__ import annotations

import signal
from pathlib import Path

from rich.console import Console

from memoryd.daemon import status as status_mod
from memoryd.models.health import CrashLedger, describe_exit
from memoryd.statusview import status_renderable
from memoryd.store.engine import create_store_engine
from memoryd.store.migrate import upgrade

SEGV = -int(signal.SIGSEGV)
T = 1_780_000_000.0


def test_two_segfaults_in_a_row_with_only_the_llm_in_flight_mark_it_broken() -> None:
    ledger = CrashLedger()
    assert ledger.died(SEGV, {"llm": "complete"}, killed=False, at=T) == set()
    assert ledger.broken("llm") is None
    assert ledger.died(SEGV, {"llm": "complete"}, killed=False, at=T + 5) == {"llm"}
    crash = ledger.broken("llm")
    assert crash is not None and crash.code == -11 and crash.op == "complete"
    assert ledger.broken("embedder") is None
    reason = ledger.reason("llm", "gemma.gguf")
    assert reason is not None and "SIGSEGV (exit -11)" in reason and "memoryd doctor" in reason
    status = ledger.status("llm", "gemma.gguf")
    assert status["broken"]["signal"] == "SIGSEGV" and status["broken"]["exit_code"] == -11
    assert status["crashes_total"] == 2


def test_a_success_between_two_crashes_resets_the_count() -> None:
    ledger = CrashLedger()
    ledger.died(SEGV, {"llm": "complete"}, killed=False, at=T)
    ledger.succeeded("llm")
    assert ledger.died(SEGV, {"llm": "complete"}, killed=False, at=T + 1) == set()
    assert ledger.broken("llm") is None and ledger.status("llm")["crashes_total"] == 2


def test_deaths_that_say_nothing_about_one_model_are_not_counted() -> None:
    ledger = CrashLedger()
    for _ in range(3):
        ledger.died(-int(signal.SIGKILL), {"llm": "complete"}, killed=False, at=T)  # OOM killer, operator
        ledger.died(SEGV, {"llm": "complete"}, killed=True, at=T)  # we killed it (timeout)
        ledger.died(1, {"llm": "complete"}, killed=False, at=T)  # an exit code, not a crash
        ledger.died(SEGV, {"llm": "complete", "embedder": "embed"}, killed=False, at=T)  # both busy
        ledger.died(SEGV, {}, killed=False, at=T)  # nothing in flight
    assert ledger.broken("llm") is None and ledger.broken("embedder") is None
    assert ledger.status("llm")["crashes_total"] == 0
    # Positive control: the same crash with the LLM alone in flight counts.
    ledger.died(SEGV, {"llm": "complete"}, killed=False, at=T)
    assert ledger.status("llm")["crashes_in_a_row"] == 1


def test_exit_statuses_are_described_with_their_signal() -> None:
    assert describe_exit(-11) == "SIGSEGV (exit -11)"
    assert describe_exit(-6) == "SIGABRT (exit -6)"
    assert describe_exit(1) == "exit code 1"


def test_status_turns_degraded_and_the_table_names_the_broken_model(tmp_path: Path) -> None:
    engine = create_store_engine(f"sqlite:///{tmp_path / 'memoryd.db'}", busy_timeout_ms=5000)
    upgrade(engine)
    ledger = CrashLedger()
    for at in (T, T + 1):
        ledger.died(SEGV, {"llm": "complete"}, killed=False, at=at)
    models = {"embedder": {"enabled": True, "loaded": True, "path": "all-MiniLM-L6-v2", "error": None},
              "llm": {"enabled": True, "loaded": False, "model": "gemma.gguf", "path": None, "error": None,
                      **ledger.status("llm", "gemma.gguf")}}
    governor = {"state": "idle", "reason": "machine is free", "cpu_percent": 1.0,
                "mem_available_bytes": 8e9}
    snap = status_mod.snapshot(engine, 0.0, ["extract"], {}, models, governor, {})
    engine.dispose()
    assert snap["health"] == "degraded"
    problem = next(p for p in snap["problems"] if "gemma.gguf" in p)
    assert "SIGSEGV (exit -11)" in problem and "memoryd doctor" in problem

    console = Console(record=True, width=250)
    console.print(status_renderable({**snap, "uptime_s": 1.0, "passes": {}}))
    screen = console.export_text()
    assert "BROKEN: gemma.gguf crashed the worker 2x in a row, SIGSEGV (exit -11)" in screen
    assert "memoryd doctor" in screen
