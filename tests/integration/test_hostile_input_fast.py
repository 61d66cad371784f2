"""Hostile input over the real sockets, a few hundred frames per run (the slow suite sends 10,000+).

Hypothesis draws frames for every method both sockets register (random bytes, text that is not
JSON, JSON of other shapes, envelopes with wrong types, spoilt parameters, valid requests) and
sends them to one ``memoryd run``. tests/integration/hostile.py holds the strategies and the
checks: every line gets the answers JSON-RPC 2.0 says it must, with the request's id and a code
from PROTOCOL.md's table, never 1003 for an input error; a refused request changes no table's
row count and not the audit head; both sockets answer a ping after every batch; no acknowledged
write is lost. The counts go to a JSON file (and stdout with ``pytest -s``).

The named cases below are inputs that once got 1003, no answer or a dropped connection; each
states the answer PROTOCOL.md gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.integration import hostile
from tests.integration.harness import DaemonHandle

FAST_INPUTS = 300


@pytest.fixture(scope="module")
def quiet(module_new_db_url: Callable[[], str | None]) -> Iterator[DaemonHandle]:
    """The module's daemon, on SQLite and on PostgreSQL (the ``backend`` parameter)."""
    with hostile.quiet_daemon("hostile-fast", db_url=module_new_db_url()) as handle:
        yield handle


@pytest.fixture
def run(quiet: DaemonHandle) -> Iterator[hostile.HostileRun]:
    runner = hostile.HostileRun(quiet)
    try:
        yield runner
    finally:
        runner.close()


def test_hostile_frames_get_contract_answers_and_refusals_change_nothing(
        run: hostile.HostileRun, tmp_path_factory: pytest.TempPathFactory) -> None:
    agent, admin = hostile.method_tables()
    run.seed(20)

    # 100 batches of 3: FAST_INPUTS in one Hypothesis run.
    @settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(hostile.batches(agent, admin, min_size=3, max_size=3, with_oversize=False))
    def feed(batch: list[hostile.Frame]) -> None:
        run.feed(batch)

    hostile.run_until(FAST_INPUTS, feed, run.tally)
    lost = run.lost_rows()
    hostile.report(run.tally, "hostile_input_fast", tmp_path_factory.mktemp("hostile"))
    assert lost == [], f"acknowledged writes lost: {lost[:20]}"
    assert run.tally.inputs >= FAST_INPUTS
    # Positive controls: the mix reached the handlers, and some requests succeeded.
    assert run.tally.answers["ok"] > 0 and run.tally.answers["-32602"] > 0
    assert run.tally.refusals_checked > 0


def _request(method: str, params: Any, req_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}


def _answer(run: hostile.HostileRun, frame: hostile.Frame) -> dict[str, Any]:
    """Send one frame through the runner's checks (contract code, id, store unchanged when refused)
    and return its single answer."""
    answers = run.send(frame)
    assert len(answers) == 1, answers
    return answers[0]


AGENT = hostile.AGENT
KNOWN = [
    # A lone surrogate in the id: the answer could not be encoded as UTF-8 and was never sent.
    pytest.param(False, _request("daemon.ping", {}, "\ud800"), None, "\ud800", id="surrogate-id"),
    # ... and in an unknown parameter's name, echoed in data.field: the connection dropped.
    pytest.param(False, _request("memory.get", {"id": "mem_x", "\udc80": 1}), -32602, 1,
                 id="surrogate-param-name"),
    pytest.param(False, _request("memory.write", {"content": "surrogate owner", "agent_id": "a\ud800"}),
                 -32602, 1, id="surrogate-owner"),
    pytest.param(False, _request("memory.write", {"content": "x", "agent_id": AGENT,
                                                  "idempotency_key": "\udfff"}), -32602, 1,
                 id="surrogate-idempotency-key"),
    pytest.param(False, _request("memory.write", {"content": "x", "agent_id": AGENT,
                                                  "metadata": {"k": "\ud800"}}), -32602, 1,
                 id="surrogate-metadata"),
    pytest.param(False, _request("memory.search", {"query": "deploy \ud800", "agent_id": AGENT}), -32602, 1,
                 id="surrogate-query"),
    pytest.param(True, _request("review.decide", {"id": "prp_\ud800", "decision": "approve"}), -32602, 1,
                 id="surrogate-proposal-id"),
    # Integers past a double: math.isfinite raised OverflowError.
    pytest.param(False, _request("memory.write", {"content": "x", "agent_id": AGENT, "importance": 10**400}),
                 -32602, 1, id="importance-10e400"),
    pytest.param(False, _request("memory.write", {"content": "x", "agent_id": AGENT, "ttl_s": 10**400}),
                 -32602, 1, id="ttl-10e400"),
    # A ttl past year 9999: the expiry time overflowed in the writer thread.
    pytest.param(False, _request("memory.write", {"content": "x", "agent_id": AGENT, "ttl_s": 1e300}),
                 -32602, 1, id="ttl-past-year-9999"),
    # Timestamps whose UTC form leaves years 1..9999.
    pytest.param(False, _request("memory.write", {"content": "x", "agent_id": AGENT,
                                                  "valid_from": "0001-01-01T00:00:00+01:00"}), -32602, 1,
                 id="valid-from-before-year-1-utc"),
    pytest.param(False, _request("memory.search", {"query": "x", "agent_id": AGENT,
                                                   "as_of": "9999-12-31T23:59:59-01:00"}), -32602, 1,
                 id="as-of-after-year-9999-utc"),
    # Job ids past SQLite's 64-bit integers.
    pytest.param(True, _request("queue.retry", {"ids": [2**63]}), -32602, 1, id="job-id-2e63"),
    pytest.param(True, _request("queue.list", {"pass": "embed", "limit": 10, "state": "dead"}), None, 1,
                 id="queue-list-control"),
]


@pytest.mark.parametrize(("admin", "obj", "code", "answer_id"), KNOWN)
def test_known_hostile_request_gets_its_contract_answer(run: hostile.HostileRun, admin: bool,
                                                        obj: dict[str, Any], code: int | None,
                                                        answer_id: Any) -> None:
    answer = _answer(run, hostile.Frame(admin=admin, obj=obj))
    assert answer["id"] == answer_id
    if code is None:
        assert "result" in answer, answer
    else:
        assert answer["error"]["code"] == code, answer
    run.ping()


def test_frame_that_is_not_utf8_json_is_a_parse_error(run: hostile.HostileRun) -> None:
    """PROTOCOL.md frames are UTF-8: a UTF-16 or UTF-32 encoded request is not JSON text."""
    for encoding in ("utf-16-le", "utf-32"):
        data = '{"jsonrpc": "2.0", "id": 8, "method": "daemon.ping"}'.encode(encoding)
        answer = _answer(run, hostile.Frame(admin=False, raw=data))
        assert answer["id"] is None and answer["error"]["code"] == -32700, answer
    run.ping()


def test_timestamp_before_year_1000_is_stored_with_four_year_digits(run: hostile.HostileRun) -> None:
    """Stored times compare as strings, so they must be fixed-width: year 999 is "0999", not "999"
    (which sorted after every year from 1000 to 9989, so the row looked valid from the far future)."""
    written = run.daemon.call("memory.write", {"content": "the mill was built", "agent_id": AGENT,
                                               "valid_from": "0999-06-01T12:00:00+01:00"})
    got = run.daemon.call("memory.get", {"id": written["id"]})
    assert got["valid_from"] == "0999-06-01T11:00:00.000000Z"
    found = run.daemon.call("memory.search", {"query": "mill built", "agent_id": AGENT, "mode": "lexical",
                                              "valid_at": "2026-01-01T00:00:00Z"})
    assert written["id"] in [r["id"] for r in found["results"]]
