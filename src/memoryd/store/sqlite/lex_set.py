"""The lexical index beside a large SQLite store: tantivy shards by seq range, kept in step by a log.

The store of record is the database, and FTS5 over it answers any lexical
search exactly. At a million memories FTS5 ranks every match first (about
100 ms for common words), so once a store holds ``min_rows`` active memories
the daemon also keeps a tantivy index of them (store/sqlite/lex.py), split
into shards of ``shard_rows`` consecutive seqs. A search asks every shard for
its best rows, with the reader's scope keys (and a kind) required inside the
shard's search, merges the lists by score, and checks the rows against the
request's filters in the database, as the FTS5 leg does.

The four rules of DESIGN.md's "Indexes beside the store of record":

* **Rebuildable.** The shards are directories under
  ``<data dir>/index/lexical/``, named in ``manifest.json``; deleting the folder
  (or ``memoryd store reindex``) rebuilds them from the store.
* **Crash-consistent.** Triggers (:data:`LOG_DDL`) append the ``seq`` of every
  memory whose content, status, kind or owner changes to
  ``lexical_index_log``, in the writer's transaction. Applying an entry makes
  the shard match the store's current row (delete the document, add it back
  if the row is active), so applying one twice changes nothing. The manifest
  names the shard directories and the last log id their commits hold; it is
  replaced atomically after the commits it describes, so a kill -9 at any
  point leaves shards that the log, applied again from the manifest's id,
  brings back in step. Directories the manifest does not name are removed at
  start. The log is trimmed only up to what the manifest holds.
* **Erased.** Deleting a document hides it at once, but tantivy keeps its words
  in the shard's files until a merge. So an entry for an erased text (the
  content changed or the row deleted) marks its shard for a rebuild from the
  store; the rebuilt shard replaces the old one in the manifest, and the old
  directory's files are overwritten with zeros and removed. The marks are kept
  in the manifest until the rebuild is done, so a crash in between rebuilds
  the shard at the next start.
* **Scoped inside.** Each document carries its scope key; a shard's search
  requires one of the reader's keys, so a shard returns only rows the reader
  may see (never a global top-k filtered afterwards). Rows of any status
  other than active are not indexed: a search for history or candidates uses
  FTS5.

A search always sees its own writes: when the log holds entries the shards
have not applied, a search applies up to :data:`INLINE_CATCH_UP` of them
itself (a commit: about 11 ms), and further behind it answers from FTS5.

PostgreSQL needs none of this here.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError

from memoryd.privatefs import make_dirs
from memoryd.store.engine import read_only
from memoryd.store.sqlite.lex import Queries, Row, Shard, build, wipe
from memoryd.store.sqlite.sidecar import IndexThread, Registry, is_busy, read_manifest, trim_log, write_json

log = structlog.get_logger(__name__)

FORMAT = 2  # 2: the manifest names the log's history
LOG_TABLE = "lexical_index_log"
#: One row: the log's history (a random id made with the log: a manifest of another history
#: describes shards this log never fed) and the id the log was trimmed to (the entries up to it
#: are gone: a manifest older than that missed them).
STATE_TABLE = "lexical_index_state"
_TRIGGERS = ("lexical_index_log_mi", "lexical_index_log_md", "lexical_index_log_mu")
#: The change log and its triggers, created when the store first reaches ``min_rows`` (a small
#: store's writes pay nothing for an index it does not have).
LOG_DDL = [
    f"CREATE TABLE IF NOT EXISTS {LOG_TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "memory_seq INTEGER NOT NULL, erased INTEGER NOT NULL DEFAULT 0)",
    f"CREATE TRIGGER IF NOT EXISTS {_TRIGGERS[0]} AFTER INSERT ON memories "
    f"WHEN new.content IS NOT NULL BEGIN INSERT INTO {LOG_TABLE} (memory_seq) VALUES (new.seq); END",
    f"CREATE TRIGGER IF NOT EXISTS {_TRIGGERS[1]} AFTER DELETE ON memories BEGIN "
    f"INSERT INTO {LOG_TABLE} (memory_seq, erased) VALUES (old.seq, 1); END",
    f"CREATE TRIGGER IF NOT EXISTS {_TRIGGERS[2]} AFTER UPDATE OF content, status, kind, scope, owner "
    "ON memories WHEN new.content IS NOT old.content OR new.status IS NOT old.status "
    "OR new.kind IS NOT old.kind OR new.scope IS NOT old.scope OR new.owner IS NOT old.owner BEGIN "
    f"INSERT INTO {LOG_TABLE} (memory_seq, erased) VALUES (new.seq, new.content IS NOT old.content); END",
    f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "history TEXT NOT NULL, trimmed_to INTEGER NOT NULL)",
]
#: The one status the shards hold.
INDEXED_STATUS = "active"
#: A search applies the log itself when it is at most this far behind; further behind, FTS5
#: answers it while the index thread catches up.
INLINE_CATCH_UP = 256
#: How long a search waits for the index thread's lock before it answers from FTS5 instead.
LOCK_WAIT_S = 0.05
#: Log entries read per step of a catch-up.
LOG_PAGE = 2000
#: Rows read from the store per step of a shard's build.
BUILD_CHUNK = 20_000
#: The manifest is written at least this often while the log is being applied.
SAVE_EVERY_S = 5.0
#: The index thread applies the log for about this long before it saves and rebuilds.
STEP_S = 2.0
#: What is applied as the daemon stops, at most (the rest at the next start).
STOP_BUDGET_S = 5.0

_ROW_SQL = ("SELECT seq, content, scope || ':' || owner, kind FROM memories "
            "WHERE seq >= ? AND seq < ? AND status = ? AND content IS NOT NULL ORDER BY seq LIMIT ?")


def has_log(conn: Connection) -> bool:
    return conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (LOG_TABLE,)).first() is not None


def ensure_log(conn: Connection) -> None:
    for statement in LOG_DDL:
        conn.exec_driver_sql(statement)
    conn.exec_driver_sql(f"INSERT OR IGNORE INTO {STATE_TABLE} (id, history, trimmed_to) VALUES (1, ?, 0)",
                         (uuid.uuid4().hex,))


def drop_log(conn: Connection) -> None:
    """Remove the log and its triggers (the index is turned off: nothing would read them). The
    caller wipes the index's files: changes and erasures after this are never logged."""
    for name in _TRIGGERS:
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {LOG_TABLE}")
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {STATE_TABLE}")


def _last_log_id(conn: Connection) -> int:
    """The last id the log issued (SQLite's AUTOINCREMENT counter: it stays when the log is
    trimmed, where max(id) would fall back to 0)."""
    issued = conn.exec_driver_sql("SELECT seq FROM sqlite_sequence WHERE name = ?", (LOG_TABLE,)).scalar()
    return int(issued or 0)


def _log_state(conn: Connection) -> tuple[str, int]:
    row = conn.exec_driver_sql(f"SELECT history, trimmed_to FROM {STATE_TABLE} WHERE id = 1").one()
    return str(row[0]), int(row[1])


class LexSet(IndexThread):
    """Every shard of one SQLite store's lexical index, and what keeps them in step with it."""

    thread_name = "memoryd-lex"

    def __init__(self, engine: Engine, directory: Path, *, min_rows: int = 200_000,
                 shard_rows: int = 100_000):
        super().__init__()
        self.engine = engine
        self.dir = directory
        self.min_rows = min_rows
        self.shard_rows = shard_rows
        self._lock = threading.RLock()
        self.shards: dict[int, Shard] = {}
        self.applied = 0
        self.saved_log_id = 0
        self.generation = 0
        #: Shards to rebuild (an erased text's words are in them), with how many erasures marked
        #: each: a rebuild clears a shard's mark only if no erasure marked it again meanwhile.
        self.pending: dict[int, int] = {}
        self.ready = threading.Event()
        self._saved_at = 0.0
        self.queries = Queries()
        self.error: str | None = None
        #: waiting (the store is below min_rows), opening (loading or building), ready, failed.
        self.state = "opening"
        self.build_seconds: float | None = None
        self.rebuilds = 0
        # Searches in flight, by the epoch they began in: a replaced shard's files are wiped only
        # once every search that could still read them has ended.
        self._epoch = 0
        self._in_flight: dict[int, int] = {}
        self._cv = threading.Condition()

    # -- life --------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.is_set() and not self.open():
                self._wake.wait(timeout=60.0)  # a small store: look again in a minute
                self._wake.clear()
            busy = False
            while not self._stop.is_set():
                if not busy:
                    self._wake.wait(timeout=1.0)
                self._wake.clear()
                busy = self.catch_up(budget_s=STEP_S) > 0 and self.behind() > 0
                self.rebuild_pending()
                if self.saved_log_id != self.applied and time.monotonic() - self._saved_at >= SAVE_EVERY_S:
                    self.save()
            if self.ready.is_set():
                self.catch_up(budget_s=STOP_BUDGET_S)  # the rest at the next start, from the manifest
                self.save()
        except InterruptedError:  # stopped during a build: built again at the next start
            pass
        except BaseException as exc:  # FTS5 answers every search meanwhile
            if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            # tantivy's panics reach Python as pyo3's PanicException, a BaseException.
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("lex.failed", error=self.error)
            self.ready.clear()
            self.state = "failed"
        finally:
            self.close()

    def close(self) -> None:
        """Commit and release every shard's writer (the thread does this as it stops)."""
        with self._lock:
            for shard in self.shards.values():
                try:
                    shard.close()
                except BaseException as exc:  # closing on the way out (a panic included)
                    if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                        raise
                    log.warning("lex.close_failed", shard=shard.number, error=str(exc))

    def open(self) -> bool:
        """Load the saved shards (or build them when the store is large enough), apply the log,
        rebuild the shards an erasure marked. False when the store is too small for an index."""
        t0 = time.perf_counter()
        with read_only(self.engine) as conn:
            logged = has_log(conn)
        if logged:
            # The triggers again, should a table rebuild have dropped them.
            if not self._create_log():
                return False
        else:
            with read_only(self.engine) as conn:
                active = int(conn.exec_driver_sql(
                    "SELECT count(*) FROM memories WHERE status = ?", (INDEXED_STATUS,)).scalar_one())
            if active < self.min_rows:
                self.state = "waiting"
                return False
            self.state = "opening"
            if not self._create_log():
                return False
        manifest = self._read_manifest()
        if manifest is not None and not self._log_holds(manifest):
            manifest = None
        if manifest is None:
            self._build_all()
        else:
            self._load(manifest)
        self.catch_up()
        self.rebuild_pending()
        self.save()
        self.ready.set()
        self.state = "ready"
        log.info("lex.open", ms=round((time.perf_counter() - t0) * 1000, 1), shards=len(self.shards),
                 docs=self.docs(), built=manifest is None)
        return True

    def _create_log(self, attempts: int = 30) -> bool:
        """Create the log, its triggers and its state row; False when the store's writer stayed
        busy throughout (a large import: the thread looks again a minute later)."""
        for _ in range(attempts):
            try:
                with self.engine.begin() as conn:
                    ensure_log(conn)
                return True
            except OperationalError as exc:
                if not is_busy(exc) or self._stop.is_set():
                    raise
                time.sleep(1.0)
        log.info("lex.log_not_created", reason="the store's writer stayed busy",
                 fix="trying again in a minute")
        return False

    def _log_holds(self, manifest: dict[str, Any]) -> bool:
        """Whether this log can bring the manifest's shards in step: the same history (not a log
        dropped and made again), every entry after the manifest's id still in it (not trimmed
        past it), and that id issued (not a database restored from before it)."""
        log_id = int(manifest.get("log_id", -1))
        with read_only(self.engine) as conn:
            history, trimmed_to = _log_state(conn)
            issued = _last_log_id(conn)
        if manifest.get("history") == history and trimmed_to <= log_id <= issued:
            return True
        log.info("lex.manifest_of_another_history", log_id=log_id, issued=issued, trimmed_to=trimmed_to,
                 same_history=manifest.get("history") == history, fix="rebuilding")
        return False

    # -- building ----------------------------------------------------------------------------
    def _build_all(self) -> None:
        t0 = time.perf_counter()
        for path in self.dir.glob("shard-*"):
            # A new generation's names never meet an old directory's, even one a wipe missed.
            self.generation = max(self.generation, _generation_of(path.name))
            wipe(path)
        with read_only(self.engine) as conn:
            since = _last_log_id(conn)
            top = int(conn.exec_driver_sql("SELECT coalesce(max(seq), 0) FROM memories").scalar_one())
        self.generation += 1
        shards: dict[int, Shard] = {}
        for number in range(top // self.shard_rows + 1):
            if self._stop.is_set():
                raise InterruptedError("stopping")
            shards[number] = self._build_shard(number)
        with self._lock:
            self.shards = shards
            self.applied = since
            self.pending = {}
        self.build_seconds = time.perf_counter() - t0

    def _build_shard(self, number: int) -> Shard:
        """A new directory holding shard ``number``'s active rows, read in short transactions."""
        make_dirs(self.dir)
        return build(number, self.dir / f"shard-{number}.{self.generation}", self._rows(number))

    def _rows(self, number: int) -> Iterable[Row]:
        lo, hi = number * self.shard_rows, (number + 1) * self.shard_rows
        while lo < hi:
            # A transaction per chunk: a reader held for a whole build would keep the WAL (and
            # the pages a forget just erased) from being checkpointed.
            with read_only(self.engine) as conn:
                chunk = conn.exec_driver_sql(_ROW_SQL, (lo, hi, INDEXED_STATUS, BUILD_CHUNK)).all()
            if not chunk:
                return
            for r in chunk:
                yield int(r[0]), str(r[1]), str(r[2]), r[3]
            lo = int(chunk[-1][0]) + 1

    def rebuild_pending(self) -> None:
        """Rebuild each shard an erasure marked, then replace it: its old files are wiped.

        A shard stays marked until its old files are gone, and when an erasure marked it again
        while it was rebuilt (the builder may have read that row before its text was erased),
        it is rebuilt once more."""
        while self.pending and not self._stop.is_set():
            with self._lock:
                number = min(self.pending)
                marks = self.pending[number]  # read before ``since``: a later erasure counts
            with read_only(self.engine) as conn:
                since = _last_log_id(conn)
            with self._lock:
                self.generation += 1
            fresh = self._build_shard(number)
            with self._lock:
                # What the log gained while it was built, for this shard alone.
                lo, hi = number * self.shard_rows, (number + 1) * self.shard_rows
                with read_only(self.engine) as conn:
                    seqs = [int(r[0]) for r in conn.exec_driver_sql(
                        f"SELECT DISTINCT memory_seq FROM {LOG_TABLE} WHERE id > ? AND id <= ? "
                        "AND memory_seq >= ? AND memory_seq < ?", (since, self.applied, lo, hi))]
                    self._apply_rows(conn, seqs, {number: fresh})
                fresh.commit()
                old = self.shards.get(number)
                self.shards[number] = fresh
                self.rebuilds += 1
                self.save()  # names the new directory before the old one is wiped
            if old is not None:
                if not self._quiesce():
                    return  # stopping: the next start wipes the directory no manifest names
                old.close()
                wipe(old.path)
            with self._lock:
                if self.pending.get(number) == marks:
                    del self.pending[number]
                self.save()
            log.info("lex.shard_rebuilt", shard=number, docs=fresh.docs())

    # -- the log -----------------------------------------------------------------------------
    def catch_up(self, limit: int | None = None, budget_s: float | None = None) -> int:
        """Apply the log after ``applied`` (at most ``limit`` entries, for at most about
        ``budget_s`` seconds); return entries applied. The lock is taken a page at a time, so a
        search waits for one page at most, and a stop ends it between pages."""
        done = 0
        until = None if budget_s is None else time.monotonic() + budget_s
        while limit is None or done < limit:
            if done and (self._stop.is_set() or (until is not None and time.monotonic() > until)):
                break
            with self._lock:
                page = LOG_PAGE if limit is None else min(LOG_PAGE, limit - done)
                with read_only(self.engine) as conn:
                    rows = conn.exec_driver_sql(
                        f"SELECT id, memory_seq, erased FROM {LOG_TABLE} WHERE id > ? ORDER BY id LIMIT ?",
                        (self.applied, page)).all()
                    if not rows:
                        return done
                    seqs = list(dict.fromkeys(int(r[1]) for r in rows))
                    touched = self._apply_rows(conn, seqs, self.shards, create=True)
                for number in touched:
                    self.shards[number].commit()
                for r in rows:
                    if r[2]:
                        number = int(r[1]) // self.shard_rows
                        self.pending[number] = self.pending.get(number, 0) + 1
                self.applied = int(rows[-1][0])
                done += len(rows)
        return done

    def _apply_rows(self, conn: Connection, seqs: Sequence[int], shards: dict[int, Shard],
                    create: bool = False) -> set[int]:
        """Make ``shards`` match the store for each memory in ``seqs`` (decided from the current
        row alone, so applying twice, or onto an older shard, gives the same result)."""
        touched: set[int] = set()
        for seq in seqs:
            number = seq // self.shard_rows
            shard = shards.get(number)
            if shard is None:
                if not create:
                    continue
                make_dirs(self.dir)
                shard = shards[number] = Shard(number, self.dir / f"shard-{number}.{self.generation}")
            row = conn.exec_driver_sql(
                "SELECT content, scope || ':' || owner, kind, status FROM memories WHERE seq = ?",
                (seq,)).first()
            shard.delete(seq)
            if row is not None and row[3] == INDEXED_STATUS and row[0] is not None:
                shard.add([(seq, str(row[0]), str(row[1]), row[2])])
            touched.add(number)
        return touched

    # -- search ------------------------------------------------------------------------------
    def top(self, conn: Connection, words: Sequence[str], *, keys: Sequence[str],
            statuses: Sequence[str], kind: str | None, fetch: int) -> list[tuple[int, float]] | None:
        """The best ``fetch`` (seq, score) of the reader's rows for ``words``, or None when the
        index cannot answer this search exactly (not ready, too far behind, other statuses):
        the caller asks FTS5 instead."""
        if not self.ready.is_set() or list(statuses) != [INDEXED_STATUS] or not keys:
            return None
        epoch = self._enter()
        try:
            return self._top(conn, words, keys=keys, kind=kind, fetch=fetch)
        finally:
            self._leave(epoch)

    def _top(self, conn: Connection, words: Sequence[str], *, keys: Sequence[str], kind: str | None,
             fetch: int) -> list[tuple[int, float]] | None:
        behind = _last_log_id(conn) - self.applied
        if behind > 0:
            if behind > INLINE_CATCH_UP or not self._lock.acquire(timeout=LOCK_WAIT_S):
                self._wake.set()
                return None
            try:
                self.catch_up(limit=INLINE_CATCH_UP)
                behind = _last_log_id(conn) - self.applied
            finally:
                self._lock.release()
            self._wake.set()  # an erased text's shard is rebuilt on the thread, not here
            if behind > 0:
                return None
        tokens = self.queries.tokens(words)
        if not tokens:
            return None  # a word the shards cannot hold (too long, no letters): FTS5's
        shards = list(self.shards.values())
        if not shards:
            return []
        query = self.queries.query(shards[0].schema, tokens, keys, kind)
        hits: list[tuple[int, float]] = []
        for shard in shards:
            hits += shard.search(query, fetch)
        hits.sort(key=lambda h: -h[1])
        return hits[:fetch]

    def _enter(self) -> int:
        with self._cv:
            epoch = self._epoch
            self._in_flight[epoch] = self._in_flight.get(epoch, 0) + 1
            return epoch

    def _leave(self, epoch: int) -> None:
        with self._cv:
            self._in_flight[epoch] -= 1
            if not self._in_flight[epoch]:
                del self._in_flight[epoch]
                self._cv.notify_all()

    def _quiesce(self, timeout_s: float = 10.0) -> bool:
        """Wait until every search that began before now has ended; False when the daemon began
        to stop first."""
        with self._cv:
            self._epoch += 1
            cutoff = self._epoch
            while not self._cv.wait_for(lambda: all(e >= cutoff for e in self._in_flight), timeout=timeout_s):
                if self._stop.is_set():
                    return False
                log.warning("lex.search_still_reading", waited_s=timeout_s,
                            fix="the replaced shard is wiped when it ends")
            return True

    # -- files -------------------------------------------------------------------------------
    def save(self) -> None:
        """Write the manifest (the shards' directories, the log id they hold, the shards still to
        rebuild), then trim the log. A directory it no longer names is wiped by whoever replaced
        it, once no search reads it, or at the next start."""
        with self._lock:
            make_dirs(self.dir)
            with read_only(self.engine) as conn:
                history, _ = _log_state(conn)
            manifest = {"format": FORMAT, "history": history, "shard_rows": self.shard_rows,
                        "log_id": self.applied,
                        "generation": self.generation, "pending": sorted(self.pending),
                        "shards": {str(n): s.path.name for n, s in self.shards.items()}}
            write_json(self.dir / "manifest.json", manifest)
            self.saved_log_id = self.applied
            self._saved_at = time.monotonic()
            trim_log(self.engine, [
                (f"DELETE FROM {LOG_TABLE} WHERE id <= ?", (self.applied,)),
                (f"UPDATE {STATE_TABLE} SET trimmed_to = max(trimmed_to, ?) WHERE id = 1", (self.applied,)),
            ])

    def _read_manifest(self) -> dict[str, Any] | None:
        manifest = read_manifest(self.dir / "manifest.json", "lex.manifest_unreadable")
        if manifest is None:
            return None
        if manifest.get("format") != FORMAT or manifest.get("shard_rows") != self.shard_rows:
            log.info("lex.manifest_stale", format=manifest.get("format"),
                     shard_rows=manifest.get("shard_rows"))
            return None
        return dict(manifest)

    def _load(self, manifest: dict[str, Any]) -> None:
        shards: dict[int, Shard] = {}
        try:
            for number, name in manifest.get("shards", {}).items():
                path = self.dir / str(name)
                if not (path / "meta.json").exists():
                    raise FileNotFoundError(f"{path}/meta.json")
                shards[int(number)] = Shard(int(number), path)
        except (OSError, ValueError) as exc:
            log.warning("lex.shard_unreadable", error=str(exc), fix="rebuilding")
            self._build_all()
            return
        with self._lock:
            self.shards = shards
            self.applied = int(manifest["log_id"])
            self.generation = int(manifest.get("generation", 0))
            self.pending = {int(n): 1 for n in manifest.get("pending", [])}
        keep = {s.path.name for s in shards.values()}
        for path in self.dir.glob("shard-*"):
            if path.name not in keep:  # a build or rebuild a crash interrupted
                wipe(path)

    def behind(self) -> int:
        with read_only(self.engine) as conn:
            return max(0, _last_log_id(conn) - self.applied)

    def docs(self) -> int:
        return sum(s.docs() for s in list(self.shards.values()))

    def status(self) -> dict[str, Any]:
        """What ``memoryd status`` shows of the lexical index (``behind``: log entries not
        applied yet; ``rebuilding``: shards an erasure marked)."""
        behind = self.behind() if self.ready.is_set() else 0
        return {"state": self.state, "ready": self.ready.is_set(), "shards": len(self.shards),
                "docs": self.docs(), "behind": behind, "rebuilding": len(self.pending),
                "min_rows": self.min_rows, "shard_rows": self.shard_rows, "error": self.error}


def _generation_of(name: str) -> int:
    """The generation in a shard directory's name (``shard-N.G``), 0 if it has none."""
    _, _, gen = name.rpartition(".")
    return int(gen) if gen.isdigit() else 0


#: The LexSet that serves an engine's lexical searches (the daemon attaches its own at start).
_ATTACHED: Registry[LexSet] = Registry()
attach = _ATTACHED.attach
detach = _ATTACHED.detach
attached = _ATTACHED.attached
