"""Hostile input over the real sockets at volume: 10,000+ Hypothesis-drawn frames per run.

The frames and the checks are tests/integration/hostile.py's (see its docstring): every method of
both sockets, random bytes, text that is not JSON, JSON of other shapes, envelopes with wrong
types, spoilt parameters (wrong types, out of range, huge strings, deep nesting, lone surrogates,
NUL, unknown names) and valid requests, each answered per JSON-RPC 2.0 with a code from
PROTOCOL.md's table and never 1003; a refused request changes no table's row count and not the
audit head; both sockets answer a ping after every batch; no acknowledged write is lost.

The second test sends hostile frames on four connections at once while an honest client writes:
the group committer puts concurrent writes in one transaction, so one bad write that slipped past
validation and failed in the store would fail its neighbours' writes too. Every honest write must
be acknowledged and readable at the end.

Counts go to a JSON file under pytest's temp dir and to stdout (``pytest -s``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from memoryd.service.client import Client
from tests.integration import hostile
from tests.integration.harness import DaemonHandle

pytestmark = pytest.mark.slow

SLOW_INPUTS = 10_000
CONCURRENT_SENDERS = 4
CONCURRENT_INPUTS_EACH = 600
HONEST_WRITES = 600


@pytest.fixture(scope="module")
def quiet(module_new_db_url: Callable[[], str | None]) -> Iterator[DaemonHandle]:
    """The module's daemon, on SQLite and on PostgreSQL (the ``backend`` parameter)."""
    with hostile.quiet_daemon("hostile-slow", db_url=module_new_db_url()) as handle:
        yield handle


@pytest.mark.timeout(3600)
def test_ten_thousand_hostile_frames_get_contract_answers_and_refusals_change_nothing(
        quiet: DaemonHandle, tmp_path_factory: pytest.TempPathFactory) -> None:
    agent, admin = hostile.method_tables()
    run = hostile.HostileRun(quiet)
    try:
        run.seed(40)

        @settings(max_examples=800, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(hostile.batches(agent, admin, max_size=10))
        def feed(batch: list[hostile.Frame]) -> None:
            run.feed(batch)

        hostile.run_until(SLOW_INPUTS, feed, run.tally)
        lost = run.lost_rows()
        hostile.report(run.tally, "hostile_input_slow", tmp_path_factory.mktemp("hostile"))
    finally:
        run.close()
    assert lost == [], f"acknowledged writes lost: {lost[:20]}"
    assert run.tally.inputs >= SLOW_INPUTS
    # Positive controls: every kind of answer the mix is built to reach was reached.
    for code in ("ok", "-32700", "-32600", "-32601", "-32602", "1001", "1002", "1005"):
        assert run.tally.answers[code] > 0, f"no answer {code} in {dict(run.tally.answers)}"
    assert run.tally.refusals_checked > SLOW_INPUTS // 3
    assert set(agent) | set(admin) <= set(run.tally.by_method), "a registered method was never sent"


def _draw_frames(agent: list[str], admin: list[str], n: int) -> list[hostile.Frame]:
    """``n`` frames drawn by Hypothesis up front (its engine runs in one thread; the senders replay)."""
    out: list[hostile.Frame] = []

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(hostile.frames(agent, admin, with_oversize=False))
    def collect(frame: hostile.Frame) -> None:
        out.append(frame)

    while len(out) < n:
        collect()
    return out[:n]


@pytest.mark.timeout(3600)
def test_hostile_frames_on_other_connections_never_fail_an_honest_writer(
        quiet: DaemonHandle, tmp_path_factory: pytest.TempPathFactory) -> None:
    agent, admin = hostile.method_tables()
    runners = [hostile.HostileRun(quiet, check_store=False) for _ in range(CONCURRENT_SENDERS)]
    # One forget may erase rows another runner wrote: they share what was forgotten.
    for r in runners[1:]:
        r.forgotten_ids = runners[0].forgotten_ids
        r.forgotten_subjects = runners[0].forgotten_subjects
    for r in runners:
        r.seed(10)
    work = [_draw_frames(agent, admin, CONCURRENT_INPUTS_EACH) for _ in runners]
    failures: list[BaseException] = []
    honest: dict[str, str] = {}
    honest_errors: list[Any] = []

    def hostile_sender(r: hostile.HostileRun, frames: list[hostile.Frame]) -> None:
        try:
            for i in range(0, len(frames), 8):
                r.feed(frames[i:i + 8])
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    def honest_writer() -> None:
        with Client(quiet.socket, timeout_s=60) as c:
            for i in range(HONEST_WRITES):
                content = f"honest write {i}: the build server is ci-{i}.internal"
                try:
                    honest[c.call("memory.write", {"content": content, "agent_id": "honest-writer"})["id"]] \
                        = content
                except Exception as exc:
                    honest_errors.append((i, repr(exc)))

    threads = [threading.Thread(target=hostile_sender, args=(r, w)) for r, w in zip(runners, work,
                                                                                    strict=True)]
    threads.append(threading.Thread(target=honest_writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(1800)
    try:
        assert not failures, f"{len(failures)} sender(s) failed; first: {failures[0]}"
        assert honest_errors == [], f"honest writes refused: {honest_errors[:10]}"
        assert len(honest) == HONEST_WRITES
        with quiet.db() as conn:
            rows = dict(conn.execute("SELECT id, content FROM memories WHERE agent_id = 'honest-writer'"))
        assert {mid: rows.get(mid) for mid in honest} == honest
        lost = [x for r in runners for x in r.lost_rows()]
        total = hostile.Tally()
        for r in runners:
            total.inputs += r.tally.inputs
            total.lines += r.tally.lines
            total.answers.update(r.tally.answers)
            total.notifications += r.tally.notifications
            total.pings += r.tally.pings
            total.acknowledged += r.tally.acknowledged
            total.by_method.update(r.tally.by_method)
        total.acknowledged += len(honest)
        total.lost = len(lost)
        hostile.report(total, "hostile_input_concurrent", tmp_path_factory.mktemp("hostile"))
        assert lost == [], f"acknowledged writes lost: {lost[:20]}"
        assert total.inputs == CONCURRENT_SENDERS * CONCURRENT_INPUTS_EACH
    finally:
        for r in runners:
            r.close()
