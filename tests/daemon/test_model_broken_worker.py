"""A model that crashes the real model worker twice in a row is marked broken.

The worker is the real ``python -m memoryd.models.worker`` and the crash is
real: llama.cpp aborts (SIGABRT) on a GGUF that declares zero layers
(tests/daemon/crashing_gguf.py). These tests drive the daemon's worker client
directly; tests/daemon/test_model_broken_daemon.py runs the same path in a
daemon.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.errors import PassUnavailable
from memoryd.models.worker_client import ModelBroken, ModelWorker, WorkerCrashed, WorkerLLM
from tests.daemon.crashing_gguf import CRASH_CODE, CRASH_SIGNAL, write_crashing_gguf

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python)")

GRAMMAR = 'root ::= " yes" | " no"'


@pytest.fixture
def crashing_llm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkerLLM]:
    # ggml prints a gdb backtrace before it aborts (~3 s); the worker inherits this switch.
    monkeypatch.setenv("GGML_NO_BACKTRACE", "1")
    gguf = write_crashing_gguf(tmp_path / "zero-layers.gguf")
    worker = ModelWorker(["--embedder", "none", "--llm", str(gguf), "--data-dir", str(tmp_path),
                          "--log-level", "warning"], timeout_s=120)
    yield WorkerLLM(worker, str(gguf))
    worker.stop()


def ask(llm: WorkerLLM) -> str:
    return llm.complete("Is water wet? Answer:", grammar=GRAMMAR, max_tokens=2, timeout_s=60)


def test_the_second_crash_in_a_row_marks_the_llm_broken_and_later_calls_start_no_worker(
        crashing_llm: WorkerLLM) -> None:
    llm = crashing_llm
    with pytest.raises(WorkerCrashed, match=f"{CRASH_SIGNAL} \\(exit {CRASH_CODE}\\)"):
        ask(llm)
    # One crash costs that job an attempt; the model is not broken yet.
    first = llm.status()
    assert first["broken"] is None and first["crashes_in_a_row"] == 1
    assert first["last_crash"]["signal"] == CRASH_SIGNAL and first["last_crash"]["op"] == "complete"
    assert llm.unavailable_reason() is None

    with pytest.raises(ModelBroken) as second:
        ask(llm)
    # Broken is "unavailable": the runner gives the jobs back uncounted and pauses the pass.
    assert isinstance(second.value, PassUnavailable)
    status = llm.status()
    assert status["model"] == "zero-layers.gguf"
    assert status["broken"]["signal"] == CRASH_SIGNAL and status["broken"]["exit_code"] == CRASH_CODE
    assert status["broken"]["op"] == "complete" and status["crashes_total"] == 2
    reason = llm.unavailable_reason()
    assert reason is not None
    for part in ("zero-layers.gguf", f"{CRASH_SIGNAL} (exit {CRASH_CODE})", "memoryd doctor"):
        assert part in reason

    starts = llm.worker.started_total
    with pytest.raises(ModelBroken):
        ask(llm)
    assert llm.worker.started_total == starts  # refused before any worker was started
