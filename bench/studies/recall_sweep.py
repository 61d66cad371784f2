"""Offline re-fusion on the conversational set's TUNING half (bench/recall.py --set conversations --sweep).

Each tuning question's lexical and vector legs are fetched once over the
socket (k=DEPTH, explain, with the question's ``time_ref``; rows a leg filled
from the other leg dropped), and re-fused here under ranking variants. The
replica of the daemon's hybrid (store/search.py: weighted RRF, importance,
recency and time boosts, 20 rows per leg) is checked against the daemon's own
answers first. Only the tuning half is swept: a variant is carried into the
daemon on these figures, and the held-out half is then measured once by the
ordinary run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, when run by itself

import _harness as h
from memoryd.clock import parse_rfc3339
from memoryd.store import search as S
from memoryd.text.timeexpr import parse_time

DEPTH = 40
Row = dict[str, Any]
Fuse = Callable[[Sequence[Row], Sequence[Row], dict[str, Any]], list[str]]
#: Variants that use the lexical leg of the query without the wider stop-words instead.
NOSTOP = "no question words: "


def fetch_legs(client: Any, q: dict[str, Any], project: str, time_ref: str) -> dict[str, list[Row]]:
    """The question's lexical and vector legs, DEPTH deep, each leg's own rows only; ``lexical_nostop``
    is the lexical leg of the question without bench/recall.py's wider stop-words (question words,
    pronouns)."""
    legs = {}
    for name, leg, query in (("lexical", "lexical", q["question"]), ("vector", "vector", q["question"]),
                             ("lexical_nostop", "lexical", h.strip_stop_words(q["question"]))):
        res = client.call("memory.search", {"query": query, "mode": leg, "k": DEPTH, "explain": True,
                                            "project": project, "time_ref": time_ref})
        legs[name] = [r for r in res["results"] if f"{leg}_rank" in r["explain"]]
    return legs


def _boost(row: Row, ref: datetime, windows: Sequence[Any]) -> float:
    importance, recency = S._boosts(row, ref)
    time = S.TIME_BOOST if windows and S.in_windows(row, windows) else 1.0
    return importance * recency * time


def rrf(lex: Sequence[Row], vec: Sequence[Row], ctx: dict[str, Any], *, c: float = S.RRF_K,
        w_lex: float | None = None, w_vec: float | None = None, depth: int = 20,
        session_beta: float = 0.0, time_boost: bool = True, neighbour_delta: float = 0.0,
        neighbour_top: int = 10) -> list[str]:
    """Weighted RRF as the daemon does it, with optional changes; returns ids best first."""
    w_lex = S.LEG_WEIGHTS["lexical"] if w_lex is None else w_lex
    w_vec = S.LEG_WEIGHTS["vector"] if w_vec is None else w_vec
    score: dict[str, float] = {}
    rows: dict[str, Row] = {}
    for weight, leg in ((w_lex, lex[:depth]), (w_vec, vec[:depth])):
        for rank, row in enumerate(leg, start=1):
            rows.setdefault(row["id"], row)
            score[row["id"]] = score.get(row["id"], 0.0) + weight / (c + rank)
    windows = ctx["windows"] if time_boost else ()
    fused = {i: s * _boost(rows[i], ctx["ref"], windows) for i, s in score.items()}
    if session_beta:
        # Session vote: a turn gains a share of the fused score of the other candidates in its session.
        per_session: dict[str, float] = {}
        for i, s in fused.items():
            sid = rows[i].get("session_id")
            if sid:
                per_session[sid] = per_session.get(sid, 0.0) + s
        fused = {i: s + session_beta * (per_session.get(rows[i].get("session_id") or "", s) - s)
                 for i, s in fused.items()}
    if neighbour_delta:
        return with_neighbours(fused, ctx["neighbours"], neighbour_delta, neighbour_top)
    return [i for i, _ in sorted(fused.items(), key=lambda kv: kv[1], reverse=True)][:10]


def with_neighbours(ranked_scores: dict[str, float], neighbours: dict[str, list[str]],
                    delta: float, top: int) -> list[str]:
    """Each of the ``top`` best rows lends ``delta`` × its score to the turns just before and after it
    in its session (added as candidates when the legs missed them); a row keeps its best score."""
    best = sorted(ranked_scores.items(), key=lambda kv: kv[1], reverse=True)
    out = dict(ranked_scores)
    for i, s in best[:top]:
        for n in neighbours.get(i, ()):
            out[n] = max(out.get(n, 0.0), delta * s) if n not in ranked_scores else out[n] + delta * s
    return [i for i, _ in sorted(out.items(), key=lambda kv: kv[1], reverse=True)][:10]


def lexical_gap(lex: Sequence[Row]) -> float:
    """How far the lexical leg's best row stands out: (bm25_1 − bm25_10) / bm25_1, 0 … 1."""
    if len(lex) < 2:
        return 0.0
    top = lex[0]["explain"]["lexical_score"]
    tenth = lex[min(9, len(lex) - 1)]["explain"]["lexical_score"]
    return (top - tenth) / top if top > 0 else 0.0


def variants() -> dict[str, Fuse]:
    out: dict[str, Fuse] = {
        "replica of the daemon": lambda lx, vc, ctx: rrf(lx, vc, ctx),
        "no time boost": lambda lx, vc, ctx: rrf(lx, vc, ctx, time_boost=False),
        "lexical only": lambda lx, vc, ctx: [r["id"] for r in lx[:10]],
        "vector only": lambda lx, vc, ctx: [r["id"] for r in vc[:10]],
    }
    for c in (2, 5, 10, 20, 60):
        for w in (0.75, 1.0, 1.5, 2.0):
            out[f"RRF c={c} w_vec={w}"] = lambda lx, vc, ctx, c=c, w=w: rrf(lx, vc, ctx, c=c, w_vec=w)
    for depth in (10, 30, 40):
        out[f"depth {depth}"] = lambda lx, vc, ctx, d=depth: rrf(lx, vc, ctx, depth=d)
    for beta in (0.05, 0.1, 0.2, 0.3, 0.5):
        out[f"session vote β={beta}"] = lambda lx, vc, ctx, b=beta: rrf(lx, vc, ctx, session_beta=b)
    for delta in (0.2, 0.35, 0.5, 0.7):
        for top in (3, 5, 10):
            out[f"neighbour turns δ={delta} top {top}"] = (
                lambda lx, vc, ctx, d=delta, t=top: rrf(lx, vc, ctx, neighbour_delta=d, neighbour_top=t))
    out[NOSTOP + "lexical only"] = lambda lx, vc, ctx: [r["id"] for r in lx[:10]]
    out[NOSTOP + "as shipped"] = lambda lx, vc, ctx: rrf(lx, vc, ctx)
    for c in (2, 5, 10):
        for w in (1.0, 1.5):
            out[NOSTOP + f"RRF c={c} w_vec={w}"] = (
                lambda lx, vc, ctx, c=c, w=w: rrf(lx, vc, ctx, c=c, w_vec=w))
    for gamma in (0.5, 1.0, 2.0):
        # Query-dependent weights: a lexical leg whose best row stands out is trusted more.
        out[f"lexical gap weight γ={gamma}"] = (
            lambda lx, vc, ctx, g=gamma: rrf(lx, vc, ctx, w_lex=1.0 + g * (lexical_gap(lx) - 0.5)))
    return out


def sweep(client: Any, questions: Sequence[dict[str, Any]], reader: dict[str, str],
          asked_at: dict[str, str], daemon_hybrid: dict[str, list[str]], to_turn: dict[str, str],
          session_of: dict[str, str], score: Callable[..., dict[str, float]],
          figures: Sequence[str], neighbours: dict[str, list[str]]) -> dict[str, Any]:
    """Re-fuse the tuning half under every variant; print and return the table."""
    tuning = [q for q in questions if q["half"] == "tuning"]
    now = datetime.now(UTC)
    legs, ctxs = {}, {}
    for q in tuning:
        legs[q["id"]] = fetch_legs(client, q, reader[q["id"]], asked_at[q["id"]])
        ctxs[q["id"]] = {"ref": now, "windows": parse_time(q["question"], parse_rfc3339(asked_at[q["id"]])),
                         "neighbours": neighbours}

    def turns(ids: list[str]) -> list[str]:
        return [to_turn[i] for i in ids]

    same = sum(turns(rrf(legs[q["id"]]["lexical"], legs[q["id"]]["vector"], ctxs[q["id"]]))
               == daemon_hybrid[q["id"]] for q in tuning)
    print(f"\noffline replica ranks like the daemon's hybrid on {same}/{len(tuning)} tuning questions")
    table: dict[str, dict[str, float]] = {}
    for name, fuse in variants().items():
        lex_name = "lexical_nostop" if name.startswith(NOSTOP) else "lexical"
        rows = [score(turns(fuse(legs[q["id"]][lex_name], legs[q["id"]]["vector"], ctxs[q["id"]])),
                      q, session_of) for q in tuning]
        table[name] = {f: sum(r[f] for r in rows) / len(rows) for f in figures}
    h.print_table("Offline re-fusion, TUNING half only (k=10)", ["variant", *figures],
                  [[name, *(v[f] for f in figures)] for name, v in table.items()], digits=3)
    return {"replica_agreement": same / len(tuning), "tuning": table}


if __name__ == "__main__":
    raise SystemExit("a part of the conversational bench: run "
                     ".venv/bin/python bench/recall.py --set conversations --sweep")
