"""proposals.citing: the proposals that involve any of many memory ids (a forget by subject
marks up to 5,000 rows at once and withdraws what cites them)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine

from memoryd.store import proposals

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _ids(n: int) -> list[str]:
    return [f"mem_{i:026d}" for i in range(n)]


def test_citing_thousands_of_ids_finds_each_proposal_once(engine: Engine) -> None:
    ids = _ids(1_500)
    with engine.begin() as conn:
        early = proposals.propose(conn, kind="merge", memory_ids=[ids[3], "mem_other_a"], reason="r",
                                  payload={}, created_by="test", now=NOW)
        late = proposals.propose(conn, kind="merge", memory_ids=[ids[1_400], ids[5]], reason="r",
                                 payload={}, created_by="test", now=NOW)
        unrelated = proposals.propose(conn, kind="merge", memory_ids=["mem_other_b", "mem_other_c"],
                                      reason="r", payload={}, created_by="test", now=NOW)
    assert early is not None and late is not None and unrelated is not None
    with engine.begin() as conn:
        found = proposals.citing(conn, ids)
        assert sorted(r.id for r in found) == sorted([early, late])  # 'late' cites two: listed once
        assert proposals.withdraw_citing(conn, ids, NOW) == 2
    with engine.connect() as conn:
        assert proposals.get(conn, unrelated).status == "open"
        assert proposals.get(conn, late).status == "withdrawn"
