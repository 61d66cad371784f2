"""Offline replica of memory.search on the conversational set, for trying what each turn is
embedded and indexed with before any change reaches the daemon.

No daemon: every turn of tests/data/conversations/ is embedded here with memoryd's own
embedder class (the bundled all-MiniLM-L6-v2) and indexed in an in-memory FTS5 table with the
store's tokenizer. Each question is then ranked inside its own dialogue, as the benchmark's
per-dialogue project does: the vector leg by cosine, the lexical leg by BM25 over
store/search.py's ``fts_match``, both ``leg_limit`` deep, fused by store/search.py's ``fuse``
(weighted RRF, the importance and recency boosts, the time boost on the turn's timestamp).

Variants change the text a turn is embedded or indexed with: the turn alone (what the daemon
does today, ``plain``), or with the turn before it in its session (``prev``), before and after
(``prev+next``), and so on. Vectors are cached under ``--cache`` by variant, so a second run
only ranks.

    .venv/bin/python bench/recall_conv_offline.py                 # the tuning half
    .venv/bin/python bench/recall_conv_offline.py --held-out      # once per kept change
"""

from __future__ import annotations

import argparse
import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import recall_conversations as rc
from memoryd.clock import parse_rfc3339
from memoryd.passes.embed import embed_text
from memoryd.store import search as S
from memoryd.text.timeexpr import parse_time

FIGURES = ("hit@5", "hit@10", "recall@5", "recall@10", "mrr@10", "session_hit@10")


@dataclass
class Turn:
    id: str
    dialogue: str
    session: str
    content: str  # "Speaker: text", as the benchmark writes it
    occurred_at: str


def turns_of(dialogues: Sequence[dict[str, Any]]) -> list[Turn]:
    return [Turn(t["id"], d["id"], s["id"], f"{t['speaker']}: {t['text']}", t["timestamp"])
            for d in dialogues for s in d["sessions"] for t in s["turns"]]


def in_session(turns: Sequence[Turn]) -> dict[str, list[Turn]]:
    out: dict[str, list[Turn]] = {}
    for t in turns:
        out.setdefault(t.session, []).append(t)
    return out


def context_text(turns: Sequence[Turn], before: int, after: int, sep: str = "\n") -> dict[str, str]:
    """Each turn's text with ``before`` turns before it and ``after`` after it in its session."""
    out = {}
    for session in in_session(turns).values():
        for i, t in enumerate(session):
            window = session[max(0, i - before): i + after + 1]
            out[t.id] = sep.join(x.content for x in window)
    return out


def own_first(turns: Sequence[Turn], join: Callable[[str, str | None], str]) -> dict[str, str]:
    """Each turn's own text, then the turn before it, as ``join`` puts them together."""
    out = {}
    for session in in_session(turns).values():
        for i, t in enumerate(session):
            out[t.id] = join(t.content, session[i - 1].content if i else None)
    return out


TEXTS: dict[str, Callable[[Sequence[Turn]], dict[str, str]]] = {
    "plain": lambda ts: {t.id: t.content for t in ts},
    "prev": lambda ts: context_text(ts, 1, 0),
    "prev2": lambda ts: context_text(ts, 2, 0),
    "next": lambda ts: context_text(ts, 0, 1),
    "prev+next": lambda ts: context_text(ts, 1, 1),
    # The turn, then the one before: "B (replying to A)" is what the embed pass encodes (embed_text).
    "own+prev": lambda ts: own_first(ts, lambda own, prev: own + ("\n" + prev if prev else "")),
    "pass": lambda ts: own_first(ts, embed_text),
}


def encode(embedder: Any, texts: Sequence[str], cache: Path, name: str) -> np.ndarray:
    key = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    path = cache / f"{name}-{key}.npy"
    if path.exists():
        return np.asarray(np.load(path))
    vecs = np.asarray(embedder.encode(list(texts)), dtype=np.float32)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs)
    return vecs


def normalise(m: np.ndarray) -> np.ndarray:
    return np.asarray(m / np.linalg.norm(m, axis=1, keepdims=True), dtype=np.float32)


def vectors_for(name: str, turns: Sequence[Turn], encoded: Callable[[str], np.ndarray]) -> np.ndarray:
    """A variant's vectors: a text variant's own encoding (``prev``), a mix of the plain encoding and
    a context encoding (``mix:prev:0.5`` = plain + 0.5 x prev, normalised), or each turn's plain vector
    plus the plain vectors of the turns before it (``before:0.5:0.25`` = plain + 0.5 x the turn
    before + 0.25 x the one before that)."""
    parts = name.split(":")
    if parts[0] == "mix":
        return normalise(encoded("plain") + float(parts[2]) * encoded(parts[1]))
    if parts[0] == "before":
        plain = encoded("plain")
        out = plain.copy()
        index = {t.id: i for i, t in enumerate(turns)}
        for session in in_session(turns).values():
            for i, t in enumerate(session):
                for back, weight in enumerate(parts[1:], start=1):
                    if i - back >= 0:
                        out[index[t.id]] += float(weight) * plain[index[session[i - back].id]]
        return normalise(out)
    return encoded(name)


def fts_index(turns: Sequence[Turn], texts: dict[str, str]) -> sqlite3.Connection:
    """Every turn's indexed text in one FTS5 table (BM25's statistics span the whole store,
    as in the daemon, where all six dialogues share it)."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE fts USING fts5(content, "
               "tokenize='porter unicode61 remove_diacritics 2')")
    db.executemany("INSERT INTO fts(rowid, content) VALUES (?, ?)",
                   [(i, texts[t.id]) for i, t in enumerate(turns)])
    return db


def row(t: Turn, seq: int, stamp: str) -> dict[str, Any]:
    return {"seq": seq, "id": t.id, "importance": 0.5, "recorded_at": stamp, "occurred_at": t.occurred_at}


def fusion_setup(turns: Sequence[Turn], questions: Sequence[dict[str, Any]], embedder: Any,
                 args: argparse.Namespace, stamp: str) -> Callable[..., Any]:
    """What studies/recall_fusions.py's variants read besides the legs, per question."""
    from studies import recall_fusions as F

    half = "held-out" if args.held_out else "tuning"
    words = encode(embedder, [" ".join(F.content_words(q["question"])) or q["question"] for q in questions],
                   args.cache, f"question-words-{half}")
    sessions = in_session(turns)
    names = list(sessions)
    seq_of = {t.id: i for i, t in enumerate(turns)}
    next_turn = {s[i].id: row(s[i + 1], seq_of[s[i + 1].id], stamp)
                 for s in sessions.values() for i in range(len(s) - 1)}
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE fts USING fts5(content, "
               "tokenize='porter unicode61 remove_diacritics 2')")
    db.executemany("INSERT INTO fts(rowid, content) VALUES (?, ?)",
                   [(i, "\n".join(t.content for t in sessions[n])) for i, n in enumerate(names)])

    def make(qi: int, q: dict[str, Any], vecs: np.ndarray, windows: Any, asked: datetime) -> Any:
        mine = {n: [seq_of[t.id] for t in ts] for n, ts in sessions.items()
                if ts[0].dialogue == q["dialogue"]}
        return F.Query(text=q["question"], asked=asked, windows=windows, vec=encode_one(qi),
                       words_vec=words[qi], dialogue=q["dialogue"], next_turn=next_turn, vectors=vecs,
                       session_of={t.id: t.session for t in turns}, sessions=mine, session_fts=db,
                       session_names=names)

    qvecs = encode(embedder, [q["question"] for q in questions], args.cache, f"questions-{half}")

    def encode_one(qi: int) -> np.ndarray:
        return np.asarray(qvecs[qi])

    return make


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=("Baseline: the plain variant (each turn alone), the daemon's "
                                         'indexing today.'))
    ap.add_argument("--held-out", action="store_true", help="score the held-out half (once per kept change)")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/memoryd-conv-vectors"))
    ap.add_argument("--variants", default="plain,pass,prev,own+prev,mix:prev:1,before:0.5",
                    help="vector variants: a text (TEXTS), mix:TEXT:λ or before:λ1[:λ2...] (vectors_for)")
    ap.add_argument("--lexical", default="plain", help="text variants indexed by the lexical leg")
    ap.add_argument("--fusions", action="store_true",
                    help="also rank by the variants of studies/recall_fusions.py "
                         "(first vector and lexical variant)")
    args = ap.parse_args()
    half = "held-out" if args.held_out else "tuning"

    from memoryd.models.embedder import LocalEmbedder

    dialogues = rc.load_set(quick=False)
    turns = turns_of(dialogues)
    seq_of = {t.id: i for i, t in enumerate(turns)}
    session_of = {t.id: t.session for t in turns}
    questions = [{**q, "half": d["split"]} for d in dialogues for q in d["questions"] if d["split"] == half]
    asked_at = {q["id"]: rc.time_ref(q, d) for d in dialogues for q in d["questions"]}
    embedder = LocalEmbedder("bundled")
    qvecs = encode(embedder, [q["question"] for q in questions], args.cache, f"questions-{half}")
    stamp = "2026-01-01T00:00:00Z"
    now = parse_rfc3339(stamp)
    by_dialogue = {d["id"]: np.array([seq_of[t.id] for t in turns if t.dialogue == d["id"]])
                   for d in dialogues}
    want = S.leg_limit(S.SearchRequest(query=""))

    def encoded(n: str) -> np.ndarray:
        return encode(embedder, [TEXTS[n](turns)[t.id] for t in turns], args.cache, n)

    vec_sets = {name: vectors_for(name, turns, encoded) for name in args.variants.split(",")}
    lex_sets = {name: fts_index(turns, TEXTS[name](turns)) for name in args.lexical.split(",")}

    def vector_leg(vecs: np.ndarray, qv: np.ndarray, dialogue: str) -> list[dict[str, Any]]:
        pool = by_dialogue[dialogue]
        sims = vecs[pool] @ qv
        order = np.argsort(-sims)[:want]
        return [{**row(turns[pool[i]], int(pool[i]), stamp), "distance": 1.0 - float(sims[i])} for i in order]

    def lexical_leg(db: sqlite3.Connection, query: str, dialogue: str,
                    depth: int = want) -> list[dict[str, Any]]:
        match = S.fts_match(query)
        if match is None:
            return []
        out = []
        for seq, rank in db.execute("SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY bm25(fts)",
                                    (match,)):
            t = turns[seq]
            if t.dialogue == dialogue:
                out.append({**row(t, seq, stamp), "bm25": -rank})
                if len(out) >= depth:
                    break
        return out

    fusion_query = fusion_setup(turns, questions, embedder, args, stamp) if args.fusions else None

    results: dict[str, list[dict[str, float]]] = {}
    for qi, q in enumerate(questions):
        windows = parse_time(q["question"], parse_rfc3339(asked_at[q["id"]]))
        legs_v = {name: vector_leg(vecs, qvecs[qi], q["dialogue"]) for name, vecs in vec_sets.items()}
        legs_l = {name: lexical_leg(db, q["question"], q["dialogue"]) for name, db in lex_sets.items()}
        for lname, lex in legs_l.items():
            results.setdefault(f"lexical {lname}", []).append(
                rc.score([r["id"] for r in lex[:10]], q, session_of))
        for vname, vec in legs_v.items():
            results.setdefault(f"vector {vname}", []).append(
                rc.score([r["id"] for r in vec[:10]], q, session_of))
            for lname, lex in legs_l.items():
                fused = S.fuse(lex, vec, 10, now, False, windows)
                results.setdefault(f"hybrid vec={vname} lex={lname}", []).append(
                    rc.score([r["id"] for r in fused], q, session_of))
        if fusion_query is not None:
            from studies import recall_fusions as F

            vecs, db = next(iter(vec_sets.values())), next(iter(lex_sets.values()))
            fq = fusion_query(qi, q, vecs, windows, parse_rfc3339(asked_at[q["id"]]))
            lex_deep = lexical_leg(db, q["question"], q["dialogue"], depth=2 * want)
            for name, variant in F.variants().items():
                ids = variant(lex_deep, legs_v[next(iter(vec_sets))], fq,
                              lambda v, m=vecs, d=q["dialogue"]: vector_leg(m, v, d))
                results.setdefault(f"fusion: {name}", []).append(rc.score(ids, q, session_of))

    print(f"\n{half} half, {len(questions)} questions (offline replica; {datetime.now(UTC):%H:%M} UTC)")
    print(f"| variant | {' | '.join(FIGURES)} |")
    print("|---|" + "---|" * len(FIGURES))
    for name, rows in results.items():
        cells = " | ".join(f"{sum(r[f] for r in rows) / len(rows):.3f}" for f in FIGURES)
        print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
