"""Scoring a fused pool with the learned weights, and the order a hybrid search answers in.

The model is a weighted sum of features.py's numbers (a dot product: well under a
millisecond for a pool of 40), fitted by bench/train_ranking.py on conversation turns with a
listwise loss (a softmax over each question's pool) or a pointwise one (logistic regression),
whichever ranked better on the tuning half (weights.json says which). It
orders pools that hold conversation turns; a pool of other memories keeps its fused order,
which the model was never fitted on.

The session guard: every session among the fused top k keeps a row in the answer's top k.
The model alone lifted turn recall on the tuning half but crowded the top 10 with fewer
sessions (session hit@10 0.894 → 0.872 by leave-one-dialogue-out); with the guard it
keeps them (0.898) and the recall.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from memoryd.store.ranking import WEIGHTS_PATH
from memoryd.store.ranking.features import NAMES, features
from memoryd.store.turns import TURN_KIND
from memoryd.text.timeexpr import TimeWindow


@dataclass(frozen=True)
class Model:
    weights: np.ndarray
    intercept: float


@lru_cache(maxsize=4)
def load(path: Path = WEIGHTS_PATH) -> Model:
    """The weights file, checked against the features this code computes."""
    data = json.loads(path.read_text(encoding="utf-8"))
    names = tuple(data["weights"])
    if names != NAMES:
        raise ValueError(f"{path} has weights for {names}, but features.py computes {NAMES}: "
                         "run bench/train_ranking.py --write")
    return Model(np.array([float(data["weights"][n]) for n in NAMES]), float(data["intercept"]))


def applies(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether the learned ranking orders this pool: it holds conversation turns."""
    return any(r.get("kind") == TURN_KIND and r.get("session_id") for r in rows)


def scores(query: str, rows: Sequence[dict[str, Any]], windows: Sequence[TimeWindow] = (),
           model: Model | None = None) -> np.ndarray:
    """The model's score for each row of the pool (higher ranks first; comparable within one
    pool only)."""
    m = model or load()
    return np.asarray(features(query, rows, windows) @ m.weights + m.intercept)


def guarded(fused_order: Sequence[int], learned_order: Sequence[int], session_of: Sequence[Any],
            k: int) -> list[int]:
    """``learned_order`` with every session of the fused top ``k`` kept in the top ``k``: a
    missing session's row takes the place of the lowest row whose session is there twice."""
    top, rest = list(learned_order[:k]), list(learned_order[k:])
    for i in fused_order[:k]:
        if session_of[i] is None or session_of[i] in {session_of[j] for j in top}:
            continue
        for pos in range(len(top) - 1, -1, -1):
            if sum(session_of[j] == session_of[top[pos]] for j in top) > 1:
                rest.insert(0, top.pop(pos))
                top.append(i)
                rest.remove(i)
                break
    return top + rest


def order(query: str, rows: Sequence[dict[str, Any]], k: int, windows: Sequence[TimeWindow] = (),
          explain: bool = False, model: Model | None = None) -> list[dict[str, Any]]:
    """The pool (fused order, best first) in the learned order with the session guard; each
    row's ``score`` becomes its learned score. A pool without turns comes back unchanged."""
    if len(rows) < 2 or not applies(rows):
        return list(rows)
    s = scores(query, rows, windows, model)
    learned = [int(i) for i in np.argsort(-s, kind="stable")]
    final = guarded(range(len(rows)), learned, [r.get("session_id") for r in rows], k)
    out = []
    for i in final:
        item = dict(rows[i])
        item["score"] = float(s[i])
        if explain:
            item["explain"] = {**item.get("explain", {}), "fused_rank": i + 1,
                               "fused_score": round(float(rows[i]["score"]), 6),
                               "learned_score": round(float(s[i]), 6)}
        out.append(item)
    return out
