"""The daemon's life: lock, store, runner, schedules, sockets, signals, shutdown."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import structlog
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import Engine

from memoryd import __version__, privatefs
from memoryd.clock import utcnow
from memoryd.config import Config
from memoryd.daemon import cluster, schedules, systemd
from memoryd.daemon import metrics as metrics_mod
from memoryd.daemon import status as status_mod
from memoryd.daemon.governor import IDLE, Governor, HostProbe, Thresholds
from memoryd.daemon.runner import PassRunner
from memoryd.datadir_lock import DataDirLock
from memoryd.editors.capture import replay as capture_replay
from memoryd.errors import MemorydError
from memoryd.models.embedder import Embedder, EmbedderAPI
from memoryd.models.worker_client import ModelWorker, WorkerEmbedder, WorkerLLM
from memoryd.passes.base import PassContext
from memoryd.passes.registry import build_passes, write_passes
from memoryd.queue import jobs as jobq
from memoryd.service.committer import GroupCommitter
from memoryd.service.handlers import Dispatcher
from memoryd.service.server import SocketServer
from memoryd.store import audit, migrate
from memoryd.store import memories as mem
from memoryd.store.annindex.index_set import AnnSet
from memoryd.store.backend import Stoppable
from memoryd.store.backends import backend_for
from memoryd.store.engine import is_sqlite, read_only
from memoryd.store.lexindex.index_set import LexSet, drop_unread_log
from memoryd.store.memories import WriteContext
from memoryd.store.opening import daemon_engine

log = structlog.get_logger(__name__)


def node_id(data_dir: Path) -> str:
    """This data directory's stable worker identity (the lease owner across restarts)."""
    path = data_dir / "node_id"
    if not path.exists():
        privatefs.write_private(path, f"node-{secrets.token_hex(6)}\n")
    return path.read_text().strip()


class DataDirUnsafe(MemorydError):
    """The data directory is open to other users and not memoryd's to make private."""


def make_data_dir_private(data_dir: Path, db_url: str) -> None:
    """Create the data directory 0700, or make the existing one private (docs/security.md).

    A data directory the user owns that others can read is tightened to 0700,
    and a SQLite store's files (database, WAL, shared memory) to 0600: an older
    memoryd, or a ``memoryd capture`` run before the daemon ever started, may
    have left them readable. One that is not the user's to tighten (another
    user's, or a shared directory such as /tmp) is refused with the fix.
    """
    try:
        verdict = privatefs.ensure_private_dir(data_dir, what="data directory", own=True)
    except privatefs.NotPrivate as exc:
        raise DataDirUnsafe(exc.message) from None
    if verdict.action == privatefs.TIGHTEN:
        log.warning("datadir.tightened", path=str(data_dir), mode=privatefs.mode_text(verdict.mode))
    if db_url.startswith("sqlite:///"):
        db = db_url.removeprefix("sqlite:///").split("?", 1)[0]
        for path in (db, f"{db}-wal", f"{db}-shm", f"{db}-journal"):
            old = privatefs.tighten_file(path)
            if old is not None:
                log.warning("store.file_tightened", path=path, mode=privatefs.mode_text(old))


def lower_priority(niceness: int) -> None:
    """Yield the CPU and the disk to the user: nice, and the idle IO class where it exists."""
    if niceness > 0:
        try:
            os.nice(niceness)
        except OSError as exc:  # pragma: no cover - e.g. a restricted container
            log.warning("daemon.nice_failed", error=str(exc))
    ioprio_idle = getattr(psutil, "IOPRIO_CLASS_IDLE", None)
    if ioprio_idle is not None:
        try:
            psutil.Process().ionice(ioprio_idle)
        except (OSError, psutil.Error) as exc:  # pragma: no cover
            log.warning("daemon.ionice_failed", error=str(exc))


class Daemon:
    """Everything ``memoryd run`` starts, in the order it starts it."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.data_dir = cfg.resolved_data_dir()
        self.started_at = time.time()
        self.lock = DataDirLock(self.data_dir)
        self.engine: Engine | None = None
        #: This data directory's worker identity (lease owner, cluster row), read when the store opens.
        self.node = ""
        self.runner: PassRunner | None = None
        self.ann: AnnSet | None = None
        self.lex: LexSet | None = None
        self.scheduler: BackgroundScheduler | None = None
        self.worker = ModelWorker(
            ["--embedder", cfg.embedder, "--llm", cfg.llm, "--data-dir", str(self.data_dir),
             "--idle-s", str(cfg.model_idle_s), "--batch-size", str(cfg.embed_encode_batch),
             "--llm-threads", str(cfg.model_threads), "--log-level", cfg.log_level],
            cfg.model_timeout_s,
        )
        self.embedder: EmbedderAPI = (
            WorkerEmbedder(self.worker, cfg.embedder) if cfg.model_worker
            else Embedder(cfg.embedder, batch_size=cfg.embed_encode_batch)
        )
        self.llm = WorkerLLM(self.worker, cfg.llm)
        self.passes = build_passes()
        self._stop: asyncio.Event | None = None
        self.committer: GroupCommitter | None = None
        #: (units committed, when) at the last heartbeat: its write figures cover what came after.
        self._announced = (0, time.time())
        self.governor: Governor | None = None
        self.servers: list[SocketServer] = []
        self.listener: Stoppable | None = None
        self.metrics = metrics_mod.MetricsSeries(cfg.metrics_interval_s)

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT; return the process exit code."""
        # The entry point set it already; a daemon started another way (embedded, a test)
        # must not leave SQLite to create the database under a looser umask either.
        privatefs.private_umask()
        return asyncio.run(self._main())

    async def _main(self) -> int:
        make_data_dir_private(self.data_dir, self.cfg.resolved_db_url())
        self.lock.acquire()
        lower_priority(self.cfg.nice)
        try:
            return await self._serve()
        finally:
            self.lock.release()

    def _open_store(self) -> Engine:
        engine = daemon_engine(self.cfg)  # SQLite's busy timeout, PostgreSQL's lock and statement timeouts
        revision = migrate.upgrade(engine)
        from memoryd.models.embedder import model_dimension, spec_name
        from memoryd.store import vectors

        # An embedder whose dimension differs from the stored vectors' is refused (the way out is
        # `memoryd reembed`); then the free pages an index rebuild left go back to the disk.
        vectors.check_dimension(engine, model_dimension(self.cfg.embedder), spec_name(self.cfg.embedder),
                                self.cfg.embedder)
        vectors.reclaim_space(engine)
        self._open_vector_index(engine)
        self._open_lexical_index(engine)
        self.node = owner = node_id(self.data_dir)
        audit.set_writer(engine, owner)  # the audit lanes this daemon opens name it
        with engine.begin() as conn:
            released = jobq.release_owner(conn, owner, now=time.time())
        log.info("store.opened", url=status_mod.db_info(engine)["url"], revision=revision,
                 released_leases=released)
        return engine

    def _open_vector_index(self, engine: Engine) -> None:
        """The HNSW graphs beside the store (store/annindex/index_set.py), opened or built on a
        thread of their own; vector searches use the store's own search until they are ready
        (SQLite's exact scan, pgvector's index). With ``vector_index`` off, the change log is
        dropped (nothing would read it) unless other daemons on a PostgreSQL store read it, and
        the graphs' files are removed (erasures are no longer logged for them)."""
        from memoryd.store.annindex import index_set as ann_set

        directory = self.data_dir / "index" / "vectors"
        if not self.cfg.vector_index:
            ann_set.drop_unread_log(engine)
            shutil.rmtree(directory, ignore_errors=True)
            return
        self.ann = ann_set.AnnSet(engine, directory,
                                  min_rows=self.cfg.vector_index_min_rows, ef=self.cfg.vector_index_ef,
                                  part_rows=self.cfg.vector_index_part_rows,
                                  split_ef=self.cfg.vector_index_split_ef,
                                  flat_rows=self.cfg.vector_index_flat_rows)
        self.ann.start()
        ann_set.attach(engine, self.ann)

    def _open_lexical_index(self, engine: Engine) -> None:
        """The tantivy shards beside a large store (store/lexindex/), opened or built on a thread
        of their own; lexical searches use the store's full-text search until they are ready.
        With ``lexical_index`` off, the change log is dropped (nothing would read it), unless
        other daemons on a PostgreSQL store read it."""
        from memoryd.store.lexindex import index_set
        from memoryd.store.lexindex.logs import log_for
        from memoryd.store.lexindex.shard import wipe

        directory = self.data_dir / "index" / "lexical"
        if not self.cfg.lexical_index:
            # Nothing logs changes or erasures from now on: the files go with the log.
            drop_unread_log(engine)
            wipe(directory)
            return
        self.lex = index_set.LexSet(engine, directory, changelog=log_for(engine),
                                    min_rows=self.cfg.lexical_index_min_rows,
                                    shard_rows=self.cfg.lexical_index_shard_rows)
        self.lex.start()
        index_set.attach(engine, self.lex)

    async def _serve(self) -> int:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)

        self.engine = engine = await loop.run_in_executor(None, self._open_store)
        await loop.run_in_executor(None, self._announce)
        ctx = PassContext(engine=engine, config=self.cfg, embedder=self.embedder, now=time.time,
                          llm=self.llm)
        self.governor = Governor(HostProbe(), Thresholds.from_config(self.cfg))
        self.runner = runner = PassRunner(self.passes, ctx, owner=self.node,
                                          governor=self.governor)
        runner.start()
        # PostgreSQL: another daemon's enqueue wakes this runner (LISTEN/NOTIFY).
        self.listener = backend_for(engine).job_listener(engine, runner.wakeup)

        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.scheduler.add_job(runner.wakeup, "interval", seconds=self.cfg.tick_interval_s,
                               id="runner.tick", coalesce=True, max_instances=1)
        self.scheduler.add_job(self._sample_governor, "interval",
                               seconds=self.cfg.governor_interval_s, id="governor.sample",
                               coalesce=True, max_instances=1)
        # Time-driven passes: a generous misfire grace and coalescing mean a
        # machine that slept runs the check once on wake; enqueue_due decides
        # from stored times, so each due pass then runs exactly once.
        self.scheduler.add_job(self._enqueue_time_driven, "interval", seconds=self.cfg.tick_interval_s,
                               id="schedules.tick", coalesce=True, max_instances=1,
                               misfire_grace_time=7 * 86400, next_run_time=datetime.now(UTC))
        if not is_sqlite(engine):  # a shared store: the other daemons' status shows this one alive
            self.scheduler.add_job(self._announce, "interval", seconds=cluster.HEARTBEAT_S,
                                   id="cluster.heartbeat", coalesce=True, max_instances=1)
        self.scheduler.add_job(self._prune, "interval", seconds=self.cfg.prune_interval_s,
                               id="queue.prune", coalesce=True, max_instances=1,
                               misfire_grace_time=3600)
        self.scheduler.start()

        write_ctx = WriteContext(actor="", passes=write_passes(self.passes),
                                 max_attempts=self.cfg.job_max_attempts,
                                 idempotency_ttl_s=self.cfg.idempotency_ttl_s)
        self.committer = GroupCommitter(
            engine, write_ctx, max_queue=self.cfg.write_queue_max, max_batch=self.cfg.write_batch_max,
            clock=utcnow, on_commit=runner.wakeup, access_flush_s=self.cfg.access_flush_s,
            writers=self.cfg.pg_writers,  # PostgreSQL only: SQLite has one writer
        )
        self.committer.start()
        # Turns hooks spooled while the daemon was down, written before anyone can ask for them;
        # then every tick, for turns spooled while it was up but slower than a hook's budget.
        await loop.run_in_executor(None, capture_replay.replay, engine, self.cfg, write_ctx)
        self.scheduler.add_job(capture_replay.replay, "interval", args=(engine, self.cfg, write_ctx),
                               seconds=self.cfg.tick_interval_s, id="capture.spool", coalesce=True,
                               max_instances=1)
        dispatcher = Dispatcher(self.cfg, engine, self.committer, self.status,
                                embedder=self.embedder, metrics=self.metrics.result)
        self._start_metrics(dispatcher)
        agent_path = self.cfg.resolved_socket()
        admin_path = self.cfg.admin_socket()
        inherited = systemd.inherited_sockets()
        self.servers = [
            SocketServer(agent_path, dispatcher, self.cfg, admin=False,
                         inherited=inherited.get(str(agent_path))),
            SocketServer(admin_path, dispatcher, self.cfg, admin=True,
                         inherited=inherited.get(str(admin_path))),
        ]
        try:
            for server in self.servers:
                await server.start()
            log.info("daemon.ready", version=__version__, socket=str(agent_path),
                     data_dir=str(self.data_dir), embedder=self.cfg.embedder)
            runner.wakeup()  # drain whatever the last run left queued
            systemd.notify("READY=1\nSTATUS=serving")
            self._start_watchdog(loop)
            await self._stop.wait()
            log.info("daemon.stopping")
            systemd.notify("STOPPING=1")
        finally:
            await self._shutdown(dispatcher)
        log.info("daemon.stopped")
        return 0

    async def _shutdown(self, dispatcher: Dispatcher) -> None:
        for server in self.servers:
            server.stop_listening()
        if self.committer is not None:
            await self.committer.drain()
        for server in self.servers:
            await server.close()
        loop = asyncio.get_running_loop()
        if self.listener is not None:
            await loop.run_in_executor(None, self.listener.stop)
        if self.runner is not None:
            await loop.run_in_executor(None, self.runner.stop, self.cfg.shutdown_grace_s)
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        dispatcher.close()
        self.embedder.release()
        if self.ann is not None:  # saves the graphs: the next start loads them instead of building
            await loop.run_in_executor(None, self.ann.stop)
        if self.lex is not None:  # applies the log and writes the manifest
            await loop.run_in_executor(None, self.lex.stop)
        if self.engine is not None:
            try:
                await loop.run_in_executor(None, self._announce, "stopped")
            except Exception as exc:  # a store gone away must not stop the shutdown
                log.warning("cluster.leave_failed", error=str(exc))
            self.engine.dispose()

    def _start_metrics(self, dispatcher: Dispatcher) -> None:
        """Feed metrics.series a reading now (the baseline) and every ``metrics_interval_s``."""
        assert self.engine is not None and self.scheduler is not None
        assert self.runner is not None and self.committer is not None
        engine, runner, committer = self.engine, self.runner, self.committer

        def queues() -> dict[str, dict[str, Any]]:
            with read_only(engine) as conn:
                return jobq.stats(conn, now=time.time())

        def passes() -> dict[str, dict[str, Any]]:
            return {name: st.as_dict() for name, st in runner.stats.items()}

        sampler = metrics_mod.Sampler(self.metrics, clock=time.time, queues=queues, passes=passes,
                                      writes=lambda: committer.units,
                                      searches=lambda: dispatcher.searches)

        def sample() -> None:
            try:
                sampler.sample()
            except Exception as exc:  # a locked store skips a point; the chart shows the gap
                log.warning("metrics.sample_failed", error=repr(exc))

        sample()
        self.scheduler.add_job(sample, "interval", seconds=self.cfg.metrics_interval_s,
                               id="metrics.sample", coalesce=True, max_instances=1)

    def _start_watchdog(self, loop: asyncio.AbstractEventLoop) -> None:
        """Ping systemd's watchdog from the event loop, so a hung loop gets restarted."""
        interval = systemd.watchdog_interval_s()
        if interval is None:
            return

        def ping() -> None:
            systemd.notify("WATCHDOG=1")
            loop.call_later(interval, ping)

        ping()

    def _sample_governor(self) -> None:
        assert self.governor is not None
        before = self.governor.current.state
        after = self.governor.sample()
        if after.state != before:
            log.info("governor.changed", from_state=before, to_state=after.state, reason=after.reason)
            if after.state == IDLE and self.runner is not None:
                self.runner.wakeup()

    def _enqueue_time_driven(self) -> None:
        assert self.engine is not None and self.runner is not None
        intervals = {p.name: float(getattr(self.cfg, p.schedule_key))
                     for p in self.passes.values() if p.schedule_key and p.implemented}
        with self.engine.begin() as conn:
            due = schedules.enqueue_due(conn, intervals, now=time.time(),
                                        max_attempts=self.cfg.job_max_attempts)
        if due:
            log.info("schedules.enqueued", passes=due)
            self.runner.wakeup()

    def _announce(self, state: str = "running") -> None:
        assert self.engine is not None
        with self.engine.connect() as conn:
            if state == "stopped" and is_sqlite(self.engine):
                # At shutdown a store locked by another process may not hold the exit up
                # (set on the driver's connection before BEGIN, which waits for the lock).
                raw: Any = conn.connection.dbapi_connection
                raw.execute("PRAGMA busy_timeout = 1000")
            now = time.time()
            writes = None
            if self.committer is not None:  # the write figures since the last heartbeat
                units, since = self._announced
                writes = self.committer.write_figures(units, since, now)
                self._announced = (self.committer.units, now)
            with conn.begin():
                cluster.announce(conn, self.node, started_at=self.started_at,
                                 now=now, state=state, writes=writes)

    def _prune(self) -> None:
        assert self.engine is not None
        now = time.time()
        with self.engine.begin() as conn:
            jobs_pruned = jobq.prune_done(conn, older_than=now - self.cfg.done_retention_s)
            keys_pruned = mem.prune_idempotency(conn, now)
            cluster.forget_stale(conn, now)
        log.info("queue.pruned", jobs=jobs_pruned, idempotency_keys=keys_pruned)

    def status(self) -> dict[str, Any]:
        """The daemon.status result (runs on a reader thread)."""
        assert self.engine is not None and self.runner is not None and self.committer is not None
        assert self.governor is not None
        models = {
            "embedder": self.embedder.status(),
            "llm": self.llm.status(),
        }
        extra = {
            "sockets": {"agent": str(self.cfg.resolved_socket()),
                        "admin": str(self.cfg.admin_socket())},
            "admin_socket": str(self.cfg.admin_socket()),
            "data_dir": str(self.data_dir),
            "write_queue": {"depth": self.committer.depth, "max": self.cfg.write_queue_max,
                            "batches": self.committer.batches, "writes": self.committer.units,
                            "writer": "stopped" if self.committer.broken else "running"},
        }
        if self.ann is not None:
            extra["vector_index"] = self.ann.status()
        if self.lex is not None:
            extra["lexical_index"] = self.lex.status()
        with read_only(self.engine) as conn:
            extra["cluster"] = {"shared": not is_sqlite(self.engine),
                                "daemons": cluster.members(conn, time.time(), self.runner.owner)}
        extra["runner"] = {"last_plan_state": self.runner.last_plan[0],
                           "last_plan": [{"pass": n, "batch": b} for n, b in self.runner.last_plan[1]]}
        problems = [] if self.committer.broken is None else [
            f"the writer thread stopped ({self.committer.broken}): writes fail with 1003; restart memoryd"]
        if self.committer.store_error is not None:
            problems.append(f"the last write transaction failed: {self.committer.store_error}")
        return status_mod.snapshot(self.engine, self.started_at, list(self.passes),
                                   self.runner.status(), models, self.governor.current.as_dict(), extra,
                                   problems)
