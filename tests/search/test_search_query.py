"""What a query may contain, what the phrase form means, what ``explain`` shows,
and how hybrid fills ``k`` when the lexical leg finds fewer rows.

User text never reaches FTS5 as syntax: every word is quoted, so AND, OR,
NOT, NEAR(), ``*``, ``^``, ``-``, ``col:`` and stray quotes are literal and
never an error. A query wrapped in double quotes is one exact phrase.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memoryd.service.client import ClientError
from tests.search._daemon import stop_cleanly

MODES = ("lexical", "vector", "hybrid")
ROWS = {
    "deploy": "Deploy the api with the blue green switch in ops/cutover.sh.",
    "phrase": "The deploy script lives in tools/release and needs a VPN.",
    "apart": "Ask Dana for the script we use to deploy docs to the wiki.",
    "rollback": "Rollback plan: revert the helm release and flush the CDN.",
    "xylo": "The office xylophone is tuned every spring by Farah.",
}
#: Rows on one theme with none of the words of the k-fill query.
BACKUP_ROWS = [
    "Nightly Postgres dumps are copied to the cold-storage bucket at 03:00.",
    "Restore drills happen on the first Tuesday of every quarter.",
    "WAL archiving ships segments to S3 every sixty seconds.",
    "Point-in-time recovery is tested against a scratch instance.",
    "Database snapshots older than ninety days are pruned automatically.",
    "The replica in eu-west lags by under two seconds in steady state.",
    "pgBackRest keeps four full and twenty incremental sets.",
    "Dumps are encrypted with the age key held by the on-call lead.",
    "A failed dump pages the data team through Opsgenie.",
    "Recovery time objective for the orders database is one hour.",
    "Logical exports of the analytics schema run weekly on Sundays.",
    "The backup verification job restores one random table each night.",
]


@pytest.fixture(scope="module")
def store(spawn: Any, backend: str,
          module_new_db_url: Callable[[], str | None]) -> Iterator[tuple[Any, dict[str, str], list[str]]]:
    daemon = spawn(f"query-{backend}", embedder="bundled", db_url=module_new_db_url())
    ids = dict(zip(ROWS, daemon.write_many([{"content": c, "agent_id": "a1"} for c in ROWS.values()]),
                   strict=True))
    backups = daemon.write_many([{"content": c, "agent_id": "a1"} for c in BACKUP_ROWS])
    daemon.write(ROWS["deploy"], agent_id="a2")  # another owner's copy, never seen by a1
    daemon.wait_embedded()
    yield daemon, ids, backups
    stop_cleanly(daemon)


def lexical(daemon: Any, query: str, **params: Any) -> dict[str, Any]:
    """A lexical-mode search, with ``results`` cut to the rows the lexical leg itself found.

    Lexical mode fills a short list from the vector leg (marked ``filled_from``);
    what FTS matched is what these tests are about. ``all`` keeps the full list.
    """
    result: dict[str, Any] = daemon.search(query, mode="lexical", k=50, agent_id="a1", explain=True,
                                           **params)
    assert result["mode_used"] == "lexical"
    result["all"] = result["results"]
    result["results"] = [r for r in result["results"] if "filled_from" not in r["explain"]]
    return result


def test_lexical_leg_finds_a_row_written_through_the_daemon(store: Any) -> None:
    """The FTS index follows the rows (a write is searchable at once, by any of its words)."""
    daemon, ids, _ = store
    assert ids["xylo"] in {r["id"] for r in lexical(daemon, "xylophone")["results"]}
    fresh = daemon.write("The kazoo quartet rehearses on Thursdays.", agent_id="a1")
    assert fresh in {r["id"] for r in lexical(daemon, "kazoo")["results"]}


HOSTILE = [
    'deploy AND zebra', 'zebra NOT deploy', 'NEAR(deploy zebra)', 'NEAR(deploy zebra, 2)', 'deplo*',
    'deploy*', '-deploy', 'deploy -zebra', 'content:deploy', 'memories_fts:deploy', '{content}: deploy',
    '"deploy', 'deploy"', 'it\'s "deploy', '"deploy" "zebra', '""deploy""', '^deploy', 'deploy^2',
    '(deploy', 'deploy)', 'deploy OR', 'OR deploy', 'AND', 'NOT', 'NEAR', 'deploy + zebra',
    "deploy'; DROP TABLE memories; --", 'deploy\\', 'deploy \\" zebra',
    'déploy naïve', 'deploy ' * 100, '_deploy_', 'deploy:*', 'rank:deploy', 'rowid deploy',
]


# A NUL character is refused in every parameter, the query included (-32602 naming it:
# tests/integration/test_protocol_errors.py), so it is not among these.
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", HOSTILE)
def test_fts_syntax_in_the_query_never_errors(store: Any, query: str, mode: str) -> None:
    daemon, _, _ = store
    result = daemon.search(query, mode=mode, k=10, agent_id="a1")
    assert isinstance(result["results"], list)
    assert result["mode_used"] == mode


@pytest.mark.parametrize("query", [
    "deploy AND zebra",  # AND as an operator would require zebra
    "zebra NOT deploy",  # NOT as an operator would exclude deploy
    "NEAR(deploy zebra)",  # NEAR would require both words near each other
    "deploy -zebra",
    "content:deploy",  # a column filter would name a column
    '"deploy',  # an unbalanced quote
    "deploy'; DROP TABLE memories; --",
])
def test_fts_operators_are_literal_words(store: Any, query: str) -> None:
    daemon, ids, _ = store
    got = {r["id"] for r in lexical(daemon, query)["results"]}
    assert {ids["deploy"], ids["phrase"], ids["apart"]} <= got


def test_prefix_star_is_literal(store: Any) -> None:
    daemon, ids, _ = store
    got = {r["id"] for r in lexical(daemon, "deplo* rollback")["results"]}
    assert ids["rollback"] in got  # control
    assert not got & {ids["deploy"], ids["phrase"], ids["apart"]}  # 'deplo' is not a prefix query


def test_exact_phrase_matches_adjacent_words_only(store: Any) -> None:
    daemon, ids, _ = store
    phrase = {r["id"] for r in lexical(daemon, '"deploy script"')["results"]}
    assert ids["phrase"] in phrase
    assert ids["apart"] not in phrase
    loose = {r["id"] for r in lexical(daemon, "deploy script")["results"]}
    assert {ids["phrase"], ids["apart"]} <= loose


def test_exact_phrase_keeps_operator_words_literal(store: Any) -> None:
    daemon, ids, _ = store
    assert lexical(daemon, '"deploy AND script"')["results"] == []
    got = {r["id"] for r in lexical(daemon, '"the deploy script"')["results"]}
    assert got == {ids["phrase"]}


@pytest.mark.parametrize("query", ["?!", '""', "***", "--", "()", "🚀", '" "'])
def test_query_without_words_returns_nothing_with_a_notice(store: Any, query: str) -> None:
    daemon, _, _ = store
    result = lexical(daemon, query)
    assert result["all"] == [], "a query with no words was answered with rows filled from the vector leg"
    assert any("no searchable words" in n for n in result["notices"]), result["notices"]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_query_without_words_is_flagged_in_every_mode(store: Any, mode: str) -> None:
    daemon, _, _ = store
    result = daemon.search("?!", mode=mode, k=10, agent_id="a1")
    assert any("no searchable words" in n for n in result["notices"]), result["notices"]


def test_blank_query_is_invalid_params(store: Any) -> None:
    daemon, _, _ = store
    with pytest.raises(ClientError) as err:
        daemon.search("   ", agent_id="a1")
    assert err.value.code == -32602
    assert err.value.data.get("field") == "query"


def test_store_is_intact_after_hostile_queries(store: Any) -> None:
    daemon, ids, _ = store
    assert daemon.status()["memories"].get("active", 0) >= len(ROWS) + len(BACKUP_ROWS)
    assert ids["rollback"] in {r["id"] for r in lexical(daemon, "rollback")["results"]}


# -- explain -------------------------------------------------------------------------
#: docs/protocol.md, "score": hybrid is weighted RRF, lexical 1 / (2 + rank), vector 1.5 / (2 + rank),
#: times an importance boost 1 + 0.2 x (importance - 0.5) and a recency boost 1 + 0.1 x 0.5^(age_days / 30).
#: Literal on purpose: the test must fail if the code's constants drift from what the docs promise
#: (a row first in both legs scores 1/3 + 1.5/3 = 0.8333 here; plain RRF-60 would give 2/61 = 0.0328).
DOC_RRF_C, DOC_WEIGHTS = 2, {"lexical": 1.0, "vector": 1.5}


def test_hybrid_explain_gives_each_legs_rank_and_the_documented_weighted_rrf(store: Any) -> None:
    from memoryd.clock import parse_rfc3339, utcnow

    daemon, ids, _ = store
    result = daemon.search("deploy script", mode="hybrid", k=10, agent_id="a1", explain=True)
    now = utcnow()
    assert result["mode_used"] == "hybrid"
    by_id = {r["id"]: r for r in result["results"]}
    for r in result["results"]:
        ex = r["explain"]
        assert "rrf" in ex and ("lexical_rank" in ex or "vector_rank" in ex), ex
        expected = sum(DOC_WEIGHTS[leg] / (DOC_RRF_C + ex[f"{leg}_rank"]) for leg in ("lexical", "vector")
                       if f"{leg}_rank" in ex)
        assert ex["rrf"] == pytest.approx(expected, abs=1e-5)
        assert ex["importance_boost"] == pytest.approx(1 + 0.2 * (r["importance"] - 0.5), abs=1e-5)
        age_days = (now - parse_rfc3339(r["recorded_at"])).total_seconds() / 86400
        assert ex["recency_boost"] == pytest.approx(1 + 0.1 * 0.5 ** (age_days / 30), abs=1e-5)
        assert r["score"] == pytest.approx(ex["rrf"] * ex["importance_boost"] * ex["recency_boost"],
                                           rel=1e-3)
    both = by_id[ids["phrase"]]["explain"]
    assert "lexical_rank" in both and "vector_rank" in both
    scores = [r["score"] for r in result["results"]]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("mode", ["lexical", "vector"])
def test_single_leg_explain_gives_that_legs_rank(store: Any, mode: str) -> None:
    daemon, _, _ = store
    result = daemon.search("deploy script", mode=mode, k=5, agent_id="a1", explain=True)
    own = [r for r in result["results"] if "filled_from" not in r["explain"]]
    ranks = [r["explain"][f"{mode}_rank"] for r in own]
    assert ranks == list(range(1, len(ranks) + 1)) and ranks
    assert result["results"][: len(own)] == own  # filled rows come after the leg's own


def test_lexical_mode_fills_a_short_list_from_the_vector_leg_and_says_so(store: Any) -> None:
    daemon, ids, _ = store
    result = daemon.search("xylophone", mode="lexical", k=10, agent_id="a1", explain=True)
    assert result["mode_used"] == "lexical"
    assert len(result["results"]) == 10
    assert result["results"][0]["id"] == ids["xylo"] and "lexical_rank" in result["results"][0]["explain"]
    assert all(r["explain"].get("filled_from") == "vector" for r in result["results"][1:])
    assert any("9 result(s) filled from the vector leg" in n for n in result["notices"]), result["notices"]
    assert all(r["agent_id"] == "a1" for r in result["results"])


def test_no_explain_unless_asked(store: Any) -> None:
    daemon, _, _ = store
    result = daemon.search("deploy script", mode="hybrid", k=5, agent_id="a1")
    assert result["results"] and all("explain" not in r for r in result["results"])


# -- k fill ------------------------------------------------------------------------------
def test_hybrid_fills_k_from_the_vector_leg_when_lexical_finds_fewer(store: Any) -> None:
    daemon, ids, _ = store
    query = "xylophone"
    assert [r["id"] for r in lexical(daemon, query)["results"]] == [ids["xylo"]]
    result = daemon.search(query, mode="hybrid", k=10, agent_id="a1", explain=True)
    got = [r["id"] for r in result["results"]]
    assert len(got) == 10
    assert got[0] == ids["xylo"]  # found by both legs
    assert sum("lexical_rank" in r["explain"] for r in result["results"]) == 1
    assert all(r["agent_id"] == "a1" for r in result["results"])


def test_hybrid_k_fill_on_a_paraphrase_with_no_shared_words(store: Any) -> None:
    daemon, _, backups = store
    query = "how often do we rehearse restoring our data"
    lex = lexical(daemon, query)["results"]
    result = daemon.search(query, mode="hybrid", k=10, agent_id="a1")
    assert len(lex) < 10
    assert len(result["results"]) == 10
    top = [r["id"] for r in result["results"][:5]]
    assert backups[1] in top  # "Restore drills happen on the first Tuesday of every quarter."
