"""DESIGN rule 5: one scope predicate on every read path, proven by negative tests.

A populated store holds the same three memories for two owners of every
scope (agents a1/a2, users u1/u2, projects p1/p2, sessions s1/s2) plus org
rows. Identical content gives identical BM25 scores and identical vectors, so
only the scope predicate can tell a1's row from a2's. Every search asserts the
other owner's rows are absent and a positive control is present in the same
result, in every mode (lexical, vector, hybrid), for an exact-phrase query,
with ``as_of`` and ``valid_at``, and on the fallback path of a daemon whose
embedder is off.

The ``as_of`` and ``valid_at`` variants ask about past times where the answer
must differ from now: every owner also has a row written after the ``as_of``
time (absent at ``as_of``) and a row valid only in 2020 (the only one present
at ``valid_at`` 2020-06-01), so a filter that is ignored fails them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.search._daemon import stop_cleanly

QUERY = "run the smoke tests against staging before tagging a release"
PHRASE = '"smoke tests against staging"'
CONTENT = {
    "procedure": "Run the smoke tests against staging before tagging a release.",
    "preference": "Squash-merge feature branches; keep a linear history on main.",
    "fact": "The staging database listens on port 5433, not 5432.",
}
OWNERS = {  # scope -> (the reader's owner, the other owner)
    "agent": ("a1", "a2"),
    "user": ("u1", "u2"),
    "project": ("p1", "p2"),
    "session": ("s1", "s2"),
}
KEY = {"agent": "agent_id", "user": "user_id", "project": "project", "session": "session_id"}
#: The reader whose keys are the first owner of every scope.
READER = {"agent_id": "a1", "user_id": "u1", "project": "p1", "session_id": "s1"}
MODES = ("lexical", "vector", "hybrid")


#: A row of every owner that was true only in 2020 (the one row visible at VALID_AT).
PAST = {"content": "In 2020 the smoke tests ran against the old staging cluster.", "kind": "fact",
        "valid_from": "2020-01-01T00:00:00Z", "valid_to": "2021-01-01T00:00:00Z"}
#: A row of every owner written after the as_of time (absent from an as_of search).
LATE = {"content": "Release tagging now waits for the smoke tests on staging to pass.", "kind": "fact"}
VALID_AT = "2020-06-01T00:00:00Z"
#: daemon label -> the as_of time of its seed: after the first writes, before the LATE rows.
SEEDED_AS_OF: dict[str, str] = {}


def _owners() -> list[tuple[str, str]]:
    return [(scope, owner) for scope, pair in OWNERS.items() for owner in pair] + [("org", "")]


def _item(scope: str, owner: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {**fields, "scope": scope, **({KEY[scope]: owner} if scope != "org" else {})}


def seed(daemon: Any) -> dict[tuple[str, str, str], str]:
    """Write the store; return ids keyed by (scope, owner, kind) (owner '' for org; the
    extra rows under the keys 'past' and 'late')."""
    keys: list[tuple[str, str, str]] = []
    items: list[dict[str, Any]] = []
    for scope, owner in _owners():
        for kind, content in CONTENT.items():
            keys.append((scope, owner, kind))
            items.append(_item(scope, owner, {"content": content, "kind": kind}))
        keys.append((scope, owner, "past"))
        items.append(_item(scope, owner, PAST))
    first = daemon.call("memory.write_many", {"items": items})["results"]
    assert not any("duplicate_of" in r for r in first)
    SEEDED_AS_OF[daemon.label] = max(r["recorded_at"] for r in first)
    time.sleep(0.01)  # the LATE rows are recorded strictly after the as_of time
    late_keys = [(scope, owner, "late") for scope, owner in _owners()]
    late = daemon.write_many([_item(scope, owner, LATE) for scope, owner in _owners()])
    ids = dict(zip(keys, [r["id"] for r in first], strict=True))
    ids.update(zip(late_keys, late, strict=True))
    return ids


#: A seeded daemon and the ids of its rows.
Seeded = tuple[Any, dict[tuple[str, str, str], str]]


@pytest.fixture(scope="module")
def store(spawn: Any, backend: str, module_new_db_url: Callable[[], str | None]) -> Iterator[Seeded]:
    daemon = spawn(f"scope-{backend}", embedder="bundled", db_url=module_new_db_url())
    ids = seed(daemon)
    daemon.wait_embedded()
    yield daemon, ids
    stop_cleanly(daemon)


@pytest.fixture(scope="module")
def store_off(spawn: Any, backend: str, module_new_db_url: Callable[[], str | None]) -> Iterator[Seeded]:
    """The same store on a daemon whose embedder is off: every search falls back to lexical."""
    daemon = spawn(f"scope-off-{backend}", embedder="none", db_url=module_new_db_url())
    ids = seed(daemon)
    yield daemon, ids
    stop_cleanly(daemon)


def select_ids(ids: dict[tuple[str, str, str], str], *, owners: set[tuple[str, str]] | None = None,
               kind: str | None = None) -> set[str]:
    return {v for (scope, owner, k), v in ids.items()
            if (owners is None or (scope, owner) in owners) and (kind is None or k == kind)}


MINE = {(scope, pair[0]) for scope, pair in OWNERS.items()} | {("org", "")}
THEIRS = {(scope, pair[1]) for scope, pair in OWNERS.items()}


def assert_scoped(result: dict[str, Any], ids: dict[tuple[str, str, str], str], *,
                  visible: set[tuple[str, str]], control: set[str]) -> None:
    got = {r["id"] for r in result["results"]}
    allowed = select_ids(ids, owners=visible)
    leaked = got - allowed
    assert not leaked, f"rows outside the reader's scope: {sorted(leaked)} ({result['mode_used']})"
    missing = control - got
    assert not missing, f"positive control absent: {sorted(missing)} ({result['mode_used']})"


VARIANTS = {
    "plain": {"query": QUERY},
    "phrase": {"query": PHRASE},
    "as_of": {"query": QUERY, "as_of": "seeded"},
    "valid_at": {"query": QUERY, "valid_at": VALID_AT},
}


def _params(variant: str, daemon: Any) -> dict[str, Any]:
    params = dict(VARIANTS[variant])
    if params.get("as_of") == "seeded":
        params["as_of"] = SEEDED_AS_OF[daemon.label]
    return params


def expected(variant: str, ids: dict[tuple[str, str, str], str],
             owners: set[tuple[str, str]]) -> tuple[set[str], set[str]]:
    """(rows of ``owners`` that must be in the answer, rows of anyone's that must not) at the
    variant's time."""
    if variant == "valid_at":  # only what was valid in mid-2020
        return (select_ids(ids, owners=owners, kind="past"),
                {v for (_, _, k), v in ids.items() if k != "past"})
    if variant == "as_of":  # what the store held before the LATE rows were written
        return (select_ids(ids, owners=owners, kind="procedure"), select_ids(ids, kind="late"))
    return select_ids(ids, owners=owners, kind="procedure"), set()


def assert_at_its_time(result: dict[str, Any], variant: str, ids: dict[tuple[str, str, str], str],
                       owners: set[tuple[str, str]]) -> None:
    """The variant's time filter changed the answer: its controls are in, the rows it
    excludes are out, and nothing of another owner leaks."""
    control, excluded = expected(variant, ids, owners)
    assert_scoped(result, ids, visible=owners, control=control)
    shown = excluded & {r["id"] for r in result["results"]}
    assert not shown, f"{variant}: rows outside its time were returned: {sorted(shown)}"


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("mode", MODES)
def test_reader_sees_its_own_rows_and_org_never_the_other_owners(store: Any, mode: str,
                                                                  variant: str) -> None:
    daemon, ids = store
    result = daemon.search(**_params(variant, daemon), mode=mode, k=50, **READER)
    assert result["mode_used"] == mode
    assert_at_its_time(result, variant, ids, MINE)
    assert not select_ids(ids, owners=THEIRS) & {r["id"] for r in result["results"]}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("mode", MODES)
def test_other_owner_sees_only_its_rows(store: Any, mode: str, variant: str) -> None:
    daemon, ids = store
    theirs = {"agent_id": "a2", "user_id": "u2", "project": "p2", "session_id": "s2"}
    result = daemon.search(**_params(variant, daemon), mode=mode, k=50, **theirs)
    assert_at_its_time(result, variant, ids, THEIRS | {("org", "")})


@pytest.mark.parametrize("scope", list(OWNERS))
@pytest.mark.parametrize("mode", MODES)
def test_one_key_opens_one_scope_only(store: Any, mode: str, scope: str) -> None:
    """An agent key alone shows a1's rows and org rows; no user, project or session rows."""
    daemon, ids = store
    mine = OWNERS[scope][0]
    result = daemon.search(QUERY, mode=mode, k=50, **{KEY[scope]: mine})
    visible = {(scope, mine), ("org", "")}
    assert_scoped(result, ids, visible=visible,
                  control={ids[(scope, mine, "procedure")], ids[("org", "", "procedure")]})


@pytest.mark.parametrize("mode", MODES)
def test_request_without_owner_fields_sees_only_org_rows(store: Any, mode: str) -> None:
    daemon, ids = store
    result = daemon.search(QUERY, mode=mode, k=50)
    assert_scoped(result, ids, visible={("org", "")}, control={ids[("org", "", "procedure")]})
    assert {r["scope"] for r in result["results"]} == {"org"}


@pytest.mark.parametrize("mode", MODES)
def test_scope_filter_narrows_to_one_scope(store: Any, mode: str) -> None:
    daemon, ids = store
    result = daemon.search(QUERY, mode=mode, k=50, scope="user", **READER)
    assert_scoped(result, ids, visible={("user", "u1")}, control={ids[("user", "u1", "procedure")]})
    org = daemon.search(QUERY, mode=mode, k=50, scope="org", **READER)
    assert_scoped(org, ids, visible={("org", "")}, control={ids[("org", "", "procedure")]})


@pytest.mark.parametrize("mode", MODES)
def test_scope_filter_without_its_key_finds_nothing_and_says_why(store: Any, mode: str) -> None:
    daemon, ids = store
    result = daemon.search(QUERY, mode=mode, k=50, scope="agent", user_id="u1")
    assert result["results"] == []
    assert any("agent_id" in n for n in result["notices"]), result["notices"]
    control = daemon.search(QUERY, mode=mode, k=50, scope="agent", agent_id="a1")
    assert_scoped(control, ids, visible={("agent", "a1")}, control={ids[("agent", "a1", "procedure")]})


@pytest.mark.parametrize("mode", MODES)
def test_kind_filter_narrows_by_kind_inside_the_scope(store: Any, mode: str) -> None:
    daemon, ids = store
    result = daemon.search(QUERY, mode=mode, k=50, kind="preference", **READER)
    assert {r["kind"] for r in result["results"]} == {"preference"}
    mine = select_ids(ids, owners=MINE, kind="preference")
    assert_scoped(result, ids, visible=MINE, control=mine if mode != "lexical" else set())
    if mode == "lexical":
        # The preference text shares no word with QUERY; ask with one of its words.
        lex = daemon.search("squash merge", mode=mode, k=50, kind="preference", **READER)
        assert_scoped(lex, ids, visible=MINE, control=mine)
        assert {r["kind"] for r in lex["results"]} == {"preference"}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("mode", MODES)
def test_fallback_with_the_embedder_off_keeps_the_scope(store_off: Any, mode: str, variant: str) -> None:
    daemon, ids = store_off
    result = daemon.search(**_params(variant, daemon), mode=mode, k=50, **READER)
    assert result["mode_used"] == "lexical"
    if mode != "lexical":
        assert any("vector leg skipped" in n for n in result["notices"]), result["notices"]
    assert_at_its_time(result, variant, ids, MINE)
    other = daemon.search(**_params(variant, daemon), mode=mode, k=50, agent_id="a2")
    assert_at_its_time(other, variant, ids, {("agent", "a2"), ("org", "")})


def test_fallback_without_owner_fields_sees_only_org_rows(store_off: Any) -> None:
    daemon, ids = store_off
    for mode in MODES:
        result = daemon.search(QUERY, mode=mode, k=50)
        assert_scoped(result, ids, visible={("org", "")}, control={ids[("org", "", "procedure")]})


def test_vector_leg_ranks_identical_rows_of_both_owners_alike(store: Any) -> None:
    """Sanity of the setup: a2's copy is exactly as near as a1's, so only the filter excludes it."""
    daemon, ids = store
    a1 = daemon.search(QUERY, mode="vector", k=1, agent_id="a1", scope="agent")["results"][0]
    a2 = daemon.search(QUERY, mode="vector", k=1, agent_id="a2", scope="agent")["results"][0]
    assert a1["id"] == ids[("agent", "a1", "procedure")]
    assert a2["id"] == ids[("agent", "a2", "procedure")]
    assert a1["score"] == pytest.approx(a2["score"], abs=1e-5)
