"""The classify pass end to end: the bundled embedder on the labelled kinds of tests/data.

Every item of tests/data/kinds.jsonl (231 notes, one gold kind each; see
tests/data/README.md) is written with kind ``auto`` to a real daemon; the pass
resolves them from their stored vectors and the shipped prototypes. The
accuracy is computed here against the gold labels, not taken from the code,
and apart for the notes held out from tuning and the notes that are now
prototypes themselves (tests/data/README.md, kinds_tune/kinds_holdout).

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
#: tests/data/README.md: 116 of kinds.jsonl's notes are tuning notes, shipped as prototypes (a
#: classifier looks better on them than it is); the other 115 are held out. Scored apart.
HELD_OUT = {item["text"] for item in load_jsonl("kinds_holdout.jsonl")}
CONFIGURED_KINDS = {"fact", "decision", "preference", "procedure", "event", "task", "observation",
                    "conversation"}

#: Measured on 2026-12-01 (issue 14's classifier, 297 prototypes) with all-MiniLM-L6-v2 on
#: x86-64: held-out 107 of 115 = 0.930, tuning 114 of 116. (Before issue 14: 154 of 231 =
#: 0.667 over the whole file.) Each floor sits a few notes below: 16 held-out notes are decided
#: by a lead under 0.05, and a CPU or torch build that moves vectors in the last digits can flip
#: such near-ties either way; a real regression (a lost cue, a wrong prototype) costs more.
HELD_OUT_FLOOR = 0.88  # 6 notes of slack
TUNING_FLOOR = 0.95  # 4 notes of slack: these notes are prototypes themselves
#: The same run: held out, 96 of 99 right (0.97) with kind_confidence >= 0.75, 11 of 16 (0.69)
#: below. The confidence must mean something: the sure ones are more often right.
CONFIDENT = 0.75  # 0.5 + 5 x classify_margin (0.05): the lead at which the embedding decides alone

#: The requeue daemon sends a lead under 0.09 to the LLM (0.05 leaves only ~17 of the 231
#: notes waiting today): ~41 wait, more than one classify batch (32), and by the documented
#: formula exactly those whose default confidence is under 0.5 + 5 x 0.09.
REQUEUE_MARGIN = 0.09
REQUEUE_CONFIDENT = 0.5 + 5 * REQUEUE_MARGIN
#: Loading the model and embedding 231 notes on a loaded 2-core machine (a hang guard).
CLASSIFY_TIMEOUT_S = 900.0


def _write_labelled(d: E2EDaemon, agent: str, items: list[dict[str, Any]]) -> dict[str, str]:
    """Write these labelled notes with kind auto; return text -> memory id."""
    result = d.call("memory.write_many", {"items": [
        {"content": item["text"], "agent_id": agent, "kind": "auto"} for item in items]})
    ids = [r["id"] for r in result["results"]]
    assert len(set(ids)) == len(items)
    return {item["text"]: memory_id for item, memory_id in zip(items, ids, strict=True)}


def _classify_jobs(d: E2EDaemon, ids: list[str]) -> dict[str, tuple[Any, ...]]:
    """id -> (state, attempts, run_after, last_error, updated_at) of its classify job."""
    marks = ",".join("?" * len(ids))
    rows = d.query(f"SELECT target, state, attempts, run_after, last_error, updated_at FROM jobs "
                   f"WHERE pass = 'classify' AND target IN ({marks})", tuple(ids))
    return {r[0]: r[1:] for r in rows}


def _all_done(jobs: dict[str, tuple[Any, ...]], ids: list[str]) -> bool:
    """Every one of ``ids`` has a classify job, and all are done: judged on one read of the
    queue. (Two reads let CI return early: the first saw no jobs yet, all() of nothing was
    true, and the second counted the jobs the embed pass had just enqueued, still ready.)"""
    return len(jobs) == len(ids) and all(job[0] == "done" for job in jobs.values())


@pytest.fixture(scope="module")
def default_run(embedder_daemon: E2EDaemon) -> dict[str, dict[str, Any]]:
    """The labelled notes classified with the default configuration: text -> memory.get."""
    d = embedder_daemon
    by_text = _write_labelled(d, "e2e-classify", KINDS)
    ids = list(by_text.values())
    wait_until(lambda: _all_done(_classify_jobs(d, ids), ids),
               timeout_s=CLASSIFY_TIMEOUT_S, interval_s=0.5, message="classify to finish the labelled notes")
    return {text: get(d, memory_id) for text, memory_id in by_text.items()}


def test_classify_resolves_the_labelled_kinds_above_the_floor_with_method_and_confidence(
        embedder_daemon: E2EDaemon, default_run: dict[str, dict[str, Any]]) -> None:
    gold = {item["text"]: item["kind"] for item in KINDS}
    confusions = Counter((gold[t], r["kind"]) for t, r in default_run.items() if r["kind"] != gold[t])
    for name, texts, floor in (("held-out", [t for t in gold if t in HELD_OUT], HELD_OUT_FLOOR),
                               ("tuning", [t for t in gold if t not in HELD_OUT], TUNING_FLOOR)):
        right = sum(default_run[t]["kind"] == gold[t] for t in texts)
        assert right / len(texts) >= floor, (
            f"{name} accuracy {right}/{len(texts)} = {right / len(texts):.3f} < {floor}; "
            f"most common (gold, given) over the file: {confusions.most_common(6)}")

    rows = list(default_run.values())
    assert {row["kind"] for row in rows} == CONFIGURED_KINDS, "every kind is given to some note"
    # No LLM is configured and classify_llm is off: the embedding decides every one.
    assert {row["kind_method"] for row in rows} == {"embedding"}
    confidences = [row["kind_confidence"] for row in rows]
    assert all(0.5 <= c <= 1.0 for c in confidences), sorted(confidences)[:3] + sorted(confidences)[-3:]
    held = [t for t in default_run if t in HELD_OUT]
    sure = [t for t in held if default_run[t]["kind_confidence"] >= CONFIDENT]
    unsure = [t for t in held if default_run[t]["kind_confidence"] < CONFIDENT]
    sure_acc = sum(default_run[t]["kind"] == gold[t] for t in sure) / len(sure)
    unsure_acc = sum(default_run[t]["kind"] == gold[t] for t in unsure) / len(unsure)
    assert sure_acc > unsure_acc, (sure_acc, len(sure), unsure_acc, len(unsure))

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
    d = new_daemon(root, "cllm", embedder="bundled", llm="none",
                   config={"classify_llm": True, "classify_margin": REQUEUE_MARGIN})
    try:
        d.start(timeout_s=MODEL_START_TIMEOUT_S)
        by_text = _write_labelled(d, "e2e-classify-llm", KINDS)
        ids = list(by_text.values())

        def settled() -> bool:
            jobs = _classify_jobs(d, ids)
            later = time.time() + 60.0  # put back for minutes, not failed and retried in seconds
            return len(jobs) == len(ids) and all(
                state == "done" or (state == "ready" and run_after > later) for state, _, run_after, *_ in
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
    for text in waiting:
        row = rows[text]
        assert (row["kind_method"], row["kind_confidence"]) == (None, None), row
        assert "classify" in row["pending"]
        state, attempts, run_after, last_error, put_back_at = jobs[by_text[text]]
        assert (state, attempts, last_error) == ("ready", 0, None), jobs[by_text[text]]
        assert run_after - put_back_at == pytest.approx(300.0, abs=1.0)  # "put back for 5 minutes"
    # Decided without the LLM: the embedding's own choice, the same as with the defaults.
    for text in decided:
        assert rows[text]["kind_method"] == "embedding"
        assert rows[text]["kind"] == default_run[text]["kind"], text

    # Which ones wait follows from the documented rule: a lead under classify_margin, i.e. a
    # default-run confidence under 0.5 + 5 x classify_margin. Near-ties at the boundary are left
    # out (two daemons batch the texts differently, which moves vectors in the last digits).
    clear = [t for t in rows if abs(default_run[t]["kind_confidence"] - REQUEUE_CONFIDENT) > 0.002]
    assert {t for t in clear if t in waiting} == {
        t for t in clear if default_run[t]["kind_confidence"] < REQUEUE_CONFIDENT}

    status = d.call("daemon.status")
    assert status["health"] == "healthy", status["problems"]  # --llm none is a choice
    assert status["passes"]["classify"]["state"] == "active"  # it still classifies what it can
    assert status["queues"]["classify"]["dead"] == 0
    assert status["queues"]["classify"]["ready"] == len(waiting)

    # The put-back jobs are not tried again in a loop: a few runner cycles later, unchanged.
    time.sleep(3.0)
    assert _classify_jobs(d, [by_text[t] for t in waiting]) == jobs


def test_classify_status_note_counts_every_memory_waiting_for_the_llm(
        waiting_for_llm: tuple[E2EDaemon, dict[str, str]]) -> None:
    d, _ = waiting_for_llm
    waiting = int(d.scalar(
        "SELECT count(*) FROM memories WHERE agent_id = 'e2e-classify-llm' AND kind = 'auto'"))
    # The waiting notes are spread over the pass's batches of 32 (231 notes written): a note
    # that counted only the last batch (the bug this guards) says fewer.
    assert waiting >= 2
    note = d.call("daemon.status")["passes"]["classify"]["note"]
    assert note == f"{waiting} memories wait for the LLM"
