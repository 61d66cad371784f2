"""What the learned ranking knows about each fused candidate: one row of numbers per candidate.

Every feature comes from the candidate pool a hybrid search has already built (both legs'
rows, fused, hydrated) and the query's text: no model runs and no further query is made,
so a pool of 40 costs well under a millisecond. The training script
(bench/train_ranking.py) calls this same function on the same pools, so what the weights
were fitted on is what they score.

The features, by name (``NAMES``; the weights file lists them in this order):

* ``fused`` — log of the candidate's fused score over the pool's best (0 for the best);
* ``lex_rrf`` / ``vec_rrf`` — each leg's reciprocal-rank term, 1 / (2 + rank), 0 if absent;
* ``cosine`` / ``cosine_gap`` — the vector leg's similarity, and its gap to the pool's
  best similarity (0 and the pool's widest gap for a row the vector leg did not return);
* ``bm25`` — the lexical score over the pool's best (0 if absent);
* ``overlap`` — the share of the query's words (the lexical leg's terms, compared by
  their first five letters, a crude stem) found in the row's text: the lexical signal for
  rows that only the vector leg returned;
* ``both_legs`` — 1 when both legs returned the row;
* ``neighbour_best`` — the best fused score (over the pool's best) of another candidate of
  the same session said within NEIGHBOUR_S of it (about two turns of a conversation);
* ``in_window`` — 1 when the row happened inside a time the query names;
* ``speaker_named`` — 1 when a conversation turn's speaker ("Name: text") is named in the query;
* ``follows_hit`` / ``follows_question`` — the fused score (over the pool's best) of the
  candidate said just before it in its session (within NEIGHBOUR_S), and the same when that
  turn asked a question: an answer is found by the question it answers;
* ``precedes_hit`` — the fused score of the candidate said just after it (within NEIGHBOUR_S):
  a question is found by its answer;
* ``length`` — the row's words over LONG_WORDS, at most 1 ("Yes!" against a statement);
* ``names`` — the share of the query's names (capitalised words after its first) said in the
  row's text (a turn's speaker prefix left out: ``speaker_named`` has it).

Rows without a session (notes, facts) have 0 for the session features. Tried on the tuning
half and left out (bench/train_ranking.py's docstring says how they were compared): how many
candidates share the row's session, that session's best score and rank (they crowded the top
10 with one session), and widening the pool with the turn after each of the best ten.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memoryd.clock import parse_rfc3339
from memoryd.store.search_request import query_terms
from memoryd.text.timeexpr import TimeWindow

NAMES = ("fused", "lex_rrf", "vec_rrf", "cosine", "cosine_gap", "bm25", "overlap", "both_legs",
         "neighbour_best", "in_window", "speaker_named", "follows_hit", "follows_question",
         "precedes_hit", "length", "names")
#: Words past which a turn's length counts as long (``length``).
LONG_WORDS = 40
#: Seconds within which two turns of one session count as neighbours (about two turns).
NEIGHBOUR_S = 120.0
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SPEAKER = re.compile(r"^\s*([^\W\d_][\w .'-]{0,40}?):\s")
_NAME = re.compile(r"\b[A-Z][a-z]+\b")


def _stem(word: str) -> str:
    return word.lower()[:5]


def _when(row: dict[str, Any]) -> datetime:
    return parse_rfc3339(row.get("occurred_at") or row["recorded_at"])


def features(query: str, rows: Sequence[dict[str, Any]], windows: Sequence[TimeWindow] = ()) -> np.ndarray:
    """An (n, len(NAMES)) array for ``rows``: the fused pool, best first, each carrying its
    fusion ``stages`` (store/search.py ``fuse``), ``score``, and the memory's columns."""
    n = len(rows)
    out = np.zeros((n, len(NAMES)), dtype=np.float64)
    if n == 0:
        return out
    stages = [r.get("stages") or {} for r in rows]
    top = max(float(r["score"]) for r in rows) or 1.0
    rel = [max(float(r["score"]), 1e-9) / top for r in rows]
    cosines = [s.get("vector_score") for s in stages]
    best_cos = max((c for c in cosines if c is not None), default=0.0)
    worst_cos = min((c for c in cosines if c is not None), default=0.0)
    best_bm25 = max((s.get("lexical_score") or 0.0 for s in stages), default=0.0) or 1.0
    terms = query_terms(query)
    stems = {_stem(w) for w in terms.words} if terms else set()
    named = {w.lower() for w in _WORD.findall(query)}
    # Capitalised words past the query's first: names ("Where does Maya work?"), not "Where".
    names = {m.group().lower() for m in _NAME.finditer(query) if m.start() > 0}
    sessions: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if r.get("session_id"):
            sessions.setdefault(str(r["session_id"]), []).append(i)
    when = [_when(r) for r in rows] if sessions else []
    for i, (r, st) in enumerate(zip(rows, stages, strict=True)):
        x = out[i]
        x[0] = math.log(rel[i])
        if "lexical_rank" in st:
            x[1] = 1.0 / (2 + st["lexical_rank"])
            x[5] = float(st.get("lexical_score") or 0.0) / best_bm25
        cos = cosines[i]
        if cos is not None:
            x[2] = 1.0 / (2 + st["vector_rank"])
            x[3] = cos
            x[4] = cos - best_cos
        else:
            x[4] = worst_cos - best_cos
        text = str(r.get("content") or "")
        words = _WORD.findall(text)
        if stems:
            have = {_stem(w) for w in words}
            x[6] = len(stems & have) / len(stems)
        x[7] = float("lexical_rank" in st and cos is not None)
        session = r.get("session_id")
        if session:
            near = [j for j in sessions[str(session)]
                    if j != i and abs((when[j] - when[i]).total_seconds()) <= NEIGHBOUR_S]
            x[8] = max((rel[j] for j in near), default=0.0)
            before = [j for j in near if when[j] < when[i]]
            if before:
                j = max(before, key=lambda j: when[j])
                x[11] = rel[j]
                x[12] = rel[j] * float(str(rows[j].get("content") or "").rstrip().endswith("?"))
            after = [j for j in near if when[j] > when[i]]
            if after:
                x[13] = rel[min(after, key=lambda j: when[j])]
        x[9] = float(st.get("time_boost", 1.0) > 1.0)
        m = _SPEAKER.match(text) if r.get("kind") == "conversation" else None
        speaker = _WORD.findall(m.group(1)) if m is not None else []
        x[10] = float(any(w.lower() in named for w in speaker))
        x[14] = min(len(words), LONG_WORDS) / LONG_WORDS
        if names:
            said = {w.lower() for w in words[len(speaker):]}
            x[15] = len(names & said) / len(names)
    return out
