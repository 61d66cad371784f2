"""Issue 23's session-level target after the learned ranking: a second stage that spreads the
top 10 over sessions (the "session spread"), tried in place of the session guard and not
kept. A study, run by hand.

The learned ranking (store/ranking/) scores each candidate; its session guard then keeps
every session of the fused top k in the answer's top k. The spread here replaces the guard:
the model's best ``keep`` rows stand; each later place of the top k goes to the row with the
most to add, its share of a softmax over the pool's model scores plus, if no row of its
session is placed yet, ``weight`` times its session's share of a softmax at ``temperature``
(at most 1). A session that holds much of the pool's mass earns one place even under the
rows of a session already there. No model runs and no query is made: p50 about 45 µs over a
tuning pool of 32 against 13 µs for the guard (in process, 2 runs over the 226 pools 5 times
each, load about 2).

Chosen as bench/train_ranking.py chooses, on the tuning half alone (d1, d3, d5), each
question scored by the model of the fold that did not see its dialogue (the committed
weights' loss and L2): of the GRID (keep 0 / 3 / 5 × temperature 1 – 3 × weight 0.25 – 2,
72 settings), those whose turn recall@5, @10 and every category's @10 are no lower than the
guard's and whose stale first is no higher (20 of 72), the best session recall@10, then
session hit@10, then recall@10: keep 5, temperature 1.5, weight 1. "Nested": the spread
chosen the same way on two dialogues' questions and scored on the third's.

| order | turn R@5 | turn R@10 | session R@10 | session hit@10 | stale first |
|---|---|---|---|---|---|
| tuning, fused | 0.577 | 0.709 | 0.879 | 0.894 | 10 of 32 |
| tuning, model alone | 0.688 | 0.764 | 0.869 | 0.885 | 10 |
| tuning, model + guard (the daemon) | 0.680 | 0.736 | 0.895 | 0.907 | 10 |
| tuning, model + spread (chosen) | 0.688 | 0.750 | 0.917 | 0.929 | 10 |
| tuning, model + spread (nested) | 0.688 | 0.732 | 0.917 | 0.929 | 10 |
| held-out, guard (daemon, same store) | 0.703 | 0.819 | 0.942 | 0.952 | 15 of 33 |
| held-out, spread (daemon, scored once) | 0.701 | **0.797** | 0.955 | 0.965 | 15 |

The held-out rows are bench/recall.py --set conversations through the daemon, on one store
(--reuse), the spread committed as the daemon's second stage (commit 910ef71 on branch
rank2) and then main's code (the guard) as the baseline; turn recall@10 by category, guard →
spread: single 0.807 → 0.780, multi 0.818 → 0.818, temporal 0.946 → 0.924, inference 0.705 →
0.679, changed 0.803 → 0.773 (6 questions lost turn recall@10, 1 gained; 3 gained an
evidence session). The spread reached session hit@10 0.965 (≥ 0.96) but not session recall@10
(0.955), and took turn recall@10 below issue 23's 0.80: not kept, the guard stays. The
nested row had warned of it: on the tuning half the category floors held only where the
spread's settings were chosen (multi-hop 0.723 → 0.687, temporal 0.804 → 0.783, inference
0.784 → 0.757 nested).

Also tried on the tuning half (scratch, same leave-one-dialogue-out scores), none better:

* the guard kept, the spread after it: session hit@10 0.912 – 0.925 at turn recall@10 0.713 –
  0.737 (weight 0.5 – 2);
* the best N sessions by summed softmax given one place each, the rest in model order: N = 8,
  0.723 / 0.912 (turn R@10 / session hit@10); N = 10, 0.615 / 0.947; N ≤ 7 no session gain;
* sessions ordered by a listwise model of their own (summed and best softmax, candidate
  count, the legs' best ranks, the mean and best cosine of their rows, the cosine of the mean
  of their pool rows' vectors): an evidence session among a question's best 10 sessions for
  0.938 – 0.951 of the questions, against 0.947 for the summed softmax alone; the mean of each
  session's whole vectors (every turn, not only the pool's) 0.907 – 0.947. No better order of
  sessions to spread by.

What bounds it: the dialogues have 17 sessions each and the pool of about 32 candidates
reaches 13 – 16 of them; 6 of the 21 tuning questions whose top 10 misses every evidence
session (guard) have none in the pool at all, and the others lose a turn's place to reach it.

    .venv/bin/python bench/studies/session_spread.py           # the tuning half (the table's rows)
    .venv/bin/python bench/studies/session_spread.py --all     # every setting of the grid
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import recall_conversations as rc  # noqa: E402
import train_ranking as T  # noqa: E402
from memoryd.store.ranking import WEIGHTS_PATH, learned  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Spread:
    keep: int
    temperature: float
    weight: float


GRID = tuple(Spread(keep, t, w) for keep, t, w in itertools.product(
    (0, 3, 5), (1.0, 1.5, 2.0, 3.0), (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)))
FLOOR = ("recall@5", "recall@10", *(f"recall@10 {t}" for t in rc.TYPES))
CHOICE = ("session_recall@10", "session_hit@10", "recall@10")


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max())
    return np.asarray(e / e.sum())


def spread(scores: np.ndarray, session_of: Sequence[Any], k: int, settings: Spread) -> list[int]:
    """The pool's indices: the top ``k`` spread over sessions (module docstring), then the rest
    in the model's order. A row without a session earns no session share."""
    ranked = [int(i) for i in np.argsort(-scores, kind="stable")]
    share = _softmax(scores)
    mass: dict[Any, float] = {}
    for s, m in zip(session_of, _softmax(scores / settings.temperature), strict=True):
        if s is not None:
            mass[s] = mass.get(s, 0.0) + float(m)
    top, rest = ranked[:settings.keep], ranked[settings.keep:]
    placed = {session_of[i] for i in top}
    while rest and len(top) < k:
        gains = [float(share[i]) + (0.0 if session_of[i] is None or session_of[i] in placed
                                    else settings.weight * min(mass[session_of[i]], 1.0)) for i in rest]
        pick = rest.pop(gains.index(max(gains)))  # the first of equals: the model's order
        top.append(pick)
        placed.add(session_of[pick])
    return top + rest


Order = Callable[[dict[str, Any], learned.Model], list[str]]


def guard(p: dict[str, Any], model: learned.Model) -> list[str]:
    """The daemon's order: the model with its session guard."""
    return T.ranked(p, model)


def alone(p: dict[str, Any], model: learned.Model) -> list[str]:
    s = learned.scores(p["q"]["question"], p["rows"], p["windows"], model)
    return [p["rows"][int(i)]["id"] for i in np.argsort(-s, kind="stable")][:rc.K]


def spread_order(settings: Spread) -> Order:
    def order(p: dict[str, Any], model: learned.Model) -> list[str]:
        s = learned.scores(p["q"]["question"], p["rows"], p["windows"], model)
        idx = spread(s, [r.get("session_id") for r in p["rows"]], rc.K, settings)
        return [p["rows"][i]["id"] for i in idx][:rc.K]
    return order


def figures(data: Sequence[dict[str, Any]], folds: dict[str, learned.Model],
            order: Order) -> dict[str, float]:
    """Every question ranked by ``order`` under the model of the fold that did not see its dialogue."""
    scored = [(p["q"]["type"], rc.score(order(p, folds[p["q"]["dialogue"]]), p["q"], p["session_of"]))
              for p in data]
    return T.summary(scored, T.WITH_SESSION_RECALL)


def choose(data: Sequence[dict[str, Any]], folds: dict[str, learned.Model]) -> tuple[Spread | None, int]:
    """The spread train_ranking.py's rule would pick on ``data``, and how many passed the floor."""
    floor = figures(data, folds, guard)
    grid = {sp: figures(data, folds, spread_order(sp)) for sp in GRID}
    ok = [sp for sp, f in grid.items() if f["stale_first"] <= floor["stale_first"]
          and all(f[k] >= floor[k] - 1e-9 for k in FLOOR)]
    best = max(ok, key=lambda sp: tuple(round(grid[sp][f], 9) for f in CHOICE), default=None)
    return best, len(ok)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Baseline: the model with its session guard, as the daemon answers.")
    ap.add_argument("--all", action="store_true", help="print every setting of the grid")
    args = ap.parse_args()
    from memoryd.models.embedder import LocalEmbedder

    tuning = [d for d in rc.load_set(quick=False) if d["split"] == "tuning"]  # held-out never loaded
    data = T.pools(tuning, LocalEmbedder("bundled"), T.S.leg_limit(T.S.SearchRequest(query="")))
    setting = json.loads(WEIGHTS_PATH.read_text())  # the committed weights' loss and L2
    folds = {d["id"]: T.trained([p for p in data if p["q"]["dialogue"] != d["id"]], float(setting["l2"]),
                                setting.get("loss", "pointwise")) for d in tuning}
    print(f"tuning half, {len(data)} questions, leave one dialogue out")
    T.show("fused order", figures(data, folds, lambda p, m: T.ranked(p, None)))
    T.show("model alone", figures(data, folds, alone))
    T.show("model + guard", figures(data, folds, guard))
    if args.all:
        for sp in GRID:
            T.show(f"spread {sp.keep} {sp.temperature} {sp.weight}", figures(data, folds, spread_order(sp)))
    chosen, passed = choose(data, folds)
    print(f"{passed} of {len(GRID)} settings no worse than the guard; chosen {chosen}")
    if chosen is not None:
        T.show("model + spread (chosen)", figures(data, folds, spread_order(chosen)))
    nested: list[dict[str, Any]] = []
    picks = {}
    for d in tuning:
        picks[d["id"]], _ = choose([p for p in data if p["q"]["dialogue"] != d["id"]], folds)
    for p in data:
        pick = picks[p["q"]["dialogue"]]
        nested.append({**p, "_order": spread_order(pick) if pick else guard})
    print("nested picks: " + ", ".join(f"{d} {sp}" for d, sp in picks.items()))
    T.show("model + spread (nested)", figures(nested, folds, lambda p, m: p["_order"](p, m)))


if __name__ == "__main__":
    main()
