"""Recall of memory.search on a hand-labelled set: lexical, vector and hybrid.

Loads tests/data/recall.json (213 developer memories, 85 paraphrased and 35
keyword questions with the ids that answer them) into a real daemon with the
bundled embedder, waits until everything is embedded, asks every question in
every mode over the socket, and prints recall@5, recall@10 and MRR@10. It
does the same for tests/data/recall_holdout.json: 60 more paraphrase
questions, written after the fusion settings were chosen, about memories no
question of the first set targets (held out: the sweep below never tunes on
them, it only reports them).

Then it prototypes ranking changes *outside* the daemon: it fetches each leg's
ranked list over the socket (lexical and vector mode, k=100, with the stored
importance and recorded_at of every row; rows a leg filled from the other
leg dropped) and re-fuses them here. The baseline re-fusion reproduces the
daemon's hybrid (memoryd.store.search's RRF_K and LEG_WEIGHTS, 20 rows per
leg, importance and recency boosts) and is checked against it, so the
variants (the RRF constant × vector weight grid the shipped values were
chosen from, per-leg depth, boosts, score fusion) are measured on the same
footing.

    .venv/bin/python bench/recall.py            # full run (about a minute)
    .venv/bin/python bench/recall.py --quick    # the three modes only

``--set conversations`` measures the conversational set instead
(tests/data/conversations/, six dialogues turn by turn; bench/recall_conversations.py
says what it writes and how it scores): hit@k, recall@k, MRR@10 and session hit@10
per mode and question type, for the tuning and the held-out half.

    .venv/bin/python bench/recall.py --set conversations           # all six dialogues
    .venv/bin/python bench/recall.py --set conversations --quick   # one dialogue per half
    .venv/bin/python bench/recall.py --set conversations --reuse /tmp/conv   # keep the loaded store
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _harness as h
from memoryd.store.search import LEG_WEIGHTS, RRF_K

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "recall.json"
MODES = ("lexical", "vector", "hybrid")
K = 10
DEEP = 100  # rows per leg fetched for the offline re-fusion



# -- metrics ----------------------------------------------------------------------
def metrics(ranked: Sequence[Sequence[str]], answers: Sequence[set[str]]) -> dict[str, float]:
    """Mean recall@5, recall@10 and MRR@10 over the questions."""
    r5 = r10 = mrr = 0.0
    for ids, gold in zip(ranked, answers, strict=True):
        r5 += len(gold & set(ids[:5])) / len(gold)
        r10 += len(gold & set(ids[:10])) / len(gold)
        mrr += next((1.0 / i for i, x in enumerate(ids[:10], start=1) if x in gold), 0.0)
    n = len(answers)
    return {"recall@5": r5 / n, "recall@10": r10 / n, "mrr@10": mrr / n}


# -- offline fusion (mirrors store/search.py, then varies it) ----------------------
def boosts(row: dict[str, Any], ref: datetime) -> float:
    importance = 1.0 + 0.2 * (float(row["importance"]) - 0.5)
    recorded = datetime.fromisoformat(row["recorded_at"].replace("Z", "+00:00"))
    age_days = max(0.0, (ref - recorded).total_seconds() / 86400.0)
    recency = 1.0 + 0.1 * 0.5 ** (age_days / 30.0)
    return importance * recency


def rrf(lex: Sequence[dict[str, Any]], vec: Sequence[dict[str, Any]], *, c: float = 60.0,
        depth: int = 20, w_lex: float = 1.0, w_vec: float = 1.0, use_boosts: bool = True,
        ref: datetime | None = None) -> list[str]:
    score: dict[str, float] = {}
    rows: dict[str, dict[str, Any]] = {}
    for weight, leg in ((w_lex, lex[:depth]), (w_vec, vec[:depth])):
        for rank, row in enumerate(leg, start=1):
            rows.setdefault(row["id"], row)
            score[row["id"]] = score.get(row["id"], 0.0) + weight / (c + rank)
    ref = ref or datetime.now(UTC)
    if use_boosts:
        score = {i: s * boosts(rows[i], ref) for i, s in score.items()}
    return [i for i, _ in sorted(score.items(), key=lambda kv: kv[1], reverse=True)][:K]


def score_fusion(lex: Sequence[dict[str, Any]], vec: Sequence[dict[str, Any]], *, alpha: float,
                 depth: int = 20) -> list[str]:
    """alpha × cosine similarity + (1 − alpha) × BM25 normalised by the best BM25 of the query."""
    # Rows a leg filled from the other leg carry no score of this leg's kind.
    lex = [r for r in lex if "lexical_score" in r["explain"]][:depth]
    vec = [r for r in vec if "vector_score" in r["explain"]][:depth]
    best = max((r["explain"]["lexical_score"] for r in lex), default=0.0) or 1.0
    lex_s = {r["id"]: r["explain"]["lexical_score"] / best for r in lex}
    vec_s = {r["id"]: r["explain"]["vector_score"] for r in vec}
    ids = set(lex_s) | set(vec_s)
    # A row one leg did not return gets that leg's floor (its worst returned score).
    lex_floor = min(lex_s.values(), default=0.0)
    vec_floor = min(vec_s.values(), default=0.0)
    fused = {i: alpha * vec_s.get(i, vec_floor) + (1 - alpha) * lex_s.get(i, lex_floor) for i in ids}
    return [i for i, _ in sorted(fused.items(), key=lambda kv: kv[1], reverse=True)][:K]


# -- the run -------------------------------------------------------------------------
def load(daemon: h.Daemon, data: dict[str, Any]) -> dict[str, str]:
    """Write the memories; return daemon id -> dataset id."""
    reader = data["reader"]
    items = []
    for m in data["memories"]:
        item: dict[str, Any] = {"content": m["content"], "kind": m["kind"], "scope": m["scope"]}
        if m["scope"] == "agent":
            item["agent_id"] = reader["agent_id"]
        elif m["scope"] == "user":
            item["user_id"] = reader["user_id"]
        items.append(item)
    out = daemon.call("memory.write_many", {"items": items})["results"]
    return {r["id"]: m["id"] for r, m in zip(out, data["memories"], strict=True)}


SETS = (("paraphrase", "questions"), ("keyword", "keyword_questions"))
#: 60 paraphrase questions over the same memories, written after RRF_K and LEG_WEIGHTS were
#: chosen on the sets above (and about memories no question there targets): a check that the
#: fusion was not fitted to the questions it was tuned on.
HOLDOUT = DATA.with_name("recall_holdout.json")


def main() -> None:
    parser = h.parser(__doc__.splitlines()[0],
                 baseline=("each leg alone (lexical, vector) on the same labelled questions; the daemon's "
                           'fusion re-fused offline.'))
    parser.add_argument("--set", choices=("notes", "conversations"), default="notes",
                        help="notes: tests/data/recall*.json (default); "
                             "conversations: tests/data/conversations/")
    parser.add_argument("--reuse", type=Path, metavar="DIR",
                        help="conversations only: load and embed the set into DIR once, and search the "
                             "store kept there on later runs with the same DIR (a different --quick "
                             "needs another DIR)")
    parser.add_argument("--postgres", action="store_true",
                        help="notes only: run the daemon on an embedded PostgreSQL 18 + pgvector 0.8 "
                             "(tests/postgres.py) instead of SQLite")
    parser.add_argument("--lexical-index", action="store_true",
                        help="build the daemon's lexical index (tantivy shards, store/lexindex/index_set.py) "
                             "however small the store, so the lexical leg is the index's and not FTS5's "
                             "(the daemon builds it past lexical_index_min_rows active memories)")
    parser.add_argument("--sweep", action="store_true",
                        help="conversations only: also re-fuse the tuning half's legs offline under "
                             "ranking variants (bench/studies/recall_sweep.py)")
    args = parser.parse_args()
    if args.set == "conversations":
        import recall_conversations  # the conversational set's bench (it does not import this one)

        recall_conversations.main(args.quick, args.keep, args.reuse, args.sweep, args.lexical_index)
        return
    h.banner("recall", f"{DATA.relative_to(DATA.parents[2])}: recall@5/@10 and MRR@10 per mode", args.quick)
    data = json.loads(DATA.read_text())
    reader = data["reader"]
    sets = {name: data[key] for name, key in SETS}
    sets["held-out paraphrase"] = json.loads(HOLDOUT.read_text())["questions"]
    answers = {name: [set(q["answers"]) for q in qs] for name, qs in sets.items()}
    print(f"{len(data['memories'])} memories; "
          + ", ".join(f"{len(qs)} {name} questions" for name, qs in sets.items()))

    with contextlib.ExitStack() as stack:
        db_url = None
        if args.postgres:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests.postgres import start_server, stop_server

            server = start_server()
            stack.callback(stop_server, server)
            db_url = stack.enter_context(server.database("recall"))
            print("store: PostgreSQL 18 + pgvector 0.8 (embedded)")
        root = stack.enter_context(h.workdir("recall", keep=args.keep))
        config = {"governor_enabled": False, **(h.LEXICAL_INDEX_CONFIG if args.lexical_index else {})}
        daemon = stack.enter_context(h.Daemon(root, embedder="bundled", config=config, db_url=db_url))
        run_notes(args, daemon, data, reader, sets, answers)


def run_notes(args: Any, daemon: h.Daemon, data: dict[str, Any], reader: dict[str, Any],
              sets: dict[str, list[dict[str, Any]]], answers: dict[str, list[set[str]]]) -> None:
    """Load the notes set into ``daemon``, ask every question in every mode, print and save."""
    t0 = time.perf_counter()
    to_label = load(daemon, data)
    h.wait_drained(daemon, "embed")
    h.wait_vector_leg(daemon)
    lexical_index = h.wait_lexical_index(daemon, required=args.lexical_index)
    print(f"loaded and embedded in {time.perf_counter() - t0:.1f} s"
          + (f"; lexical index {lexical_index}" if args.lexical_index else ""))

    def ask(query: str, mode: str, k: int, explain: bool = False) -> dict[str, Any]:
        result: dict[str, Any] = daemon.call("memory.search", {
            "query": query, "mode": mode, "k": k, "explain": explain, **reader})
        assert result["mode_used"] == mode, (mode, result["notices"])
        return result

    def labels(rows: Sequence[dict[str, Any]]) -> list[str]:
        return [to_label[r["id"]] for r in rows]

    result: dict[str, Any] = {"n_memories": len(data["memories"]),
                              "n_questions": {n: len(qs) for n, qs in sets.items()}, "modes": {},
                              "missed_at_10": {}}
    daemon_hybrid: dict[str, list[list[str]]] = {}
    for name, qs in sets.items():
        per_mode: dict[str, dict[str, float]] = {}
        misses: dict[str, list[str]] = {}
        for mode in MODES:
            ranked = [labels(ask(q["question"], mode, K)["results"]) for q in qs]
            per_mode[mode] = metrics(ranked, answers[name])
            misses[mode] = [q["id"] for q, ids, gold in zip(qs, ranked, answers[name], strict=True)
                            if not gold & set(ids)]
            if mode == "hybrid":
                daemon_hybrid[name] = ranked
        result["modes"][name] = per_mode
        result["missed_at_10"][name] = misses
        h.print_table(f"Daemon as shipped, {name} questions (k=10)",
                      ["mode", "recall@5", "recall@10", "MRR@10"],
                      [[m, v["recall@5"], v["recall@10"], v["mrr@10"]] for m, v in per_mode.items()],
                      digits=3)
        best_leg = max(per_mode["lexical"]["recall@10"], per_mode["vector"]["recall@10"])
        beats = per_mode["hybrid"]["recall@10"] > best_leg
        print(f"  hybrid beats both single legs on recall@10: {beats}")
        for m in MODES:
            print(f"  missed at 10 ({m}): {' '.join(misses[m]) or '-'}")

    if not args.quick:
        result["variants"] = sweep(sets, answers, ask, labels, daemon_hybrid)
    h.save("recall_lexical_index" if args.lexical_index else "recall", result, args.quick)


def sweep(sets: dict[str, list[dict[str, Any]]], answers: dict[str, list[set[str]]],
          ask: Callable[..., dict[str, Any]], labels: Callable[..., list[str]],
          daemon_hybrid: dict[str, list[list[str]]]) -> dict[str, Any]:
    """Re-fuse each leg's deep list offline under different ranking choices, on both question sets."""
    ref = datetime.now(UTC)
    legs: dict[str, dict[str, list[list[dict[str, Any]]]]] = {}

    def own(rows: list[dict[str, Any]], leg: str) -> list[dict[str, Any]]:
        # A single-leg search shorter than k is filled from the other leg; the fusion sees
        # only the leg's own rows.
        return [r for r in rows if f"{leg}_rank" in r["explain"]]

    for name, qs in sets.items():
        legs[name] = {
            "lex": [own(ask(q["question"], "lexical", DEEP, explain=True)["results"], "lexical")
                    for q in qs],
            "vec": [own(ask(q["question"], "vector", DEEP, explain=True)["results"], "vector")
                    for q in qs],
            "lex_nostop": [own(ask(h.strip_stop_words(q["question"]), "lexical", DEEP,
                                   explain=True)["results"], "lexical") for q in qs],
        }
    id_to_row = {r["id"]: r for per_set in legs.values() for rows in per_set.values()
                 for result in rows for r in result}

    def labels_of(ids: list[str]) -> list[str]:
        return labels([id_to_row[i] for i in ids])

    def shipped(lx: list[dict[str, Any]], vc: list[dict[str, Any]]) -> list[str]:
        return rrf(lx, vc, c=RRF_K, w_lex=LEG_WEIGHTS["lexical"], w_vec=LEG_WEIGHTS["vector"], ref=ref)

    Fuse = Callable[[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]], list[str]]
    variants: dict[str, Fuse] = {
        f"as shipped: RRF c={RRF_K}, vector weight {LEG_WEIGHTS['vector']}, 20/leg, boosts":
            lambda lx, vc, ln: shipped(lx, vc),
        "vector leg only (reference)": lambda lx, vc, ln: [r["id"] for r in vc[:K]],
        "lexical leg only (reference)": lambda lx, vc, ln: [r["id"] for r in lx[:K]],
        "shipped, no boosts": lambda lx, vc, ln: rrf(lx, vc, c=RRF_K, w_vec=LEG_WEIGHTS["vector"],
                                                     use_boosts=False, ref=ref),
        "shipped, 100/leg": lambda lx, vc, ln: rrf(lx, vc, c=RRF_K, w_vec=LEG_WEIGHTS["vector"],
                                                   depth=100, ref=ref),
    }
    # The grid the shipped constants were chosen from (store/search.py's docstring).
    for c in (1, 2, 5, 10, 20, 60):
        for w in (1.0, 1.25, 1.5, 2.0, 3.0):
            variants[f"RRF c={c}, vector weight {w}"] = (
                lambda lx, vc, ln, c=c, w=w: rrf(lx, vc, c=c, w_vec=w, ref=ref))
    for alpha in (0.7, 0.8, 0.9):
        variants[f"score fusion α={alpha} (cosine vs BM25/max)"] = (
            lambda lx, vc, ln, a=alpha: score_fusion(lx, vc, alpha=a))

    # Sanity: the replica of the daemon's fusion must rank like the daemon.
    agreement = {}
    for name in sets:
        lg = legs[name]
        replica = [labels_of(shipped(lx, vc)) for lx, vc in zip(lg["lex"], lg["vec"], strict=True)]
        same = sum(a == b for a, b in zip(replica, daemon_hybrid[name], strict=True))
        agreement[name] = same / len(replica)
    print("\noffline replica of the daemon's hybrid ranks identically on "
          + ", ".join(f"{v:.0%} of the {n} questions" for n, v in agreement.items()))

    results: dict[str, dict[str, dict[str, float]]] = {}
    for vname, fuse in variants.items():
        results[vname] = {}
        for name in sets:
            lg = legs[name]
            ranked = [labels_of(fuse(lx, vc, ln))
                      for lx, vc, ln in zip(lg["lex"], lg["vec"], lg["lex_nostop"], strict=True)]
            results[vname][name] = metrics(ranked, answers[name])
    short = {"paraphrase": "p", "keyword": "kw", "held-out paraphrase": "ho"}
    h.print_table("Offline re-fusion of the daemon's legs (k=10): " + " | ".join(sets),
                  ["variant", *(f"{short.get(n, n)} {m}" for n in sets for m in ("r@5", "r@10", "MRR"))],
                  [[v, *(r[n][m] for n in sets for m in ("recall@5", "recall@10", "mrr@10"))]
                   for v, r in results.items()], digits=3)
    return {"replica_agreement": agreement, "results": results}


if __name__ == "__main__":
    main()
