"""The ANN indexes beside a SQLite store: one HNSW graph per large owner, kept in step by a log.

The store of record is the database: ``memory_vec`` (sqlite-vec) holds every
vector, and exact KNN over it answers any search. At a million memories that
scan costs 270 ms, so an owner (a ``vector_owners`` id: one scope and owner
pair) with at least ``min_rows`` vectors also gets an HNSW graph
(store/sqlite/ann.py). A search asks each visible large owner's graph for its
nearest rows (a graph holds only its owner's active rows; a kind is applied
inside the graph walk), and the
small owners' rows exactly, as before; the lists are merged by distance. Owner
filtering is therefore never a filter over a global top-k: a graph only holds
its owner's rows.

The four rules of DESIGN.md's "Indexes beside the store of record":

* **Rebuildable.** The graphs are files under ``<data dir>/index/vectors/``,
  named in ``manifest.json``; deleting the folder (or ``memoryd store
  reindex``) rebuilds them from the store.
* **Crash-consistent.** Triggers (:data:`LOG_DDL`) append the ``seq`` of every
  memory whose vector, status, kind or owner changes to ``vector_index_log``,
  in the writer's transaction. The manifest records the last log id its files
  hold; at start the daemon applies the log from there, making the graph match
  the store for each named memory (applying one twice changes nothing). Files
  are written under a new generation name and the manifest is replaced
  atomically after them, so a kill -9 at any point leaves the previous
  consistent set or the new one. The log is trimmed only up to what the
  manifest holds.
* **Erased.** A forgotten vector's log entry makes the graph overwrite its
  floats with zeros and delete it; the same bytes in the saved file are
  zeroed in place (fsync'd) in that step, and superseded generations are
  unlinked after each save.
* **Scoped inside.** As above: one graph per owner, holding its active rows
  (the status a search sees unless it asks for history or candidates, which
  are then scanned exactly); a kind is filtered in the walk, and a graph
  that finds fewer rows than asked (a rare kind) hands that owner to the
  exact scan.

PostgreSQL needs none of this: pgvector's HNSW index lives in the database.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import structlog
from sqlalchemy import Connection, Engine

from memoryd.privatefs import make_dirs
from memoryd.store.engine import read_only
from memoryd.store.sidecar import IndexThread, Registry, read_manifest, trim_log, write_json
from memoryd.store.sqlite.ann import MIN_CAPACITY, OwnerIndex
from memoryd.store.sqlite.ann_parts import PART_ROWS, SPLIT_EF, OwnerGraphs, search_side_by_side

log = structlog.get_logger(__name__)

#: 3: an owner's rows in parts of at most ``part_rows`` (store/sqlite/ann_parts.py). A format-2
#: set (one graph an owner, active rows only, ef_construction 200) is loaded as one part an owner;
#: a format-1 set is rebuilt.
FORMAT = 3
READABLE_FORMATS = (2, 3)
#: The daemon's log triggers, created at start (idempotent) on every SQLite store it opens.
LOG_DDL = [
    "CREATE TABLE IF NOT EXISTS vector_index_log (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "memory_seq INTEGER NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS vector_index_log_vi AFTER INSERT ON memory_vectors_meta BEGIN "
    "INSERT INTO vector_index_log (memory_seq) VALUES (new.memory_seq); END",
    "CREATE TRIGGER IF NOT EXISTS vector_index_log_vd AFTER DELETE ON memory_vectors_meta BEGIN "
    "INSERT INTO vector_index_log (memory_seq) VALUES (old.memory_seq); END",
    "CREATE TRIGGER IF NOT EXISTS vector_index_log_mu AFTER UPDATE OF status, kind, scope, owner "
    "ON memories WHEN (new.status IS NOT old.status OR new.kind IS NOT old.kind "
    "OR new.scope IS NOT old.scope OR new.owner IS NOT old.owner) "
    "AND EXISTS (SELECT 1 FROM memory_vectors_meta WHERE memory_seq = new.seq) BEGIN "
    "INSERT INTO vector_index_log (memory_seq) VALUES (new.seq); END",
]
#: Log entries read per step of a catch-up.
LOG_PAGE = 2000
#: The one status a graph holds (a search's default); rows of any other status are scanned
#: exactly when a search asks for them (as_of, include_candidates).
GRAPH_STATUS = "active"
#: A search applies the log itself when it is at most this far behind (each entry can cost an
#: insert of a few ms into a large graph); further behind, it wakes the index thread instead.
INLINE_CATCH_UP = 16
#: Vectors inserted into a graph per call while applying the log (a search waits for at most
#: one such call: about 64 x 2 ms of CPU over two threads on a large graph).
APPLY_GROUP = 64
#: Rows of the start-up scan read per step.
SCAN_CHUNK = 50_000
#: Vectors added to a graph per call while building (each call releases the GIL).
BUILD_CHUNK = 5000

Exact = Callable[[Sequence[str], int], list[tuple[int, float]]]


def ensure_log(conn: Connection) -> None:
    """Create the change log and its triggers if this store has none yet."""
    for statement in LOG_DDL:
        conn.exec_driver_sql(statement)


class Codes:
    """Small integer codes for kind strings (an array of uint8 indexes them)."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}

    def code(self, name: str | None) -> int:
        key = name or ""
        found = self._codes.get(key)
        if found is None:
            if len(self._codes) >= 255:
                raise ValueError("more than 255 distinct values for an ANN filter column")
            found = self._codes[key] = len(self._codes) + 1
        return found

    def known(self, name: str | None) -> int | None:
        return self._codes.get(name or "")


class OwnerCounts:
    """Vectors per owner id, in an array indexed by id: a store with a million owners of one row
    each costs 4 MB here, where a dict cost about 100 MB."""

    def __init__(self) -> None:
        self._n = np.zeros(0, dtype=np.int32)

    def add(self, owner: int, delta: int) -> None:
        if owner >= len(self._n):
            self._n = _resized(self._n, max(1024, int((owner + 1) * 1.5)), 0)
        self._n[owner] += delta

    def add_many(self, owners: np.ndarray) -> None:
        if len(owners):
            top = int(owners.max())
            if top >= len(self._n):
                self._n = _resized(self._n, max(1024, int((top + 1) * 1.5)), 0)
            self._n += np.bincount(owners, minlength=len(self._n)).astype(np.int32)

    def get(self, owner: int) -> int:
        return int(self._n[owner]) if 0 <= owner < len(self._n) else 0

    def total(self) -> int:
        return int(self._n.sum())

    def at_least(self, rows: int) -> list[tuple[int, int]]:
        """(owner, count) of the owners with ``rows`` vectors or more, largest first."""
        ids = np.nonzero(self._n >= rows)[0]
        return sorted(((int(i), int(self._n[i])) for i in ids), key=lambda kv: -kv[1])


class AnnSet(IndexThread):
    """Every large owner's graph for one SQLite store, and what keeps them in step with it."""

    thread_name = "memoryd-ann"

    def __init__(self, engine: Engine, directory: Path, *, min_rows: int = 20000, ef: int = 512,
                 threads: int = 2, save_every: int = 20000, part_rows: int = PART_ROWS,
                 split_ef: int = SPLIT_EF):
        super().__init__()
        self.engine = engine
        self.dir = directory
        self.min_rows = min_rows
        self.ef = ef
        self.split_ef = split_ef
        self.threads = threads
        self.save_every = save_every
        self.part_rows = part_rows
        self._lock = threading.RLock()
        self.indexes: dict[int, OwnerGraphs] = {}
        self.owner_of = np.full(0, -1, dtype=np.int32)
        self.kind_code = np.zeros(0, dtype=np.uint8)
        self.counts = OwnerCounts()
        self.kinds = Codes()
        self.dim: int | None = None
        self.model: str | None = None
        self.applied = 0  # last log id applied to the arrays and every graph in ``indexes``
        self.saved_log_id = 0  # what the manifest on disk holds
        self.generation = 0
        self.ready = threading.Event()
        self.build_seconds: dict[int, float] = {}
        #: Graphs the last open() loaded from files (the rest it built).
        self.loaded_graphs = 0
        self.error: str | None = None

    # -- life --------------------------------------------------------------------------------
    def start(self) -> None:
        """Create the log (now, before any write) and open or build the graphs on a thread."""
        with self.engine.begin() as conn:
            ensure_log(conn)
        super().start()

    def _run(self) -> None:
        try:
            self.open()
            while not self._stop.is_set():
                self._wake.wait(timeout=1.0)
                self._wake.clear()
                self.catch_up()
                self._build_grown()
                if self.applied - self.saved_log_id >= self.save_every:
                    self.save()
            self.catch_up()
            self.save()
        except Exception as exc:  # the exact scan answers every search meanwhile
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("ann.failed", error=self.error)
            with self._lock:
                self.indexes.clear()

    def open(self) -> None:
        """Load the saved graphs that still fit the store, scan the store's vectors, catch up,
        and build the graphs of large owners that have none."""
        t0 = time.perf_counter()
        with read_only(self.engine) as conn:
            self.dim, self.model = _settings(conn)
            last = _last_log_id(conn)
            self._scan(conn)
        manifest = self._read_manifest()
        loaded = self._load(manifest) if manifest is not None else {}
        n_loaded = self.loaded_graphs = len(loaded)
        with self._lock:
            self.indexes = loaded
            self.applied = int(manifest["log_id"]) if loaded and manifest is not None else last
            self.saved_log_id = self.applied if loaded else 0
            if manifest is not None:
                self.generation = int(manifest.get("generation", 0))
        self.catch_up()
        self._build_grown()
        self.save()
        self.ready.set()
        log.info("ann.open", ms=round((time.perf_counter() - t0) * 1000, 1), graphs=len(self.indexes),
                 vectors=self.counts.total(), loaded=n_loaded)

    # -- the log -----------------------------------------------------------------------------
    def catch_up(self) -> int:
        """Apply every log entry after ``applied``; return how many memories were looked at."""
        done = 0
        with self._lock:
            while True:
                with read_only(self.engine) as conn:
                    rows = conn.exec_driver_sql(
                        "SELECT id, memory_seq FROM vector_index_log WHERE id > ? ORDER BY id LIMIT ?",
                        (self.applied, LOG_PAGE)).all()
                    if not rows:
                        return done
                    seqs = list(dict.fromkeys(int(r[1]) for r in rows))
                    self._apply(conn, seqs, self.indexes)
                self.applied = int(rows[-1][0])
                done += len(seqs)

    def _apply(self, conn: Connection, seqs: Iterable[int], graphs: dict[int, OwnerGraphs]) -> None:
        """Make the arrays and ``graphs`` match the store for each memory in ``seqs``.

        Decided from the store's current row alone (never from what the arrays
        last said), so replaying an entry, or replaying onto a graph loaded from an
        older file or built from an older snapshot, gives the same result.
        """
        pending: dict[int, list[tuple[int, np.ndarray]]] = {}
        for seq in seqs:
            row = conn.exec_driver_sql(
                "SELECT owner_id, status, kind, embedding FROM memory_vec WHERE memory_seq = ?",
                (seq,)).first()
            owner = int(row[0]) if row is not None else -1
            # A graph holds its owner's active rows only: any other status leaves it.
            home = owner if row is not None and row[1] == GRAPH_STATUS else -1
            for graph_owner, graph in graphs.items():
                if graph_owner != home and graph.contains(seq):
                    graph.erase(seq)
            self._grow(seq)
            prev = int(self.owner_of[seq])
            if prev != owner:
                if prev >= 0:
                    self.counts.add(prev, -1)
                if owner >= 0:
                    self.counts.add(owner, 1)
                self.owner_of[seq] = owner
            if row is None:
                continue
            self.kind_code[seq] = self.kinds.code(row[2])
            target = graphs.get(home)
            if target is not None:
                vec = np.frombuffer(row[3], dtype="<f4")
                if not target.contains(seq) or not _same(target, seq, vec):
                    pending.setdefault(home, []).append((seq, vec))
        # Inserts go in groups, on the build's threads: one at a time cost a call and a lock each,
        # and the graph caught up at 120-250 vectors/s during an import (bench/import.py).
        for home, items in pending.items():
            for start in range(0, len(items), APPLY_GROUP):
                group = items[start:start + APPLY_GROUP]
                graphs[home].add([seq for seq, _ in group], np.stack([vec for _, vec in group]),
                                 threads=self.threads)

    def _grow(self, seq: int) -> None:
        if seq < len(self.owner_of):
            return
        size = max(1024, int((seq + 1) * 1.5))
        self.owner_of = _resized(self.owner_of, size, -1)
        self.kind_code = _resized(self.kind_code, size, 0)

    def _scan(self, conn: Connection) -> None:
        """Every stored vector's owner and kind (from the tables, not the vec0 scan),
        read in chunks into the arrays (a million rows never sit in Python lists)."""
        top = conn.exec_driver_sql("SELECT max(memory_seq) FROM memory_vectors_meta").scalar()
        self.owner_of = np.full(0, -1, dtype=np.int32)
        self.kind_code = np.zeros(0, dtype=np.uint8)
        self._grow(int(top or 0))
        self.counts = OwnerCounts()
        result = conn.exec_driver_sql(
            "SELECT mm.memory_seq, o.id, m.kind FROM memory_vectors_meta mm "
            "JOIN memories m ON m.seq = mm.memory_seq "
            "JOIN vector_owners o ON o.scope_key = m.scope || ':' || m.owner")
        while chunk := result.fetchmany(SCAN_CHUNK):
            seqs = np.fromiter((r[0] for r in chunk), dtype=np.int64, count=len(chunk))
            owners = np.fromiter((r[1] for r in chunk), dtype=np.int32, count=len(chunk))
            self.owner_of[seqs] = owners
            self.kind_code[seqs] = [self.kinds.code(r[2]) for r in chunk]
            self.counts.add_many(owners)

    # -- building ----------------------------------------------------------------------------
    def _build_grown(self) -> None:
        """Build a graph for each owner that reached ``min_rows`` and has none."""
        if self.dim is None:
            with read_only(self.engine) as conn:
                self.dim, self.model = _settings(conn)
        for owner, _count in self.counts.at_least(self.min_rows):
            if owner not in self.indexes and not self._stop.is_set():
                self.build(owner)

    def build(self, owner: int) -> OwnerGraphs | None:
        """Build ``owner``'s graph from the store (the lock is not held meanwhile: searches use the
        exact scan for it), then apply what the log gained while it was built, and install it.
        None when the daemon began to stop meanwhile."""
        assert self.dim is not None
        t0 = time.perf_counter()
        graph = OwnerGraphs(owner, self.dim, part_rows=self.part_rows)
        # Short read transactions, never one for the whole build: a reader held for minutes would
        # keep the WAL from being checkpointed, and with it the pages a forget just erased.
        # Whatever changes meanwhile is in the log after ``since`` and is applied below.
        with read_only(self.engine) as conn:
            since = _last_log_id(conn)
            key = conn.exec_driver_sql("SELECT scope_key FROM vector_owners WHERE id = ?", (owner,)).scalar()
            scope, _, name = str(key or "").partition(":")
            # By scope and owner (the identity index), not by the joined key: 2.2 s a build at 1M.
            seqs = [int(r[0]) for r in conn.exec_driver_sql(
                "SELECT m.seq FROM memories m JOIN memory_vectors_meta mm ON mm.memory_seq = m.seq "
                "WHERE m.scope = ? AND m.owner = ? AND m.status = ? ORDER BY m.seq",
                (scope, name, GRAPH_STATUS))]
        for start in range(0, len(seqs), BUILD_CHUNK):
            if self._stop.is_set():
                return None  # shutting down: built again at the next start
            with read_only(self.engine) as conn:
                chunk = conn.exec_driver_sql(
                    "SELECT j.value, v.embedding FROM json_each(?) AS j CROSS JOIN memory_vec AS v "
                    "ON v.memory_seq = j.value", (json.dumps(seqs[start:start + BUILD_CHUNK]),)).all()
            if chunk:
                vecs = np.frombuffer(b"".join(r[1] for r in chunk), dtype="<f4").reshape(len(chunk), -1)
                graph.add([int(r[0]) for r in chunk], vecs, threads=self.threads)
        with self._lock:
            # Entries after the snapshot, up to what the other graphs hold, for this graph alone.
            with read_only(self.engine) as conn:
                rows = conn.exec_driver_sql(
                    "SELECT DISTINCT memory_seq FROM vector_index_log WHERE id > ? AND id <= ?",
                    (since, self.applied)).all()
                self._apply(conn, [int(r[0]) for r in rows], {owner: graph})
            self.indexes[owner] = graph
        self.build_seconds[owner] = time.perf_counter() - t0
        log.info("ann.built", owner_id=owner, vectors=graph.count(), parts=len(graph.parts),
                 s=round(self.build_seconds[owner], 1))
        return graph

    # -- search ------------------------------------------------------------------------------
    def knn(self, conn: Connection, query: np.ndarray, *, k: int, scope_keys: Sequence[str],
            statuses: Sequence[str], kind: str | None, exact: Exact) -> list[tuple[int, float]]:
        """The ``k`` nearest visible rows: each large owner's graph, the rest by ``exact``."""
        if not self.ready.is_set() or not self.indexes or list(statuses) != [GRAPH_STATUS]:
            # Not ready, or history and candidates (rows no graph holds): scan exactly.
            return exact(scope_keys, k)
        behind = _last_log_id(conn) - self.applied
        if 0 < behind <= INLINE_CATCH_UP and self._lock.acquire(blocking=False):
            try:  # a few fresh vectors: this search sees them (never waits on a build or a save)
                self.catch_up()
            finally:
                self._lock.release()
        elif behind > 0:
            self._wake.set()  # the index thread applies a larger batch; this search does not wait
        marks = ", ".join("?" * len(scope_keys))
        owners = conn.exec_driver_sql(
            f"SELECT id, scope_key FROM vector_owners WHERE scope_key IN ({marks})", tuple(scope_keys)).all()
        graphs = self.indexes
        by_graph = {int(o): key for o, key in owners if int(o) in graphs}
        rest = [key for key in scope_keys if key not in by_graph.values()]
        allowed = self._kind_filter(kind)
        hits: list[tuple[int, float]] = []
        parts = [(owner, part) for owner in by_graph for part in graphs[owner].parts]
        # The parts of every large owner the reader sees, side by side.
        founds = search_side_by_side([(part, self._ef(graphs[owner], allowed)) for owner, part in parts],
                                     query, k, allowed)
        by_owner: dict[int, list[tuple[int, float]]] = {owner: [] for owner in by_graph}
        for (owner, _), found in zip(parts, founds, strict=True):
            by_owner[owner] += found
        for owner, found in by_owner.items():
            if len(found) < k:
                rest.append(by_graph[owner])  # its parts could not fill k (a rare kind): scan exactly
            else:
                hits += found
        if rest:
            hits += exact(rest, k)
        hits.sort(key=lambda h: h[1])
        return hits[:k]

    def _ef(self, graphs: OwnerGraphs, allowed: Callable[[int], bool] | None) -> int:
        """The beam for each graph of an owner: ``split_ef`` for an owner split into parts,
        unless a kind filter runs (the filtered walk goes further: at a million real vectors in
        parts of 100,000 it found 0.990 of the exact top 10 at ef 512, where the unfiltered
        search found 0.923 at 512 and 0.969 at 1,024; bench/studies/ann_million_real.py)."""
        return self.split_ef if len(graphs.parts) > 1 and allowed is None else self.ef

    def _kind_filter(self, kind: str | None) -> Callable[[int], bool] | None:
        """None without a kind: the graphs hold active rows only, so the common search calls no
        Python per visited node (hnswlib takes the GIL for each call: 7,458 calls a query at ef
        256 for a 5 % filter, bench/studies/ann_candidates.py)."""
        if kind is None:
            return None
        want = self.kinds.known(kind)
        if want is None:
            return lambda label: False
        kd = self.kind_code
        return lambda label: int(kd[label]) == want

    # -- files -------------------------------------------------------------------------------
    def save(self) -> None:
        """Write the changed graphs under a new generation, then the manifest, then trim the log."""
        with self._lock:
            if self.saved_log_id == self.applied and not any(g.dirty for g in self.indexes.values()):
                return
            make_dirs(self.dir)
            gen = self.generation + 1
            files: dict[str, dict[str, Any]] = {}
            for owner, graphs in self.indexes.items():
                entries = []
                for i, (lo, part) in enumerate(zip(graphs.los, graphs.parts, strict=True)):
                    if part.dirty or part.path is None:
                        part.save(self.dir / f"owner-{owner}-{i}.{gen}.hnsw")
                    assert part.path is not None
                    entries.append({"file": part.path.name, "lo": lo, "count": int(part.index.element_count)})
                files[str(owner)] = {"parts": entries}
            manifest = {"format": FORMAT, "dim": self.dim, "model": self.model, "log_id": self.applied,
                        "generation": gen, "owners": files}
            write_json(self.dir / "manifest.json", manifest)
            self.generation, self.saved_log_id = gen, self.applied
            keep = {part["file"] for entry in files.values() for part in entry["parts"]} | {"manifest.json"}
            for path in self.dir.iterdir():
                if path.name not in keep:
                    path.unlink()
            trim_log(self.engine, [("DELETE FROM vector_index_log WHERE id <= ?", (self.applied,))])

    def _read_manifest(self) -> dict[str, Any] | None:
        manifest = read_manifest(self.dir / "manifest.json", "ann.manifest_unreadable")
        if manifest is None:
            return None
        if (manifest.get("format") not in READABLE_FORMATS or manifest.get("dim") != self.dim
                or manifest.get("model") != self.model):
            log.info("ann.manifest_stale", dim=manifest.get("dim"), model=manifest.get("model"))
            return None
        return dict(manifest)

    def _load(self, manifest: dict[str, Any]) -> dict[int, OwnerGraphs]:
        assert self.dim is not None
        out: dict[int, OwnerGraphs] = {}
        for owner, entry in manifest.get("owners", {}).items():
            # Format 2 named one file an owner: it is loaded as that owner's only part.
            entries = entry.get("parts") or [{"file": entry.get("file"), "lo": 0,
                                              "count": entry.get("count", 0)}]
            try:
                last = len(entries) - 1
                parts = [(int(part["lo"]),
                          OwnerIndex.load(int(owner), self.dim, self.dir / str(part["file"]),
                                          spare=self._spare(int(part.get("count", 0)), last=i == last),
                                          limit=self.part_rows))
                         for i, part in enumerate(entries)]
                out[int(owner)] = OwnerGraphs(int(owner), self.dim, parts=parts, part_rows=self.part_rows)
            except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
                log.warning("ann.file_unreadable", owner_id=owner, error=str(exc), fix="rebuilding")
                return {}
        return out

    def _spare(self, count: int, *, last: bool) -> int:
        """Free slots to load a part with: the last one grows (up to part_rows, or a quarter of
        a graph saved before parts); the others only take back an old row now and then."""
        if not last:
            return MIN_CAPACITY
        room = self.part_rows - count if count < self.part_rows else count // 4
        return max(MIN_CAPACITY, room)

    def status(self) -> dict[str, Any]:
        """What ``memoryd status`` shows of the graphs (``behind``: log entries not applied yet)."""
        with read_only(self.engine) as conn:
            last = _last_log_id(conn)
        graphs = dict(self.indexes)
        return {"ready": self.ready.is_set(), "graphs": len(graphs),
                "parts": sum(len(g.parts) for g in graphs.values()),
                "vectors_in_graphs": sum(g.count() for g in graphs.values()),
                "behind": max(0, last - self.applied), "saved_log_id": self.saved_log_id,
                "min_rows": self.min_rows, "ef": self.ef, "split_ef": self.split_ef,
                "part_rows": self.part_rows, "error": self.error}


# -- helpers ---------------------------------------------------------------------------------
def _settings(conn: Connection) -> tuple[int | None, str | None]:
    values: dict[str, str] = {str(k): str(v) for k, v in
                              conn.exec_driver_sql("SELECT key, value FROM vector_settings").all()}
    dim = values.get("dim")
    return (int(dim) if dim is not None else None), values.get("model")


def _last_log_id(conn: Connection) -> int:
    return int(conn.exec_driver_sql("SELECT coalesce(max(id), 0) FROM vector_index_log").scalar_one())


def _same(graph: OwnerGraphs, label: int, vec: np.ndarray) -> bool:
    stored = graph.vector(label)
    norm = float(np.linalg.norm(vec))
    return norm > 0 and bool(np.allclose(stored, vec / norm, atol=1e-6))


def _resized(arr: np.ndarray, size: int, fill: int) -> np.ndarray:
    out = np.full(size, fill, dtype=arr.dtype)
    out[: len(arr)] = arr
    return out


#: The AnnSet that serves an engine's vector searches (the daemon attaches its own at start).
_ATTACHED: Registry[AnnSet] = Registry()
attach = _ATTACHED.attach
detach = _ATTACHED.detach
attached = _ATTACHED.attached
