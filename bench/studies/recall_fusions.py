"""Ranking variants tried on the conversational set's tuning half after contextual embedding, and
dropped (bench/recall_conv_offline.py --fusions runs them; tests/data/conversations/README.md has
the figures).

Each variant takes one question's legs, as the offline replica builds them (the lexical leg 40
deep, the vector leg ``leg_limit`` deep, both with store/search.py's row fields), and returns
turn ids best first. ``Query`` carries what a variant may use besides the legs.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from memoryd.clock import parse_rfc3339
from memoryd.store import search as S

Row = dict[str, Any]
_NAME = re.compile(r"(?<!^)\b[A-Z][a-z]+")


@dataclass
class Query:
    """One question with what the variants read: its text, the time it is asked, the windows its
    time expressions name, its vector and that of its content words alone, and the dialogue's
    sessions (turn ids in order, and one FTS row per session in ``session_fts``)."""

    text: str
    asked: datetime
    windows: Sequence[Any]
    vec: np.ndarray
    words_vec: np.ndarray
    dialogue: str
    next_turn: dict[str, Row]
    vectors: np.ndarray
    session_of: dict[str, str]
    sessions: dict[str, list[int]]
    session_fts: sqlite3.Connection
    session_names: list[str]


def content_words(text: str) -> list[str]:
    """The query's words the lexical leg searches for (store/search.py's QUERY_STOPWORDS out)."""
    return [w for w in re.findall(r"\w+", text) if w.lower() not in S.QUERY_STOPWORDS]


def fuse(lex: Sequence[Row], vec: Sequence[Row], q: Query, *, w_lex: float = 1.0,
         recency: tuple[float, float] | None = None,
         boost: Callable[[Row], float] | None = None) -> list[str]:
    """store/search.py's weighted RRF and time boost (importance and recorded_at are the same for
    every turn here), with an optional lexical weight, recency by occurred_at against the
    question's date (weight, half-life in days), and a per-row factor."""
    score: dict[str, float] = {}
    rows: dict[str, Row] = {}
    for weight, leg in ((w_lex, lex[:20]), (S.LEG_WEIGHTS["vector"], vec[:20])):
        for rank, row in enumerate(leg, start=1):
            rows.setdefault(row["id"], row)
            score[row["id"]] = score.get(row["id"], 0.0) + weight / (S.RRF_K + rank)
    for i, row in rows.items():
        if q.windows and S.in_windows(row, q.windows):
            score[i] *= S.TIME_BOOST
        if recency is not None:
            age = max(0.0, (q.asked - parse_rfc3339(row["occurred_at"])).total_seconds() / 86400)
            score[i] *= 1 + recency[0] * 0.5 ** (age / recency[1])
        if boost is not None:
            score[i] *= boost(row)
    return [i for i, _ in sorted(score.items(), key=lambda kv: kv[1], reverse=True)][:10]


def lend_to_next(lex: Sequence[Row], q: Query, delta: float) -> list[Row]:
    """The lexical leg where each hit lends ``delta`` x its BM25 to the turn after it (a row keeps
    the better of its own and the lent score)."""
    score = {r["id"]: r["bm25"] for r in lex}
    rows = {r["id"]: r for r in lex}
    for r in lex:
        nxt = q.next_turn.get(r["id"])
        if nxt is not None and delta * r["bm25"] > score.get(nxt["id"], float("-inf")):
            score[nxt["id"]] = delta * r["bm25"]
            rows.setdefault(nxt["id"], nxt)
    return [{**rows[i], "bm25": s} for i, s in sorted(score.items(), key=lambda kv: kv[1], reverse=True)]


def session_rank(q: Query) -> dict[str, int]:
    """Sessions of the question's dialogue ranked by RRF of BM25 over each session's text and
    cosine to the centroid of its turns' vectors."""
    match = S.fts_match(q.text)
    by_text: list[str] = []
    if match:
        by_text = [q.session_names[i] for i, _ in q.session_fts.execute(
            "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY bm25(fts)", (match,))
            if q.session_names[i] in q.sessions]
    names = list(q.sessions)
    centroids = np.stack([q.vectors[q.sessions[s]].mean(0) for s in names])
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    by_vec = [names[i] for i in np.argsort(-(centroids @ q.vec))]
    fused: dict[str, float] = {}
    for leg in (by_text, by_vec):
        for rank, s in enumerate(leg, start=1):
            fused[s] = fused.get(s, 0.0) + 1.0 / (2 + rank)
    return {s: i for i, (s, _) in enumerate(sorted(fused.items(), key=lambda kv: kv[1], reverse=True), 1)}


Variant = Callable[[Sequence[Row], Sequence[Row], Query, Callable[[np.ndarray], list[Row]]], list[str]]


def variants() -> dict[str, Variant]:
    """Name -> variant. The last argument runs the vector leg for another query vector."""
    out: dict[str, Variant] = {"shipped": lambda lx, vc, q, leg: fuse(lx, vc, q)}
    for delta in (0.3, 0.5, 0.7):
        out[f"lexical hit lends {delta} x BM25 to the next turn"] = (
            lambda lx, vc, q, leg, d=delta: fuse(lend_to_next(lx, q, d)[:20], vc, q))
    for g in (0.25, 0.5):
        out[f"w_lex 1 + {g} x (names + has digits)"] = lambda lx, vc, q, leg, g=g: fuse(
            lx, vc, q, w_lex=1 + g * (len(_NAME.findall(q.text)) + any(c.isdigit() for c in q.text)))
    for g in (0.1, 0.2):
        out[f"w_lex 1 + {g} x (content words - 3)"] = lambda lx, vc, q, leg, g=g: fuse(
            lx, vc, q, w_lex=max(0.3, 1 + g * (len(content_words(q.text)) - 3)))
    out["w_lex 1 + 0.1 x (legs' top-10 overlap - 2)"] = lambda lx, vc, q, leg: fuse(
        lx, vc, q, w_lex=1 + 0.1 * (len({r["id"] for r in lx[:10]} & {r["id"] for r in vc[:10]}) - 2))
    for weight in (0.1, 0.3, 0.5):
        for half_life in (30.0, 90.0):
            out[f"recency by occurred_at {weight}, half-life {half_life:.0f} d"] = (
                lambda lx, vc, q, leg, w=weight, hl=half_life: fuse(lx, vc, q, recency=(w, hl)))
    for lam in (0.3, 1.0):
        def mixed(lx: Sequence[Row], vc: Sequence[Row], q: Query, leg: Callable[[np.ndarray], list[Row]],
                  lam: float = lam) -> list[str]:
            v = q.vec + lam * q.words_vec
            return fuse(lx, leg(v / np.linalg.norm(v)), q)
        out[f"query vector + {lam} x its content words' vector"] = mixed
    for top in (2, 3, 5):
        for factor in (1.5, 2.0, 3.0):
            def routed(lx: Sequence[Row], vc: Sequence[Row], q: Query, leg: Callable[[np.ndarray], list[Row]],
                       top: int = top, factor: float = factor) -> list[str]:
                ranks = session_rank(q)
                return fuse(lx, vc, q, boost=lambda r: factor if ranks.get(q.session_of[r["id"]], 99) <= top
                            else 1.0)
            out[f"session route: top {top} sessions x{factor}"] = routed
    return out


if __name__ == "__main__":
    raise SystemExit("variants for the offline replica: run "
                     ".venv/bin/python bench/recall_conv_offline.py --fusions")
