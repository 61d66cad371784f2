"""One large owner's rows in several HNSW graphs of bounded size, split by ``seq`` range.

Why split: an HNSW graph finds fewer of the true neighbours as it grows. On
real all-MiniLM-L6-v2 vectors of sentences (bench/studies/ann_million_real.py,
M 32, ef_construction 200, the daemon's search ef 512), one graph's recall@10
was 0.917 at 100,000 vectors, 0.856 at 200,000 and 0.756-0.777 at 400,000. So
an owner's rows go into *parts* of at most :data:`PART_ROWS` labels, each its
own :class:`~memoryd.store.annindex.graph.OwnerIndex`; a search asks every part for
its ``k`` nearest and keeps the ``k`` nearest of all (store/annindex/index_set.py
searches the parts side by side, as it does several owners' graphs).

A part holds the owner's rows whose ``seq`` lies in ``[lo, next part's lo)``;
the last part is open above. Parts are only ever added at the top: when the
last part is full and a row above every label it ever held arrives, a new part
starts at that row's ``seq``. So a row's part never changes once the parts are
set, and which part a row belongs to is decided from its ``seq`` and the
parts' lower bounds alone (the manifest records them): replaying a log entry
gives the same result whatever was applied before.

Memories take increasing ``seq`` values, so new rows fill the last part and
older parts only shrink (a forgotten or superseded row is erased from its
part, hnswlib keeping its slot). An older row that comes back (a re-embed, a
status restored) returns to the part its ``seq`` names, which may then hold
a little more than :data:`PART_ROWS`.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from memoryd.store.annindex.flat import FlatSlice
from memoryd.store.annindex.graph import Filter, OwnerIndex

#: Labels a part is filled to before the next row above it starts a new part. At 100,000
#: real vectors one graph found 0.917 of the exact top 10 at ef 512 (bench/studies/
#: ann_million_real.py); the split is measured there at 200,000-1,000,000.
PART_ROWS = 100_000
#: The search beam for each graph of an owner split into parts (AnnSet's ``split_ef``). A
#: split owner's merged recall is about one part's at the same ef (at a million real sentence
#: vectors in parts of 100,000: 0.923 at ef 512, 0.969 at 1,024, 9.6 ms p50; one graph of
#: 100,000 alone: 0.917 and 0.962), and ef 512 keeps its 0.92 - 0.98 for owners below
#: PART_ROWS, whose graphs the random-vector bench at a million searches three at a time.
SPLIT_EF = 1024


class OwnerGraphs:
    """A large owner's HNSW graphs (parts), each holding the owner's active rows of a ``seq``
    range."""

    def __init__(self, owner_id: int, dim: int, *, part_rows: int = PART_ROWS,
                 parts: Sequence[tuple[int, OwnerIndex]] = ()):
        if part_rows < 1:
            raise ValueError("part_rows must be at least 1")
        self.owner_id = owner_id
        self.dim = dim
        self.part_rows = part_rows
        # Loaded parts, or one empty part for a build (an hnswlib index allocates its capacity).
        parts = parts or [(0, OwnerIndex(owner_id, dim, limit=part_rows))]
        #: Each part's lowest seq (the first is 0: it takes every row below the second's).
        self.los: list[int] = [lo for lo, _ in parts]
        self.parts: list[OwnerIndex] = [graph for _, graph in parts]
        if self.los[0] != 0 or self.los != sorted(set(self.los)):
            raise ValueError(f"owner {owner_id}'s parts do not start at 0 in increasing order: {self.los}")
        #: The highest label ever added to the last part (a new part starts only above it).
        self._top = _highest_label(self.parts[-1])

    # -- routing -----------------------------------------------------------------------------
    def part_of(self, label: int) -> OwnerIndex:
        """The part whose ``seq`` range holds ``label``."""
        return self.parts[bisect.bisect_right(self.los, label) - 1]

    def _place(self, label: int, planned: int) -> tuple[int, int]:
        """(part index, labels planned for the last part) for a label about to be added."""
        last = len(self.parts) - 1
        if label < self.los[last]:
            return bisect.bisect_right(self.los, label) - 1, planned
        if planned >= self.part_rows and label > self._top:
            # The part first, then its bound: a lookup between the two still finds the old one.
            self.parts.append(OwnerIndex(self.owner_id, self.dim, limit=self.part_rows))
            self.los.append(label)
            last, planned = last + 1, 0
        self._top = max(self._top, label)
        return last, planned + 1

    # -- contents ----------------------------------------------------------------------------
    def contains(self, label: int) -> bool:
        return self.part_of(label).contains(label)

    def labels(self) -> set[int]:
        """Labels stored and not deleted, in every part (a walk: for tests and checks)."""
        out: set[int] = set()
        for part in self.parts:
            out |= part.labels()
        return out

    def vector(self, label: int) -> np.ndarray:
        """The stored (normalised) floats of ``label`` (it must be present)."""
        return np.asarray(self.part_of(label).index.get_items([label])[0], dtype=np.float32)

    def same(self, label: int, vec: np.ndarray) -> bool:
        """Whether ``label`` holds ``vec`` (normalised, as stored)."""
        norm = float(np.linalg.norm(vec))
        return norm > 0 and bool(np.allclose(self.vector(label), vec / norm, atol=1e-6))

    def count(self) -> int:
        """Labels in every part, deleted ones included (hnswlib keeps their slots)."""
        return sum(int(part.index.element_count) for part in self.parts)

    @property
    def dirty(self) -> int:
        return sum(part.dirty for part in self.parts)

    def add(self, labels: Sequence[int], vectors: np.ndarray, threads: int = 1) -> None:
        """Store (or overwrite) ``vectors`` under ``labels``, each in the part its ``seq`` names;
        a full last part is followed by a new one."""
        if not len(labels):
            return
        order = np.argsort(np.asarray(labels, dtype=np.int64), kind="stable")
        planned = int(self.parts[-1].index.element_count)
        groups: dict[int, list[int]] = {}
        for i in order:
            label = int(labels[i])
            if label >= self.los[-1] and self.parts[-1].contains(label):
                groups.setdefault(len(self.parts) - 1, []).append(int(i))  # overwritten in place
                continue
            part, planned = self._place(label, planned)
            groups.setdefault(part, []).append(int(i))
        vectors = np.asarray(vectors, dtype=np.float32)
        for part, rows in sorted(groups.items()):
            self.parts[part].add([int(labels[i]) for i in rows], vectors[rows], threads=threads)

    def erase(self, label: int) -> bool:
        """Zero and delete ``label`` in its part, in memory and in the part's saved file."""
        return self.part_of(label).erase(label)

    # -- search ------------------------------------------------------------------------------
    def search(self, query: np.ndarray, k: int, ef: int,
               allowed: Filter | None) -> list[tuple[int, float]]:
        """The ``k`` nearest labels of all parts (AnnSet searches every visible owner's parts at
        once; this is one owner on its own)."""
        found = search_side_by_side([(part, ef) for part in self.parts], query, k, allowed)
        hits = [hit for part_hits in found for hit in part_hits]
        hits.sort(key=lambda h: h[1])
        return hits[:k]


def _highest_label(graph: OwnerIndex) -> int:
    if graph.file_labels is not None and len(graph.file_labels):
        return int(graph.file_labels.max())
    ids = graph.index.get_ids_list()
    return int(max(ids)) if len(ids) else -1


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _search_pool() -> ThreadPoolExecutor:
    """The threads that search several graphs for one query (one pool per process)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2,
                                       thread_name_prefix="memoryd-ann-search")
        return _pool


def search_side_by_side(graphs: Sequence[tuple[OwnerIndex | FlatSlice, int]], query: np.ndarray, k: int,
                        allowed: Filter | None) -> list[list[tuple[int, float]]]:
    """Each graph's ``k`` nearest labels at its own ef (``graphs``: (graph, ef) pairs), in the
    order given. hnswlib searches without the GIL, so several graphs are searched side by side,
    on as many threads as the machine has cores, unless ``allowed`` is given: hnswlib takes the
    GIL for each call of it (thousands a search), and two threads taking turns at it were
    slower than one thread searching the graphs one after another (4 graphs of 50,000 real
    vectors, a 25 % filter, ef 512: p50 17 - 19 ms on the pool against 12 - 13 ms in turn).
    Flat slices (flat.py) apply a filter as a bitmap, without the GIL, so they are searched
    side by side either way."""
    def one(job: tuple[OwnerIndex | FlatSlice, int]) -> list[tuple[int, float]]:
        return job[0].search(query, k, job[1], allowed)

    if len(graphs) > 1 and (allowed is None or not any(g.calls_python_filter for g, _ in graphs)):
        return list(_search_pool().map(one, graphs))
    return [one(job) for job in graphs]
