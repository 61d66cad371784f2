"""The lexical index beside a large store: tantivy shards by seq range, kept in step by a change log.

The store of record is the database, and its own full-text search (FTS5 on
SQLite, a tsvector's GIN index on PostgreSQL) answers any lexical search
exactly. At a million memories both rank every match first (FTS5 about 100 ms
for common words, PostgreSQL's ``ts_rank_cd`` over a second), so once a store
holds ``min_rows`` active memories the daemon also keeps a tantivy index of
them (store/lexindex/shard.py), split into shards of ``shard_rows``
consecutive seqs. A search asks every shard for its best rows, with the
reader's scope keys (and a kind) required inside the shard's search, merges
the lists by score, and checks the rows against the request's filters in the
database, as the store's own leg does.

The four rules of DESIGN.md's "Indexes beside the store of record":

* **Rebuildable.** The shards are directories under
  ``<data dir>/index/lexical/``, named in ``manifest.json``; deleting the folder
  (or ``memoryd store reindex``) rebuilds them from the store.
* **Crash-consistent.** Triggers append the ``seq`` of every memory whose
  content, status, kind or owner changes to a change log, in the writer's
  transaction (store/lexindex/changelog.py: SQLite's log is read by id,
  PostgreSQL's by id and the transactions running when it was last read).
  Applying an entry makes the shard match the store's current row (delete
  the document, add it back if the row is active), so applying one twice
  changes nothing. The manifest names the
  shard directories and the log position their commits hold; it is replaced
  atomically after the commits it describes, so a kill -9 at any point leaves
  shards that the log, applied again from the manifest's position, brings
  back in step. Directories the manifest does not name are removed at start.
  The log is trimmed only up to what the manifest holds (on PostgreSQL, up to
  what every daemon's manifest holds: each keeps its own shards).
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
  the store's own leg.

A search always sees its own writes: when the log holds entries the shards
have not applied, a search applies up to :data:`INLINE_CATCH_UP` of them
itself (a commit: about 11 ms), and further behind it answers from the store.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import Connection, Engine, select, text
from sqlalchemy.exc import OperationalError

from memoryd.privatefs import make_dirs
from memoryd.store.engine import is_sqlite, read_only
from memoryd.store.lexindex.changelog import ChangeLog, LogTrimmed, Position, distinct_seqs, start_reading
from memoryd.store.lexindex.logs import log_for
from memoryd.store.lexindex.shard import Queries, Row, Shard, build, wipe
from memoryd.store.schema import memories
from memoryd.store.sidecar import IndexThread, Registry, is_busy, read_manifest, write_json

log = structlog.get_logger(__name__)

#: 3: the log position (SQLite: the last id; PostgreSQL: with the running transactions), the reader.
FORMAT = 3
#: The one status the shards hold.
INDEXED_STATUS = "active"
#: A search applies the log itself when it is at most this far behind; further behind, the
#: store's own leg answers it while the index thread catches up.
INLINE_CATCH_UP = 256
#: How long a search waits for the index thread's lock before it answers from the store instead.
LOCK_WAIT_S = 0.05
#: Log entries read per step of a catch-up.
LOG_PAGE = 2000
#: Rows read from the store per step of a shard's build.
BUILD_CHUNK = 20_000
#: Rows of the store read in one statement while the log is applied.
APPLY_CHUNK = 500
#: The manifest is written at least this often while the log is being applied.
SAVE_EVERY_S = 5.0
#: ... and this often however quiet the store: on PostgreSQL it tells the other daemons that
#: this one still reads the log (store/postgres/lex_log.py keeps it for the readers seen lately).
KEEPALIVE_S = 600.0
#: How far behind ``memoryd status`` counts (PostgreSQL counts the unapplied entries).
BEHIND_CAP = 1_000_000
#: The index thread applies the log for about this long before it saves and rebuilds.
STEP_S = 2.0
#: What is applied as the daemon stops, at most (the rest at the next start).
STOP_BUDGET_S = 5.0

_ROW_SQL = text("SELECT seq, content, scope || ':' || owner, kind FROM memories "
                "WHERE seq >= :lo AND seq < :hi AND status = :status AND content IS NOT NULL "
                "ORDER BY seq LIMIT :n")
_ACTIVE = text("SELECT count(*) FROM memories WHERE status = :status")
_TOP_SEQ = text("SELECT coalesce(max(seq), 0) FROM memories")


class LexSet(IndexThread):
    """Every shard of one SQLite store's lexical index, and what keeps them in step with it."""

    thread_name = "memoryd-lex"

    def __init__(self, engine: Engine, directory: Path, *, min_rows: int = 200_000,
                 shard_rows: int = 100_000, changelog: ChangeLog | None = None):
        super().__init__()
        self.engine = engine
        self.log = changelog or log_for(engine)
        self.dir = directory
        self.min_rows = min_rows
        self.shard_rows = shard_rows
        self._lock = threading.RLock()
        self.shards: dict[int, Shard] = {}
        self.applied = Position()
        self.saved = Position()
        #: This index's name among the daemons that read one PostgreSQL store's log.
        self.reader = uuid.uuid4().hex
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
                try:
                    busy = self.catch_up(budget_s=STEP_S) > 0 and self.behind() > 0
                except LogTrimmed as exc:
                    self._rebuild_all(str(exc))
                    continue
                self.rebuild_pending()
                since_save = time.monotonic() - self._saved_at
                if (self.saved != self.applied and since_save >= SAVE_EVERY_S) or since_save >= KEEPALIVE_S:
                    self.save()
            if self.ready.is_set():
                with _suppress_trimmed():
                    self.catch_up(budget_s=STOP_BUDGET_S)  # the rest at the next start, from the manifest
                self.save()
        except InterruptedError:  # stopped during a build: built again at the next start
            pass
        except BaseException as exc:  # the store's own leg answers every search meanwhile
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
            logged = self.log.exists(conn)
        if logged:
            # The triggers again, should a table rebuild have dropped them.
            if not self._create_log():
                return False
        else:
            with read_only(self.engine) as conn:
                active = int(conn.execute(_ACTIVE, {"status": INDEXED_STATUS}).scalar_one())
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
        try:
            self.catch_up()
        except LogTrimmed as exc:  # another daemon trimmed it while this one was away
            self._rebuild_all(str(exc))
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
                    self.log.ensure(conn)
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
        dropped and made again), every entry after the manifest's position still in it (not
        trimmed past it), and that position reached (not a database restored from before it)."""
        position = _position_of(manifest)
        with read_only(self.engine) as conn:
            history = self.log.history(conn)
            holds = position is not None and self.log.holds(conn, position)
        if manifest.get("history") == history and holds:
            return True
        log.info("lex.manifest_of_another_history", position=manifest.get("position"),
                 same_history=manifest.get("history") == history, fix="rebuilding")
        return False

    # -- building ----------------------------------------------------------------------------
    def _build_all(self) -> None:
        t0 = time.perf_counter()
        for path in self.dir.glob("shard-*"):
            # A new generation's names never meet an old directory's, even one a wipe missed.
            self.generation = max(self.generation, _generation_of(path.name))
            wipe(path)
        since = self._start_reading()
        with read_only(self.engine) as conn:
            top = int(conn.execute(_TOP_SEQ).scalar_one())
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

    def _start_reading(self) -> Position:
        """The log position a build that reads the store from now on starts at, recorded as this
        reader's first."""
        return start_reading(self.log, self.engine, self.reader, "lex.log_trimmed_past_build_start")

    def _rebuild_all(self, reason: str) -> None:
        """Build every shard again (the log lost entries this index had not applied); the store's
        own leg answers searches meanwhile."""
        log.warning("lex.rebuilding", reason=reason)
        self.ready.clear()
        self.state = "opening"
        if not self._quiesce():
            raise InterruptedError("stopping")
        self.close()
        self._build_all()
        self.catch_up()
        self.save()
        self.ready.set()
        self.state = "ready"

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
                chunk = conn.execute(_ROW_SQL, {"lo": lo, "hi": hi, "status": INDEXED_STATUS,
                                                "n": BUILD_CHUNK}).all()
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
            since = self._start_reading()
            with self._lock:
                self.generation += 1
            fresh = self._build_shard(number)
            with self._lock:
                # What the log gained while it was built, for this shard alone.
                lo, hi = number * self.shard_rows, (number + 1) * self.shard_rows
                with read_only(self.engine) as conn:
                    seqs = self.log.seqs_since(conn, since, self.applied, lo, hi)
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
                    entries, position = self.log.read(conn, self.applied, page)
                    touched = self._apply_rows(conn, distinct_seqs(entries), self.shards, create=True)
                for number in touched:
                    self.shards[number].commit()
                for e in entries:
                    if e.erased:
                        number = e.seq // self.shard_rows
                        self.pending[number] = self.pending.get(number, 0) + 1
                self.applied = position
                done += len(entries)
                if len(entries) < page:
                    return done
        return done

    def _apply_rows(self, conn: Connection, seqs: Sequence[int], shards: dict[int, Shard],
                    create: bool = False) -> set[int]:
        """Make ``shards`` match the store for each memory in ``seqs`` (decided from the current
        row alone, so applying twice, or onto an older shard, gives the same result)."""
        touched: set[int] = set()
        current = _current_rows(conn, [s for s in seqs if create or s // self.shard_rows in shards])
        for seq in seqs:
            number = seq // self.shard_rows
            shard = shards.get(number)
            if shard is None:
                if not create:
                    continue
                make_dirs(self.dir)
                shard = shards[number] = Shard(number, self.dir / f"shard-{number}.{self.generation}")
            row = current.get(seq)
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
        the caller asks the store's own leg instead."""
        if not self.ready.is_set() or list(statuses) != [INDEXED_STATUS] or not keys:
            return None
        epoch = self._enter()
        try:
            return self._top(conn, words, keys=keys, kind=kind, fetch=fetch)
        finally:
            self._leave(epoch)

    def _top(self, conn: Connection, words: Sequence[str], *, keys: Sequence[str], kind: str | None,
             fetch: int) -> list[tuple[int, float]] | None:
        behind = self.log.behind(conn, self.applied, INLINE_CATCH_UP + 1)
        if behind > 0:
            if behind > INLINE_CATCH_UP or not self._lock.acquire(timeout=LOCK_WAIT_S):
                self._wake.set()
                return None
            try:
                self.catch_up(limit=INLINE_CATCH_UP)
                behind = self.log.behind(conn, self.applied, 1)
            except LogTrimmed:
                behind = 1  # the thread rebuilds; the store answers meanwhile
            finally:
                self._lock.release()
            self._wake.set()  # an erased text's shard is rebuilt on the thread, not here
            if behind > 0:
                return None
        tokens = self.queries.tokens(words)
        if not tokens:
            return None  # a word the shards cannot hold (too long, no letters): the store's
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
        """Write the manifest (the shards' directories, the log position they hold, the shards
        still to rebuild), then trim the log. A directory it no longer names is wiped by whoever
        replaced it, once no search reads it, or at the next start."""
        with self._lock:
            make_dirs(self.dir)
            with read_only(self.engine) as conn:
                history = self.log.history(conn)
            manifest = {"format": FORMAT, "history": history, "shard_rows": self.shard_rows,
                        "position": self.applied.to_json(), "reader": self.reader,
                        "generation": self.generation, "pending": sorted(self.pending),
                        "shards": {str(n): s.path.name for n, s in self.shards.items()}}
            write_json(self.dir / "manifest.json", manifest)
            self.saved = self.applied
            self._saved_at = time.monotonic()
            self.log.trim(self.engine, self.applied, self.reader)

    def _read_manifest(self) -> dict[str, Any] | None:
        manifest = read_manifest(self.dir / "manifest.json", "lex.manifest_unreadable")
        if manifest is None:
            return None
        if manifest.get("format") not in (2, FORMAT) or manifest.get("shard_rows") != self.shard_rows:
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
            self.applied = _position_of(manifest) or Position()
            self.reader = str(manifest.get("reader") or self.reader)
            self.generation = int(manifest.get("generation", 0))
            self.pending = {int(n): 1 for n in manifest.get("pending", [])}
        keep = {s.path.name for s in shards.values()}
        for path in self.dir.glob("shard-*"):
            if path.name not in keep:  # a build or rebuild a crash interrupted
                wipe(path)

    def behind(self) -> int:
        with read_only(self.engine) as conn:
            return self.log.behind(conn, self.applied, BEHIND_CAP)

    def docs(self) -> int:
        return sum(s.docs() for s in list(self.shards.values()))

    def status(self) -> dict[str, Any]:
        """What ``memoryd status`` shows of the lexical index (``behind``: log entries not
        applied yet; ``rebuilding``: shards an erasure marked; ``fallback``: what answers a
        search the shards cannot)."""
        behind = self.behind() if self.ready.is_set() else 0
        return {"state": self.state, "ready": self.ready.is_set(), "shards": len(self.shards),
                "docs": self.docs(), "behind": behind, "rebuilding": len(self.pending),
                "min_rows": self.min_rows, "shard_rows": self.shard_rows, "error": self.error,
                "fallback": "FTS5" if is_sqlite(self.engine) else "PostgreSQL's tsvector search"}


def drop_unread_log(engine: Engine) -> None:
    """Drop the change log and its triggers (the index is turned off), unless another daemon on a
    PostgreSQL store reads it. The caller wipes the index's files: changes and erasures after
    this are never logged for them."""
    changelog = log_for(engine)
    with engine.begin() as conn:
        if changelog.exists(conn) and not changelog.read_elsewhere(conn):
            changelog.drop(conn)


def _position_of(manifest: dict[str, Any]) -> Position | None:
    """The log position a manifest's shards hold (format 2 kept SQLite's last log id alone)."""
    try:
        if "position" in manifest:
            return Position.from_json(manifest["position"])
        return Position.from_json(int(manifest["log_id"]))
    except (KeyError, TypeError, ValueError):
        return None


def _current_rows(conn: Connection, seqs: Sequence[int]) -> dict[int, tuple[Any, ...]]:
    """The store's current content, scope key, kind and status of each memory in ``seqs`` (a
    statement per APPLY_CHUNK of them, not one per row: on PostgreSQL each is a round trip)."""
    cols = (memories.c.seq, memories.c.content, (memories.c.scope + ":" + memories.c.owner),
            memories.c.kind, memories.c.status)
    out: dict[int, tuple[Any, ...]] = {}
    for i in range(0, len(seqs), APPLY_CHUNK):
        chunk = list(seqs[i:i + APPLY_CHUNK])
        for r in conn.execute(select(*cols).where(memories.c.seq.in_(chunk))):
            out[int(r[0])] = (r[1], r[2], r[3], r[4])
    return out


@contextlib.contextmanager
def _suppress_trimmed() -> Iterator[None]:
    try:
        yield
    except LogTrimmed as exc:  # stopping: the next start rebuilds
        log.info("lex.log_trimmed", error=str(exc), fix="rebuilt at the next start")


def _generation_of(name: str) -> int:
    """The generation in a shard directory's name (``shard-N.G``), 0 if it has none."""
    _, _, gen = name.rpartition(".")
    return int(gen) if gen.isdigit() else 0


#: The LexSet that serves an engine's lexical searches (the daemon attaches its own at start).
_ATTACHED: Registry[LexSet] = Registry()
attach = _ATTACHED.attach
detach = _ATTACHED.detach
attached = _ATTACHED.attached
