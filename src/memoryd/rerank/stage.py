"""The rerank stage: a reranker's order within a time budget, else the fused order and a notice.

The reranker runs on a small pool of its own, so a search thread can stop waiting at the
budget: a call that overruns is left to finish there (a model's forward pass cannot be
interrupted) and its answer is dropped. While every worker is still busy with such calls a
search does not queue behind them: it keeps the fused order at once, with a notice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import structlog

from memoryd.rerank import Reranker, build

log = structlog.get_logger(__name__)

FALLBACK = "results in fused order"


class RerankStage:
    """Reorders a search's fused candidates by a reranker's scores, within ``budget_ms``."""

    def __init__(self, reranker: Reranker, budget_ms: float, candidates: int = 40, workers: int = 2):
        self.reranker = reranker
        #: How many fused candidates a search hands over (search_rerank_candidates).
        self.candidates = candidates
        self.budget_s = budget_ms / 1000.0
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="memoryd-rerank")
        self._busy = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __call__(self, query: str, rows: Sequence[dict[str, Any]],
                 explain: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
        """``rows`` (hydrated, best first) reordered by the reranker, and the notices.

        On any failure the rows come back in their order, with one notice saying why.
        """
        rows = list(rows)
        if len(rows) < 2:
            return rows, []
        name = self.reranker.name
        why_not = self.reranker.ready()
        if why_not is not None:
            return rows, [f"reranker {name} not used ({why_not}); {FALLBACK}"]
        with self._lock:
            if self._busy >= self.workers:
                return rows, [f"reranker {name} not used (still busy with earlier searches past "
                              f"their budget); {FALLBACK}"]
            self._busy += 1
        texts = [str(r.get("content") or "") for r in rows]
        started = time.perf_counter()
        future = self._pool.submit(self._run, query, texts)
        try:
            scores = future.result(timeout=self.budget_s)
        except FutureTimeout:
            log.warning("search.rerank_over_budget", reranker=name, budget_ms=self.budget_s * 1000)
            return rows, [f"reranker {name} took longer than its {self.budget_s * 1000:.0f} ms budget "
                          f"(search_rerank_budget_ms); {FALLBACK}"]
        except Exception as exc:
            log.warning("search.rerank_failed", reranker=name, error=f"{type(exc).__name__}: {exc}")
            return rows, [f"reranker {name} failed ({type(exc).__name__}: {exc}); {FALLBACK}"[:500]]
        ms = (time.perf_counter() - started) * 1000
        log.debug("search.reranked", reranker=name, n=len(rows), ms=round(ms, 1))
        order = sorted(range(len(rows)), key=lambda i: scores[i], reverse=True)
        out = []
        for i in order:
            item = dict(rows[i])
            item["score"] = scores[i]
            if explain:
                item["explain"] = {**item.get("explain", {}), "fused_rank": i + 1,
                                   "fused_score": round(float(rows[i]["score"]), 6),
                                   "rerank_score": round(scores[i], 6)}
            out.append(item)
        return out, []

    def _run(self, query: str, texts: list[str]) -> list[float]:
        try:
            scores = self.reranker.score(query, texts, self.budget_s)
            if len(scores) != len(texts):
                raise ValueError(f"it scored {len(scores)} of {len(texts)} candidates")
            return scores
        finally:
            with self._lock:
                self._busy -= 1


def stage_for(spec: str, budget_ms: float, candidates: int) -> RerankStage | None:
    """The stage for a ``search_reranker`` value, or None when it is off ('')."""
    reranker = build(spec)
    return None if reranker is None else RerankStage(reranker, budget_ms, candidates)
