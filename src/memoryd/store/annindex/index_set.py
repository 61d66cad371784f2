"""The ANN indexes beside a store: one HNSW graph per large owner, kept in step by a log.

The store of record is the database: it holds every vector (sqlite-vec's
``memory_vec``, or pgvector's ``memory_vectors``), and exact KNN over it answers
any search. At a million memories that scan costs 270 ms on SQLite, and
pgvector's one HNSW index over every row finds 0.37 of the exact top 10 of real
sentence vectors, so an owner (one scope and owner pair) with at least
``min_rows`` vectors also gets HNSW graphs (store/annindex/graph.py), split into
parts of at most ``part_rows`` (parts.py); an owner with at least ``flat_rows``
is scanned flat instead, as 8-bit codes in memory (flat.py: on vectors
without neighbourhoods a graph costs what a scan costs). What the graphs read from the store
(the change log, the rows, the owners' ids) each backend gives in its own way
(source.py). A search asks each visible large owner's graph for its
nearest rows (a graph holds only its owner's active rows; a kind is applied
inside the graph walk), and the
small owners' rows exactly, as before; the lists are merged by distance. Owner
filtering is therefore never a filter over a global top-k: a graph only holds
its owner's rows.

The four rules of DESIGN.md's "Indexes beside the store of record":

* **Rebuildable.** The graphs are files under ``<data dir>/index/vectors/``,
  named in ``manifest.json``; deleting the folder (or ``memoryd store
  reindex``) rebuilds them from the store. A flat owner has no file: it is
  built from the store at each start.
* **Crash-consistent.** Triggers append the ``seq`` of every memory whose
  vector, status, kind or owner changes to ``vector_index_log``, in the
  writer's transaction (store/sqlite/ann_log.py, store/postgres/ann_log.py).
  The manifest records the log position its files hold; at start the daemon
  applies the log from there, making the graph match
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

On PostgreSQL every daemon keeps graphs of its own, as it keeps its own lexical
shards, and the store's own search (pgvector's HNSW index) answers until they
are ready.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import structlog
from sqlalchemy import Connection, Engine

from memoryd.privatefs import make_dirs
from memoryd.store.annindex.flat import FlatOwner, FlatSlice
from memoryd.store.annindex.graph import MIN_CAPACITY, OwnerIndex
from memoryd.store.annindex.parts import PART_ROWS, SPLIT_EF, OwnerGraphs, search_side_by_side
from memoryd.store.annindex.source import VectorSource
from memoryd.store.engine import is_sqlite, read_only
from memoryd.store.lexindex.changelog import LogTrimmed, Position, distinct_seqs, start_reading
from memoryd.store.sidecar import IndexThread, Registry, read_manifest, write_json

log = structlog.get_logger(__name__)

#: 3: an owner's rows in parts of at most ``part_rows`` (store/annindex/parts.py). A format-2
#: set (one graph an owner, active rows only, ef_construction 200) is loaded as one part an owner;
#: a format-1 set is rebuilt.
FORMAT = 3
READABLE_FORMATS = (2, 3)
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
#: How often the index thread records its saved position however quiet the store (PostgreSQL:
#: the log is kept for the readers seen in the last day; the lexical index's cadence).
KEEPALIVE_S = 600.0
#: ``behind`` in the status counts log entries up to this many.
BEHIND_CAP = 1_000_000
#: Above every seq (the upper bound of a seq range that means "all of them").
_NO_SEQ_ABOVE = 2**62

#: Vectors at which an owner is scanned flat instead of walked as graphs (store/annindex/flat.py):
#: more than two parts' worth. One owner's million random vectors: the scan's vector leg 23.9 ms
#: p50 through the daemon, recall@10 1.000, on any vectors; ten graphs 84 ms there for 0.895, and
#: 13.4 ms on real sentence vectors (bench/search.py --owners one, docs/operations.md).
FLAT_ROWS = 200_000

Exact = Callable[[Sequence[str], int], list[tuple[int, float]]]
#: What the set keeps for a large owner: its graphs, or its flat slices.
OwnerVectors = OwnerGraphs | FlatOwner


def source_for(engine: Engine) -> VectorSource:
    """The vectors and change log of ``engine``'s backend."""
    if is_sqlite(engine):
        from memoryd.store.sqlite.ann_log import SqliteVectors

        return SqliteVectors()
    from memoryd.store.postgres.ann_log import PostgresVectors

    return PostgresVectors()


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
    """Every large owner's graphs for one store, and what keeps them in step with it."""

    thread_name = "memoryd-ann"

    def __init__(self, engine: Engine, directory: Path, *, min_rows: int = 20000, ef: int = 512,
                 threads: int = 2, save_every: int = 20000, part_rows: int = PART_ROWS,
                 split_ef: int = SPLIT_EF, flat_rows: int = FLAT_ROWS, source: VectorSource | None = None):
        super().__init__()
        self.engine = engine
        self.source = source or source_for(engine)
        self.log = self.source.log
        self.dir = directory
        self.min_rows = min_rows
        self.ef = ef
        self.split_ef = split_ef
        self.threads = threads
        self.save_every = save_every
        self.part_rows = part_rows
        #: Vectors at which an owner is scanned flat (0: never).
        self.flat_rows = flat_rows
        self._lock = threading.RLock()
        self.indexes: dict[int, OwnerVectors] = {}
        self.owner_of = np.full(0, -1, dtype=np.int32)
        self.kind_code = np.zeros(0, dtype=np.uint8)
        self.counts = OwnerCounts()
        self.kinds = Codes()
        self.dim: int | None = None
        self.model: str | None = None
        self.applied = Position()  # the log position the arrays and every graph in ``indexes`` hold
        self.saved = Position()  # what the manifest on disk holds
        #: Log entries applied since the last save.
        self.unsaved = 0
        #: This index's name among the daemons that read one PostgreSQL store's log.
        self.reader = uuid.uuid4().hex
        self.generation = 0
        self.ready = threading.Event()
        self.build_seconds: dict[int, float] = {}
        #: Graphs the last open() loaded from files (the rest it built).
        self.loaded_graphs = 0
        #: Set when the log was trimmed past ``applied``: the index thread builds every graph again.
        self._reopen = False
        #: When this reader's position was last recorded in the log (PostgreSQL).
        self._seen_at = time.monotonic()
        self.error: str | None = None
        #: The manifest names files of an owner no longer kept as graphs: the next save rewrites it.
        self._manifest_stale = False

    # -- life --------------------------------------------------------------------------------
    def start(self) -> None:
        """Create the log (now, before any write) and open or build the graphs on a thread."""
        self.ensure_log()
        super().start()

    def ensure_log(self) -> None:
        """Create the change log and its triggers if the store has none yet."""
        with self.engine.begin() as conn:
            self.log.ensure(conn)

    def _run(self) -> None:
        try:
            self.open()
            while not self._stop.is_set():
                self._wake.wait(timeout=1.0)
                self._wake.clear()
                self.catch_up()
                if self._reopen:  # the log lost entries these graphs had not applied
                    self._reopen = False
                    self.open(fresh=True)
                self._build_grown()
                if self.unsaved >= self.save_every:
                    self.save()
                elif time.monotonic() - self._seen_at >= KEEPALIVE_S:
                    # The saved position again: other daemons' trims keep what the files need.
                    self.log.register(self.engine, self.saved, self.reader)
                    self._seen_at = time.monotonic()
            self.catch_up()
            self.save()
        except Exception as exc:  # the exact scan answers every search meanwhile
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("ann.failed", error=self.error)
            with self._lock:
                self.indexes.clear()

    def open(self, fresh: bool = False) -> None:
        """Load the saved graphs that still fit the store (none when ``fresh``), scan the
        store's vectors, catch up, and build the graphs of large owners that have none."""
        t0 = time.perf_counter()
        with read_only(self.engine) as conn:
            self.dim, self.model = self.source.settings(conn)
        manifest = None if fresh else self._read_manifest()
        if manifest is not None and not self.source.restore(manifest):
            manifest = None
        if manifest is None:
            self.source.restore(None)
            since = start_reading(self.log, self.engine, self.reader, "ann.log_trimmed_past_start")
        else:
            # This reader's saved position, seen again: other daemons' trims keep what follows it.
            self.reader = str(manifest.get("reader") or self.reader)
            since = _position_of(manifest)
            self.log.register(self.engine, since, self.reader)
        with read_only(self.engine) as conn:
            self._scan(conn)
        loaded = self._load(manifest) if manifest is not None else {}
        n_loaded = self.loaded_graphs = len(loaded)
        with self._lock:
            self.indexes = loaded
            # Graphs loaded from files stand where they were saved; the arrays were read after
            # ``since``, and applying the entries after it again changes nothing.
            self.applied = since
            self.saved = self.applied if loaded else Position()
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
                    try:
                        entries, position = self.log.read(conn, self.applied, LOG_PAGE)
                    except LogTrimmed as exc:  # another daemon trimmed what this one had not applied
                        log.warning("ann.log_trimmed", error=str(exc), fix="building the graphs again")
                        self.indexes = {}  # searches use the store's own until they are built
                        self._reopen = True
                        self._wake.set()
                        return done
                    seqs = distinct_seqs(entries)
                    if seqs:
                        self._apply(conn, seqs, self.indexes)
                self.applied = position
                self.unsaved += len(entries)
                done += len(seqs)
                if len(entries) < LOG_PAGE:
                    return done

    def _apply(self, conn: Connection, seqs: Iterable[int], graphs: dict[int, OwnerVectors]) -> None:
        """Make the arrays and ``graphs`` match the store for each memory in ``seqs``.

        Decided from the store's current row alone (never from what the arrays
        last said), so replaying an entry, or replaying onto a graph loaded from an
        older file or built from an older snapshot, gives the same result.
        """
        pending: dict[int, list[tuple[int, np.ndarray]]] = {}
        seqs = list(seqs)
        current = self.source.rows(conn, seqs)
        for seq in seqs:
            row = current.get(seq)
            owner = row.owner if row is not None else -1
            # A graph holds its owner's active rows only: any other status leaves it.
            home = owner if row is not None and row.status == GRAPH_STATUS else -1
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
            self.kind_code[seq] = self.kinds.code(row.kind)
            target = graphs.get(home)
            if target is not None:
                vec = row.vector
                if not target.contains(seq) or not target.same(seq, vec):
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
        """Every stored vector's owner and kind, read in chunks into the arrays (a million rows
        never sit in Python lists)."""
        self.owner_of = np.full(0, -1, dtype=np.int32)
        self.kind_code = np.zeros(0, dtype=np.uint8)
        self._grow(self.source.top_seq(conn))
        self.counts = OwnerCounts()
        for chunk in self.source.scan(conn, SCAN_CHUNK):
            if len(chunk.seqs):
                self._grow(int(chunk.seqs.max()))
            self.owner_of[chunk.seqs] = chunk.owners
            self.kind_code[chunk.seqs] = [self.kinds.code(kind) for kind in chunk.kinds]
            self.counts.add_many(chunk.owners)

    # -- building ----------------------------------------------------------------------------
    def _build_grown(self) -> None:
        """Build a graph for each owner that reached ``min_rows`` and has none, and flat slices
        for each owner that reached ``flat_rows`` and has graphs or nothing (a flat owner that
        shrinks stays flat until the next start)."""
        if self.dim is None:
            with read_only(self.engine) as conn:
                self.dim, self.model = self.source.settings(conn)
        for owner, count in self.counts.at_least(self.min_rows):
            if self._stop.is_set():
                return
            flat = self._flat(count)
            have = self.indexes.get(owner)
            if have is None or (flat and not isinstance(have, FlatOwner)):
                self.build(owner, flat=flat)

    def _flat(self, count: int) -> bool:
        return 0 < self.flat_rows <= count

    def build(self, owner: int, *, flat: bool = False) -> OwnerVectors | None:
        """Build ``owner``'s graphs (or flat slices) from the store (the lock is not held
        meanwhile: searches use the exact scan for it, or what it had), then apply what the log
        gained while it was built, and install it. None when the daemon began to stop meanwhile."""
        assert self.dim is not None
        t0 = time.perf_counter()
        graph: OwnerVectors = (FlatOwner(owner, self.dim) if flat
                               else OwnerGraphs(owner, self.dim, part_rows=self.part_rows))
        # Short read transactions, never one for the whole build: a reader held for minutes would
        # keep the WAL from being checkpointed, and with it the pages a forget just erased.
        # Whatever changes meanwhile is in the log after ``since`` and is applied below.
        with read_only(self.engine) as conn:
            # This reader's recorded position is at or before ``applied``, itself at or before
            # ``since``: other daemons' trims keep the entries after it.
            since = self.log.head(conn)
            key = self.source.owner_key(conn, owner)
            seqs = self.source.active_seqs(conn, key, GRAPH_STATUS)
        for start in range(0, len(seqs), BUILD_CHUNK):
            if self._stop.is_set():
                return None  # shutting down: built again at the next start
            with read_only(self.engine) as conn:
                labels, vecs = self.source.vectors(conn, seqs[start:start + BUILD_CHUNK])
            if labels:
                graph.add(labels, vecs, threads=self.threads)
        with self._lock:
            # Entries after the snapshot, up to what the other graphs hold, for this graph alone.
            with read_only(self.engine) as conn:
                changed = self.log.seqs_since(conn, since, self.applied, 0, _NO_SEQ_ABOVE)
                self._apply(conn, changed, {owner: graph})
            replaced = self.indexes.get(owner)
            self.indexes[owner] = graph
            if replaced is not None:
                # Its graphs' files leave now: erasures no longer reach a graph out of the set.
                self._manifest_stale = True
                self.save()
        self.build_seconds[owner] = time.perf_counter() - t0
        log.info("ann.built", owner_id=owner, vectors=graph.count(), parts=len(graph.parts), flat=flat,
                 s=round(self.build_seconds[owner], 1))
        return graph

    # -- search ------------------------------------------------------------------------------
    def knn(self, conn: Connection, query: np.ndarray, *, k: int, scope_keys: Sequence[str],
            statuses: Sequence[str], kind: str | None, exact: Exact,
            fallback: Exact | None = None) -> list[tuple[int, float]]:
        """The ``k`` nearest visible rows: each large owner's graph, the rest by ``exact``.
        ``fallback`` (``exact`` unless given) answers a search no graph can: before the graphs
        are ready, or for statuses no graph holds (history, candidates)."""
        if not self.ready.is_set() or not self.indexes or list(statuses) != [GRAPH_STATUS]:
            return (fallback or exact)(scope_keys, k)
        behind = self.log.behind(conn, self.applied, INLINE_CATCH_UP + 1)
        if 0 < behind <= INLINE_CATCH_UP and self._lock.acquire(blocking=False):
            try:  # a few fresh vectors: this search sees them (never waits on a build or a save)
                self.catch_up()
            finally:
                self._lock.release()
        elif behind > 0:
            self._wake.set()  # the index thread applies a larger batch; this search does not wait
        owners = self.source.owner_ids(conn, scope_keys)
        graphs = self.indexes
        by_graph = {o: key for key, o in owners.items() if o in graphs}
        rest = [key for key in scope_keys if key not in by_graph.values()]
        allowed = self._kind_filter(kind)
        hits: list[tuple[int, float]] = []
        parts = [(owner, part) for owner in by_graph for part in graphs[owner].parts]
        # The parts of every large owner the reader sees, side by side.
        founds = search_side_by_side([(part, self._ef(part, allowed)) for _, part in parts],
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

    def _ef(self, part: OwnerIndex | FlatSlice, allowed: Callable[[int], bool] | None) -> int:
        """The beam for one graph: ``split_ef`` for a graph holding more than half of
        ``part_rows`` vectors (a full part of a split owner, or a whole owner's graph that
        large), ``ef`` for smaller ones, and ``ef`` whenever a kind filter runs (the filtered
        walk goes further). A graph's recall at one beam falls as it grows: at a million real
        sentence vectors one graph of 100,000 found 0.917 of the exact top 10 at ef 512 and
        0.962 at 1,024, graphs of 50,000 found 0.973 at 512, and with a kind filter the
        graphs of 100,000 found 0.990 at 512 (bench/studies/ann_million_real.py). An owner
        below ``part_rows`` was searched at ``ef`` before: three graphs of 50,000 - 100,000
        found 0.939 of the exact top 10 over 200 questions at 512, 0.966 at 1,024
        (bench/search.py --vectors real, owners spread). A flat slice has no beam."""
        if allowed is None and part.size() > self.part_rows // 2:
            return self.split_ef
        return self.ef

    def _kind_filter(self, kind: str | None) -> KindFilter | None:
        """None without a kind: the graphs hold active rows only, so the common search calls no
        Python per visited node (hnswlib takes the GIL for each call: 7,458 calls a query at ef
        256 for a 5 % filter, bench/studies/ann_candidates.py)."""
        if kind is None:
            return None
        return KindFilter(self.kind_code, self.kinds.known(kind))

    # -- files -------------------------------------------------------------------------------
    def save(self) -> None:
        """Write the changed graphs under a new generation, then the manifest, then trim the log."""
        with self._lock:
            if (self.saved == self.applied and not self._manifest_stale
                    and not any(g.dirty for g in self.indexes.values())):
                return
            make_dirs(self.dir)
            with read_only(self.engine) as conn:
                history = self.log.history(conn)
            gen = self.generation + 1
            files: dict[str, dict[str, Any]] = {}
            for owner, graphs in self.indexes.items():
                if isinstance(graphs, FlatOwner):
                    continue  # built from the store at each start: no file
                entries = []
                for i, (lo, part) in enumerate(zip(graphs.los, graphs.parts, strict=True)):
                    if part.dirty or part.path is None:
                        part.save(self.dir / f"owner-{owner}-{i}.{gen}.hnsw")
                    assert part.path is not None
                    entries.append({"file": part.path.name, "lo": lo, "count": int(part.index.element_count)})
                files[str(owner)] = {"parts": entries}
            # log_id: the position's id alone, as a manifest of format 3 before 2026-12-06 had it.
            manifest = {"format": FORMAT, "dim": self.dim, "model": self.model, "log_id": self.applied.mark,
                        "position": self.applied.to_json(), "history": history, "reader": self.reader,
                        "generation": gen, "owners": files, **self.source.manifest_state()}
            write_json(self.dir / "manifest.json", manifest)
            self.generation, self.saved, self.unsaved = gen, self.applied, 0
            self._manifest_stale = False
            self._seen_at = time.monotonic()
            keep = {part["file"] for entry in files.values() for part in entry["parts"]} | {"manifest.json"}
            for path in self.dir.iterdir():
                if path.name not in keep:
                    path.unlink()
            self.log.trim(self.engine, self.applied, self.reader)

    def _read_manifest(self) -> dict[str, Any] | None:
        manifest = read_manifest(self.dir / "manifest.json", "ann.manifest_unreadable")
        if manifest is None:
            return None
        if (manifest.get("format") not in READABLE_FORMATS or manifest.get("dim") != self.dim
                or manifest.get("model") != self.model):
            log.info("ann.manifest_stale", dim=manifest.get("dim"), model=manifest.get("model"))
            return None
        position = _position_of(manifest)
        with read_only(self.engine) as conn:
            history = self.log.history(conn)
            holds = self.log.holds(conn, position)
        if manifest.get("history", "") != history or not holds:
            # A log dropped and made again, trimmed past the files, or a database restored from
            # before them: the files cannot be brought in step.
            log.info("ann.manifest_of_another_history", position=position.to_json(),
                     same_history=manifest.get("history", "") == history, fix="rebuilding")
            return None
        return dict(manifest)

    def _load(self, manifest: dict[str, Any]) -> dict[int, OwnerVectors]:
        assert self.dim is not None
        out: dict[int, OwnerVectors] = {}
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

    def sizes(self) -> dict[str, int]:
        """Graph owners, their parts and vectors; flat owners and their vectors."""
        indexes = list(self.indexes.values())
        graphs = [g for g in indexes if isinstance(g, OwnerGraphs)]
        flat = [g for g in indexes if isinstance(g, FlatOwner)]
        return {"graphs": len(graphs), "parts": sum(len(g.parts) for g in graphs),
                "vectors_in_graphs": sum(g.count() for g in graphs),
                "flat_owners": len(flat), "vectors_scanned_flat": sum(g.count() for g in flat)}

    def status(self) -> dict[str, Any]:
        """What ``memoryd status`` shows of the graphs (``behind``: log entries not applied yet)."""
        with read_only(self.engine) as conn:
            behind = self.log.behind(conn, self.applied, BEHIND_CAP)
        return {"ready": self.ready.is_set(), **self.sizes(), "flat_rows": self.flat_rows,
                "behind": behind, "saved_log_id": self.saved.mark,
                "min_rows": self.min_rows, "ef": self.ef, "split_ef": self.split_ef,
                "part_rows": self.part_rows, "error": self.error,
                "fallback": "the exact scan" if is_sqlite(self.engine) else "pgvector's HNSW index"}


# -- helpers ---------------------------------------------------------------------------------
def drop_unread_log(engine: Engine) -> None:
    """Drop the change log and its triggers (the index is turned off), unless another daemon on a
    PostgreSQL store reads it. The caller removes the graphs' files: changes and erasures after
    this are never logged for them."""
    changelog = source_for(engine).log
    with engine.begin() as conn:
        if changelog.exists(conn) and not changelog.read_elsewhere(conn):
            changelog.drop(conn)


def _position_of(manifest: dict[str, Any] | None) -> Position:
    """The log position a manifest's files hold (format 3 before 2026-12-06: ``log_id`` alone)."""
    if manifest is None:
        return Position()
    return Position.from_json(manifest.get("position", manifest.get("log_id", 0)))


class KindFilter:
    """Whether a label's kind is the one asked for: a call per label (a graph walk's filter) or
    a mask over many (a flat scan's)."""

    def __init__(self, codes: np.ndarray, want: int | None):
        self.codes = codes
        self.want = want

    def __call__(self, label: int) -> bool:
        return self.want is not None and int(self.codes[label]) == self.want

    def mask(self, labels: np.ndarray) -> np.ndarray:
        if self.want is None:
            return np.zeros(len(labels), dtype=bool)
        inside = labels < len(self.codes)
        out = np.zeros(len(labels), dtype=bool)
        out[inside] = self.codes[labels[inside]] == self.want
        return out


def _resized(arr: np.ndarray, size: int, fill: int) -> np.ndarray:
    out = np.full(size, fill, dtype=arr.dtype)
    out[: len(arr)] = arr
    return out


#: The AnnSet that serves an engine's vector searches (the daemon attaches its own at start).
_ATTACHED: Registry[AnnSet] = Registry()
attach = _ATTACHED.attach
detach = _ATTACHED.detach
attached = _ATTACHED.attached
