"""What a search asks for, and the row conditions every search leg applies, on any backend.

A search leg (store/sqlite/lexical.py, store/postgres/lexical.py, the vector
legs behind store/vectors.py) finds candidate rows its own way, then keeps
those that pass :func:`row_filter`: the one scope predicate (store/scope.py),
status, record time, validity time and kind. :func:`candidates` is that check
for a set of seqs found elsewhere (a full-text or nearest-neighbour hit list).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import BindParameter, ColumnElement, and_, or_

from memoryd.store.schema import memories
from memoryd.store.scope import Reader, visible
from memoryd.text.normalize import STOPWORDS

_WORD = re.compile(r"\w+", re.UNICODE)
#: Words the lexical leg drops besides STOPWORDS: question words, pronouns and the pieces of
#: auxiliaries and contractions. A question is full of them ("what did she say about her job"),
#: and so is conversation, so they match turns that share nothing else with it. Quantifiers and
#: prepositions ("same", "before") stay: they can be the content of a note.
_QUESTION_WORDS = """
what when where which while who whom why how
her hers herself him himself his itself myself ours ourselves theirs themselves
am aren couldn d didn doesn doing don hadn hasn haven having isn ll m re s shouldn t ve wasn weren
get got let
"""
QUERY_STOPWORDS = STOPWORDS | frozenset(_QUESTION_WORDS.split())
MAX_TERMS = 64

#: What the legs fetch of each candidate: enough to rank and fuse, and to tell whether the
#: learned ranking orders the pool (a conversation turn: its kind and session). The rows that
#: make the answer are read whole once, at the end (search.hydrate), not every candidate of
#: both legs.
CANDIDATE = (memories.c.seq, memories.c.id, memories.c.scope, memories.c.owner,
             memories.c.importance, memories.c.recorded_at, memories.c.occurred_at,
             memories.c.kind, memories.c.session_id)
CANDIDATE_NAMES = tuple(c.name for c in CANDIDATE)


@dataclass
class SearchRequest:
    """A validated memory.search request."""

    query: str
    k: int = 10
    reader: Reader = field(default_factory=Reader)
    scope: str | None = None
    kind: str | None = None
    mode: str = "hybrid"
    as_of: str | None = None
    valid_at: str | None = None
    #: The time the query's time expressions are read against (else as_of, else the clock).
    time_ref: str | None = None
    include_candidates: bool = False
    explain: bool = False


@dataclass(frozen=True)
class QueryTerms:
    """The words a lexical leg searches for: an exact phrase, or words any of which may match."""

    words: tuple[str, ...]
    phrase: bool


def query_terms(query: str) -> QueryTerms | None:
    """The lexical leg's terms for user text (None when it has no words).

    A query wrapped in double quotes is an exact phrase. Otherwise the words
    other than stop-words are kept (all of them when every word is one):
    stop-words match nearly every row, cost time (~5x at 100k) and add no
    ranking signal. Each backend turns the terms into its own query with
    bound values, never by splicing user text into SQL.
    """
    stripped = query.strip()
    words = _WORD.findall(stripped)[:MAX_TERMS]
    if not words:
        return None
    if len(stripped) >= 2 and stripped[0] == stripped[-1] == '"':
        return QueryTerms(tuple(words), phrase=True)
    meaningful = [w for w in words if w.lower() not in QUERY_STOPWORDS] or words
    return QueryTerms(tuple(meaningful), phrase=False)


def statuses_for(req: SearchRequest) -> list[str]:
    """The statuses a request may see."""
    out = ["active", "superseded", "archived"] if req.as_of else ["active"]
    if req.include_candidates:
        out.append("candidate")
    return out


def row_filter(req: SearchRequest, now: str | BindParameter[str]) -> ColumnElement[Any]:
    """Scope, status, time and kind conditions shared by every search leg (``now`` may be a
    bound parameter, for a statement compiled once)."""
    conds: list[ColumnElement[Any]] = [
        visible(memories, req.reader, req.scope),
        memories.c.status.in_(statuses_for(req)),
    ]
    if req.as_of:
        # What the store believed at as_of: recorded by then, not yet retired.
        conds += [
            memories.c.recorded_at <= req.as_of,
            or_(memories.c.retired_at.is_(None), memories.c.retired_at > req.as_of),
        ]
    else:
        conds.append(or_(memories.c.expires_at.is_(None), memories.c.expires_at > now))
    if req.valid_at:
        conds += [
            memories.c.valid_from <= req.valid_at,
            or_(memories.c.valid_to.is_(None), memories.c.valid_to > req.valid_at),
        ]
    if req.kind:
        conds.append(memories.c.kind == req.kind)
    return and_(*conds)


def filter_shape(req: SearchRequest) -> tuple[Any, ...]:
    """What a statement compiled with :func:`row_filter` depends on: its cache key."""
    return (req.reader, req.scope, tuple(statuses_for(req)), req.as_of, req.valid_at, req.kind)
