"""One owner's approximate nearest-neighbour index: an hnswlib HNSW graph in memory and in a file.

Why hnswlib (bench/studies/ann_candidates.py measures usearch, hnswlib and
faiss-cpu side by side on the same all-MiniLM-L6-v2 vectors):

* its search takes a filter that runs *inside* the graph walk, so a kind is
  applied while searching, never to a cut taken first (a graph holds only
  active rows, so the common search needs no filter: each call of it takes
  the GIL);
* a vector can be overwritten in place: adding zeros under a label replaces
  the stored floats, which is how a forgotten vector leaves memory here (the
  file is patched at the same offset, :meth:`OwnerIndex.erase_in_file`);
  usearch's ``remove`` leaves the bytes in its slot until another vector
  happens to reuse it, and faiss's HNSW cannot remove at all;
* adding and searching release the GIL, so a build does not stall the
  daemon's event loop; saving holds it (about 4.5 ms per thousand vectors),
  so the daemon saves rarely (store/annindex/index_set.py).

Labels are memory ``seq`` values. Kinds are small integer codes in an array
that :class:`memoryd.store.annindex.index_set.AnnSet` keeps for every vector of
the store, indexed by ``seq``.

Measured on 15,000 real vectors against usearch (f32, i8) and faiss
(bench/studies/ann_candidates.py, load 11–17): at ef 256 recall@10 0.987
(usearch f32 0.990, i8 0.933, faiss 0.991) at 0.44–0.53 ms a query; only
hnswlib both filtered inside the walk and left no byte of a removed vector in
its saved file.

The file layout read here is hnswlib's ``saveIndex`` (0.8): a 96-byte
header, then ``cur_element_count`` records of ``size_data_per_element`` bytes,
each holding an element's level-0 links, its vector at ``offsetData`` and its
label (an 8-byte integer) at ``label_offset``.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import hnswlib
import numpy as np

#: HNSW graph degree and build beam (hnswlib's M and ef_construction); the search beam is
#: AnnSet.ef. On real all-MiniLM-L6-v2 vectors (bench/studies/ann_candidates.py) recall@10 at
#: ef 256 fell from 0.9998 at 5,000 vectors to 0.975 at 20,000 with ef_construction 100, and was
#: 0.993 at 20,000 with 200 (the build 1.7x slower). At 100,000 (the study's cache: conversation
#: turns and developer notes, 957 real queries) M 16 found 0.867 at ef 256 and 0.939 at ef 512;
#: M 32 0.938 and 0.979, for a build as long and 128 more bytes a vector. A graph keeps the M
#: it was built with (its file says it): this applies to graphs built from now on.
M = 32
EF_CONSTRUCTION = 200
HEADER_BYTES = 96
#: Spare capacity added when the graph grows (hnswlib's resize copies the graph).
GROWTH = 1.25
MIN_CAPACITY = 1024

Filter = Callable[[int], bool]


class GraphLock:
    """Searches share a graph; a change (insert, erase, resize) has it alone.

    hnswlib's ``resize_index`` reallocates the graph under a running search
    (a segfault, tests/ann), and a search beside an insert answered one wrong
    row instead of ten (the insert's links half made). The daemon inserts at
    most 64 labels per call when it applies the log (store/annindex/index_set.py
    APPLY_GROUP), so a search waits at most one such group.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writing:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._readers:
                self._cond.wait()
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class OwnerIndex:
    """The HNSW graph of one ``vector_owners`` id, with the file it was last saved to."""

    def __init__(self, owner_id: int, dim: int, index: hnswlib.Index | None = None, *,
                 limit: int | None = None):
        self.owner_id = owner_id
        self.dim = dim
        #: The size this graph is meant to reach (a part's, store/annindex/parts.py): growth
        #: stops there unless more labels come, so a full part holds no spare slots (hnswlib
        #: allocates every slot of its capacity: about 1.8 KB each at M 32).
        self.limit = limit
        if index is None:
            index = hnswlib.Index(space="cosine", dim=dim)
            index.init_index(max_elements=MIN_CAPACITY, ef_construction=EF_CONSTRUCTION, M=M)
        self.index = index
        self.lock = GraphLock()
        #: Labels stored in ``path``, in record order (None: no file yet).
        self.file_labels: np.ndarray | None = None
        self.path: Path | None = None
        #: Changes since the last save.
        self.dirty = 0

    #: A filter is a Python call per visited node, which takes the GIL (parts.py).
    calls_python_filter = True

    # -- contents ----------------------------------------------------------------------------
    def size(self) -> int:
        """Labels stored, deleted ones included."""
        return int(self.index.element_count)

    def contains(self, label: int) -> bool:
        """Whether ``label`` is stored and not deleted."""
        try:
            self.index.get_items([label])
        except RuntimeError:  # hnswlib: absent or marked deleted
            return False
        return True

    def labels(self) -> set[int]:
        """Labels stored and not deleted (a walk over every label: for tests and checks)."""
        return {int(label) for label in self.index.get_ids_list() if self.contains(int(label))}

    def add(self, labels: Sequence[int], vectors: np.ndarray, threads: int = 1) -> None:
        """Store (or overwrite) ``vectors`` under ``labels``; a deleted label is brought back."""
        if not len(labels):
            return
        with self.lock.exclusive():
            need = int(self.index.element_count) + len(labels)
            if need > self.index.get_max_elements():
                grown = max(int(need * GROWTH), MIN_CAPACITY)
                if self.limit and need <= self.limit:
                    grown = min(grown, self.limit)  # past it (rows that come back), grow as usual
                self.index.resize_index(grown)
            self.index.add_items(np.asarray(vectors, dtype=np.float32), np.asarray(labels, dtype=np.int64),
                                 num_threads=threads)
        self.dirty += len(labels)

    def erase(self, label: int) -> bool:
        """Overwrite the label's floats with zeros in memory and in the saved file, then delete it.

        Returns whether the label was present. Zeros never come back as a hit: the label is
        marked deleted, which hnswlib's search skips.
        """
        if not self.contains(label):
            return False  # absent, or already erased
        with self.lock.exclusive():
            self.index.add_items(np.zeros((1, self.dim), dtype=np.float32),
                                 np.array([label], dtype=np.int64), num_threads=1)
            self.index.mark_deleted(label)
        self.erase_in_file(label)
        self.dirty += 1
        return True

    def erase_in_file(self, label: int) -> bool:
        """Zero the label's vector in the saved file, in place (fsync'd); whether it was there."""
        if self.path is None or self.file_labels is None:
            return False
        hits = np.nonzero(self.file_labels == label)[0]
        if not len(hits):
            return False
        layout = file_layout(self.path)
        with open(self.path, "r+b") as f:
            for record in hits:
                base = HEADER_BYTES + int(record) * layout.size_per_element
                f.seek(base + layout.label_offset)
                stored = struct.unpack("<q", f.read(8))[0]
                if stored != label:  # the layout is not the one this code knows: refuse to guess
                    raise RuntimeError(f"ANN index file {self.path} does not hold label {label} "
                                       f"at record {record}; run `memoryd store reindex`")
                f.seek(base + layout.data_offset)
                f.write(bytes(self.dim * 4))
            f.flush()
            os.fsync(f.fileno())
        return True

    # -- search ------------------------------------------------------------------------------
    def search(self, query: np.ndarray, k: int, ef: int,
               allowed: Filter | None) -> list[tuple[int, float]]:
        """(label, cosine distance) of up to ``k`` nearest labels that pass ``allowed``."""
        live = int(self.index.element_count)
        if live == 0 or k <= 0:
            return []
        k = min(k, live)
        with self.lock.shared():
            # ef is the index's (hnswlib has no per-query ef); every search of this set uses one
            # value, so setting it under a concurrent search changes nothing for that search.
            self.index.set_ef(max(ef, k))
            try:
                labels, dists = self.index.knn_query(np.asarray(query, dtype=np.float32), k=k,
                                                     filter=allowed)
            except RuntimeError:
                # hnswlib raises when fewer than k labels pass (or remain): ask for what there is.
                labels, dists = self._search_fewer(query, k, allowed)
        return [(int(label), float(d)) for label, d in zip(labels[0], dists[0], strict=True)]

    def _search_fewer(self, query: np.ndarray, k: int,
                      allowed: Filter | None) -> tuple[np.ndarray, np.ndarray]:
        while k > 1:
            k //= 2
            try:
                return self.index.knn_query(np.asarray(query, dtype=np.float32), k=k, filter=allowed)
            except RuntimeError:
                continue
        return np.zeros((1, 0), dtype=np.int64), np.zeros((1, 0), dtype=np.float32)

    # -- files -------------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        """Write the graph to ``path`` (a new file: the caller renames generations), fsync'd."""
        tmp = path.with_suffix(path.suffix + ".tmp")
        self.index.save_index(str(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        os.chmod(path, 0o600)
        self.path = path
        self.file_labels = read_labels(path)
        self.dirty = 0

    @classmethod
    def load(cls, owner_id: int, dim: int, path: Path, spare: int = MIN_CAPACITY,
             limit: int | None = None) -> OwnerIndex:
        layout = file_layout(path)
        index = hnswlib.Index(space="cosine", dim=dim)
        index.load_index(str(path), max_elements=layout.count + spare)
        out = cls(owner_id, dim, index, limit=limit)
        out.path = path
        out.file_labels = read_labels(path)
        return out


class Layout:
    """The fields of an hnswlib file header that locate a record's vector and label."""

    def __init__(self, count: int, size_per_element: int, label_offset: int, data_offset: int):
        self.count = count
        self.size_per_element = size_per_element
        self.label_offset = label_offset
        self.data_offset = data_offset


def file_layout(path: Path) -> Layout:
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES:
        raise ValueError(f"{path} is not an hnswlib index file (too short)")
    _offset0, _capacity, count, size, label_offset, data_offset = struct.unpack_from("<6Q", head, 0)
    return Layout(int(count), int(size), int(label_offset), int(data_offset))


def read_labels(path: Path) -> np.ndarray:
    """The label of each record in the file, in record order (one strided read)."""
    layout = file_layout(path)
    if layout.count == 0:
        return np.zeros(0, dtype=np.int64)
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=HEADER_BYTES,
                   shape=(layout.count * layout.size_per_element,))
    records = mm.reshape(layout.count, layout.size_per_element)
    labels = np.ascontiguousarray(records[:, layout.label_offset:layout.label_offset + 8]).view("<i8")
    out = labels.reshape(-1).copy()
    del mm
    return out
