"""One very large owner's vectors scanned flat: 8-bit codes, a slice a core, no graph.

Why: an HNSW graph is fast only where vectors have neighbourhoods to follow.
On real all-MiniLM-L6-v2 sentence vectors one owner's million rows in ten
graphs of 100,000 answer in 9.5 ms in process; on random vectors (the
benches' default store) the same graphs cost 84 ms at ef 1,024, what an
exact float32 scan of every row costs, and find 0.895 of the exact top 10. A
scan does not depend on the vectors. So an owner with at least ``flat_rows``
vectors (AnnSet) is scanned, not walked: its worst case is bounded whatever
its vectors, and it needs no build (a million graph rows took 2,053 s).

A search scans 8-bit codes, then ranks the best ``max(4 k, FETCH)`` of each
slice again by their float16 vectors: at a million random unit vectors, two
slices scanned side by side took 24 ms p50 and found the exact top 10 (1.000
over 40 questions); a float16 scan took 40 ms a slice on the same machine,
float32 59 (2026-12-07, bench/studies/flat_scan.py measures them).
Each row costs 384 bytes of codes and 768 of float16 at 384 dimensions,
where a graph row takes about 1,940.

The codes are faiss-cpu's ``IndexScalarQuantizer`` with signed 8-bit values
taken as they are (``QT_8bit_direct_signed``): each component times
:func:`scale` (seven standard deviations of a unit vector's component map to
127), rounded and clipped. One index a slice; a label's slice is
``label % slices``, so a search scans every slice side by side (faiss lets go
of Python's lock) and merges. Distances are cosine (``1 - u.q`` of unit
vectors), as hnswlib's ``cosine`` space gives.

Nothing is written to a file: a flat owner is built again from the store at
each start, so a crash leaves nothing to mend and a forgotten vector has no
file to leave. In memory, erasing a label overwrites its codes and its
float16 vector with zeros and takes its slot out of the slot bitmap that
every search hands to faiss (a selector runs inside the scan, so neither a
kind nor an erased slot is a post-filter of a cut). When a slice has more
erased slots than :data:`COMPACT_FRACTION` of it, its live rows are copied
to new buffers and the old ones, zeroed where it mattered, are freed.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from memoryd.store.annindex.graph import GraphLock

if TYPE_CHECKING:
    import faiss

#: A slice compacts when this share of its slots are erased (and at least COMPACT_MIN of them).
COMPACT_FRACTION = 0.125
COMPACT_MIN = 1024
#: Candidates a slice ranks again by float16, at least (4 k when more).
FETCH = 100
#: Slots added to a slice's arrays when they fill (a quarter more).
GROWTH = 1.25

_load_lock = threading.Lock()
_module: ModuleType | None = None


def _faiss() -> ModuleType:
    """faiss-cpu, imported when the first flat owner is made: a daemon without one does not pay
    its import (0.1 s, 15 MB of RSS).

    faiss splits a search by query, so its OpenMP team only spins beside a single query: the
    slices are searched on the daemon's own threads instead, and faiss gets one (bench/studies/
    flat_scan.py: 32.6 ms at two faiss threads against 32.1 at one, for a million float16 rows)."""
    global _module
    if _module is None:
        with _load_lock:
            if _module is None:
                import faiss

                faiss.omp_set_num_threads(1)
                _module = faiss
    return _module


def scale(dim: int) -> float:
    """What a unit vector's components are multiplied by before they are rounded to 8 bits:
    seven standard deviations (7 / sqrt(dim)) map to 127. At 384 dimensions that is 0.357,
    above the largest component of a million random unit vectors (0.303)."""
    return 127.0 * math.sqrt(dim) / 7.0


class FlatSlice:
    """The codes and float16 vectors of the labels ``label % slices == i`` of one owner."""

    #: A kind filter runs in the scan as a bitmap, not as a Python call per row (parts.py).
    calls_python_filter = False

    def __init__(self, dim: int):
        self.dim = dim
        self.scale = scale(dim)
        self.index = _codes_index(dim)
        self.code_size = int(self.index.code_size)
        #: Slot -> float16 unit vector (rows past ``size()`` are spare).
        self.fine = np.zeros((0, dim), dtype=np.float16)
        #: Slot -> label (-1: erased; rows past ``size()`` are spare).
        self.slot_labels = np.zeros(0, dtype=np.int64)
        #: Label -> slot (-1: none), indexed by label (4 bytes a seq of the store, not a dict's ~100).
        self.slot_of = np.full(0, -1, dtype=np.int32)
        #: Live labels.
        self.live_count = 0
        #: Bit ``s`` set: slot ``s`` holds a live label (faiss's IDSelectorBitmap order).
        self.live = np.zeros(0, dtype=np.uint8)
        self.erased = 0
        self.lock = GraphLock()

    def size(self) -> int:
        """Slots, erased ones included."""
        return int(self.index.ntotal)

    def _slot(self, label: int) -> int:
        return int(self.slot_of[label]) if 0 <= label < len(self.slot_of) else -1

    def contains(self, label: int) -> bool:
        return self._slot(label) >= 0

    def labels(self) -> set[int]:
        return {int(label) for label in self.slot_labels[:self.size()] if label >= 0}

    def _codes(self) -> np.ndarray:
        """A writable view of the codes (valid until the next add: faiss may move them)."""
        n = int(self.index.codes.size())
        if n == 0:
            return np.zeros((0, self.code_size), dtype=np.uint8)
        return _faiss().rev_swig_ptr(self.index.codes.data(), n).reshape(-1, self.code_size)

    def _scaled(self, units: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.clip(np.rint(units * self.scale), -128, 127), dtype=np.float32)

    def vector(self, label: int) -> np.ndarray:
        """The stored unit vector of ``label`` (float16's precision)."""
        return self.fine[self._slot(label)].astype(np.float32)

    def same(self, label: int, unit: np.ndarray) -> bool:
        """Whether ``label`` holds ``unit`` (a normalised vector), to float16's precision."""
        slot = self._slot(label)
        return slot >= 0 and bool(np.array_equal(self.fine[slot], unit.astype(np.float16)))

    def add(self, labels: Sequence[int], units: np.ndarray) -> None:
        """Store (or overwrite in place) normalised ``units`` under ``labels`` (a label given
        twice keeps its last vector)."""
        ids = np.asarray(labels, dtype=np.int64)
        if not len(ids):
            return
        # The last occurrence of each label.
        _, last = np.unique(ids[::-1], return_index=True)
        rows = np.sort(len(ids) - 1 - last)
        ids, units = ids[rows], np.ascontiguousarray(units[rows], dtype=np.float32)
        with self.lock.exclusive():
            if int(ids.max()) >= len(self.slot_of):
                self.slot_of = _grown(self.slot_of, int(ids.max()) + 1, -1)
            slots = self.slot_of[ids]
            held = slots >= 0
            if held.any():
                self._codes()[slots[held]] = self.index.sa_encode(self._scaled(units[held]))
                self.fine[slots[held]] = units[held]
            fresh = ids[~held]
            if not len(fresh):
                return
            first = self.size()
            end = first + len(fresh)
            self.index.add(self._scaled(units[~held]))
            self.fine = _grown(self.fine, end, 0)
            self.slot_labels = _grown(self.slot_labels, end, -1)
            self.fine[first:end] = units[~held]
            self.slot_labels[first:end] = fresh
            new_slots = np.arange(first, end)
            self.slot_of[fresh] = new_slots
            self.live_count += len(fresh)
            self.live = _grown(self.live, (end + 7) // 8, 0)
            self._set_live(new_slots, True)

    def erase(self, label: int) -> bool:
        """Overwrite the label's codes and vector with zeros and take its slot out of every
        search."""
        with self.lock.exclusive():
            slot = self._slot(label)
            if slot < 0:
                return False
            self._codes()[slot] = 0
            self.fine[slot] = 0
            self.slot_labels[slot] = -1
            self.slot_of[label] = -1
            self.live_count -= 1
            self._set_live(np.array([slot]), False)
            self.erased += 1
            if self.erased >= max(COMPACT_MIN, int(self.size() * COMPACT_FRACTION)):
                self._compact()
            return True

    def _set_live(self, slots: np.ndarray, on: bool) -> None:
        bits = (np.uint8(1) << (slots & 7).astype(np.uint8)).astype(np.uint8)
        if on:
            np.bitwise_or.at(self.live, slots >> 3, bits)
        else:
            np.bitwise_and.at(self.live, slots >> 3, ~bits)

    def _compact(self) -> None:
        """Copy the live slots to new buffers (the caller holds the lock exclusively)."""
        keep = np.nonzero(self.slot_labels[:self.size()] >= 0)[0]
        codes = np.ascontiguousarray(self._codes()[keep]).reshape(-1)
        fresh = _codes_index(self.dim)
        if len(codes):
            _faiss().copy_array_to_vector(codes, fresh.codes)
        fresh.ntotal = len(keep)
        self.index = fresh
        self.fine = self.fine[keep]
        self.slot_labels = self.slot_labels[keep]
        self.slot_of[self.slot_labels] = np.arange(len(keep), dtype=np.int32)
        self.live = np.zeros((len(keep) + 7) // 8, dtype=np.uint8)
        self._set_live(np.arange(len(keep)), True)
        self.erased = 0

    def search(self, query: np.ndarray, k: int, ef: int,
               allowed: Callable[[int], bool] | None) -> list[tuple[int, float]]:
        """(label, cosine distance) of up to ``k`` nearest live labels that pass ``allowed``
        (``ef`` is a graph's beam: a scan has none)."""
        with self.lock.shared():
            n = self.size()
            if self.live_count == 0 or k <= 0:
                return []
            params = selector = None
            if self.erased or allowed is not None:
                # The bitmap and its selector stay referenced here until the search returns.
                bitmap = self.live if allowed is None else self._filtered(allowed, n)
                fa = _faiss()
                selector = fa.IDSelectorBitmap(n, fa.swig_ptr(bitmap))
                params = fa.SearchParameters()
                params.sel = selector
            q = np.asarray(query, dtype=np.float32).reshape(-1)
            norm = float(np.linalg.norm(q))
            unit = q / norm if norm > 0 else q
            fetch = min(max(4 * k, FETCH), self.live_count)
            _, slots = self.index.search((unit * self.scale)[None, :], fetch, params=params)
            found = slots[0][slots[0] >= 0]
            scores = self.fine[found].astype(np.float32) @ unit
            best = np.argsort(-scores, kind="stable")[:k]
            labels = self.slot_labels[found[best]]
            return [(int(label), float(1.0 - s)) for label, s in zip(labels, scores[best], strict=True)]

    def _filtered(self, allowed: Callable[[int], bool], n: int) -> np.ndarray:
        """The live bitmap narrowed to the slots whose label passes ``allowed`` (vectorised when
        the filter offers ``mask``: AnnSet's kind filter does)."""
        labels = np.maximum(self.slot_labels[:n], 0)
        mask_of = getattr(allowed, "mask", None)
        if mask_of is not None:
            passes = np.asarray(mask_of(labels), dtype=bool)
        else:
            passes = np.fromiter((allowed(int(label)) for label in labels), dtype=bool, count=n)
        passes &= self.slot_labels[:n] >= 0
        return np.packbits(passes, bitorder="little")


class FlatOwner:
    """An owner's vectors in slices, one a core, scanned side by side (what
    :class:`~memoryd.store.annindex.parts.OwnerGraphs` is for a graph owner)."""

    def __init__(self, owner_id: int, dim: int, slices: int | None = None):
        self.owner_id = owner_id
        self.dim = dim
        self.parts: list[FlatSlice] = [FlatSlice(dim) for _ in range(max(1, slices or os.cpu_count() or 2))]
        #: Never saved: a flat owner is built again from the store at each start.
        self.dirty = 0

    def _slice(self, label: int) -> FlatSlice:
        return self.parts[label % len(self.parts)]

    def contains(self, label: int) -> bool:
        return self._slice(label).contains(label)

    def labels(self) -> set[int]:
        """Live labels of every slice (a walk: for tests and checks)."""
        return set().union(*(part.labels() for part in self.parts))

    def vector(self, label: int) -> np.ndarray:
        return self._slice(label).vector(label)

    def same(self, label: int, vec: np.ndarray) -> bool:
        unit = _unit(np.asarray(vec, dtype=np.float32).reshape(1, -1))
        return bool(np.linalg.norm(unit) > 0) and self._slice(label).same(label, unit[0])

    def count(self) -> int:
        """Live labels (an erased slot is compacted away, unlike a graph's)."""
        return sum(part.live_count for part in self.parts)

    def add(self, labels: Sequence[int], vectors: np.ndarray, threads: int = 1) -> None:
        """Store (or overwrite) ``vectors`` under ``labels`` (``threads``: a graph's; unused)."""
        if not len(labels):
            return
        ids = np.asarray(labels, dtype=np.int64)
        units = _unit(np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1))
        where = ids % len(self.parts)
        for i, part in enumerate(self.parts):
            rows = np.nonzero(where == i)[0]
            if len(rows):
                part.add(ids[rows].tolist(), units[rows])

    def erase(self, label: int) -> bool:
        return self._slice(label).erase(label)

    def search(self, query: np.ndarray, k: int, ef: int = 0,
               allowed: Callable[[int], bool] | None = None) -> list[tuple[int, float]]:
        """The ``k`` nearest live labels of every slice, one slice after another (AnnSet
        searches the slices of every visible owner side by side; this is one owner alone)."""
        hits = [hit for part in self.parts for hit in part.search(query, k, ef, allowed)]
        hits.sort(key=lambda h: h[1])
        return hits[:k]


def _codes_index(dim: int) -> faiss.IndexScalarQuantizer:
    fa = _faiss()
    index: faiss.IndexScalarQuantizer = fa.IndexScalarQuantizer(
        dim, fa.ScalarQuantizer.QT_8bit_direct_signed, fa.METRIC_INNER_PRODUCT)
    return index


def _grown(arr: np.ndarray, need: int, fill: int) -> np.ndarray:
    """``arr`` with at least ``need`` rows (a quarter more when it grows), new rows ``fill``."""
    if need <= len(arr):
        return arr
    out = np.full((max(1024, int(need * GROWTH)), *arr.shape[1:]), fill, dtype=arr.dtype)
    out[:len(arr)] = arr
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(np.divide(x, norms, out=np.zeros_like(x), where=norms > 0))
