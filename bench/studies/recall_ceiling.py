"""How high a reranker could lift hybrid recall on the conversational set: the share of
evidence turns inside the union of both legs' top-D candidates, per half.

The fused top 10 is cut from at most 2 x leg_limit candidates; if the evidence is already among
them, a better ranking of those candidates (a reranker) can reach it, and if it is not, only
better legs can. Legs as the daemon runs them: the vector leg over each turn's embed text
(passes/embed.py: "B (replying to A)"), the lexical leg over the turn alone by BM25 with
store/search.py's fts_match, each inside the question's own dialogue (one project per
dialogue, as bench/recall.py --set conversations writes them). Vectors are cached with
bench/recall_conv_offline.py's cache.

    .venv/bin/python bench/studies/recall_ceiling.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import recall_conv_offline as offline
import recall_conversations as rc
from memoryd.models.embedder import LocalEmbedder
from memoryd.store import search

#: Rows per leg; the fused pool is their union: at most 20, 40, 100 and 200 candidates (the
#: daemon's legs fetch max(2k, 20) rows each: 20 at k=10, 50 at k=25, 100 at k=50).
DEPTHS = (10, 20, 50, 100)
CACHE = Path("/tmp/memoryd-conv-vectors")


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                            epilog="Baseline: the evidence turns themselves (their share in the pool is the "
                                   "ceiling any reordering can reach).").parse_args()
    dialogues = rc.load_set(quick=False)
    turns = offline.turns_of(dialogues)
    embedder = LocalEmbedder("bundled")
    vecs = offline.encode(embedder, [offline.TEXTS["pass"](turns)[t.id] for t in turns], CACHE, "pass")
    db = offline.fts_index(turns, offline.TEXTS["plain"](turns))
    pools = {d["id"]: np.array([i for i, t in enumerate(turns) if t.dialogue == d["id"]]) for d in dialogues}
    print(f"{'half':9} {'depth':>5} {'pool':>5}  {'union recall':>12} {'union hit':>9}  "
          f"{'vector':>6} {'lexical':>7}")
    for half in ("tuning", "held-out"):
        questions = [q for d in dialogues for q in d["questions"] if d["split"] == half]
        qvecs = offline.encode(embedder, [q["question"] for q in questions], CACHE, f"questions-{half}")
        for depth in DEPTHS:
            union_recall, union_hit, vector_recall, lexical_recall, pool_size = [], [], [], [], []
            for qi, q in enumerate(questions):
                pool = pools[q["dialogue"]]
                sims = vecs[pool] @ qvecs[qi]
                by_vector = {turns[pool[i]].id for i in np.argsort(-sims)[:depth]}
                by_words: set[str] = set()
                match = search.fts_match(q["question"])
                if match is not None:
                    for seq, _ in db.execute("SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? "
                                             "ORDER BY bm25(fts)", (match,)):
                        if turns[seq].dialogue == q["dialogue"]:
                            by_words.add(turns[seq].id)
                            if len(by_words) >= depth:
                                break
                gold = set(q["evidence"])
                pool_size.append(len(by_vector | by_words))
                union_recall.append(len(gold & (by_vector | by_words)) / len(gold))
                union_hit.append(float(bool(gold & (by_vector | by_words))))
                vector_recall.append(len(gold & by_vector) / len(gold))
                lexical_recall.append(len(gold & by_words) / len(gold))
            print(f"{half:9} {depth:>5} {np.mean(pool_size):>5.1f}  {np.mean(union_recall):>12.3f} "
                  f"{np.mean(union_hit):>9.3f}  "
                  f"{np.mean(vector_recall):>6.3f} {np.mean(lexical_recall):>7.3f}")


if __name__ == "__main__":
    main()
