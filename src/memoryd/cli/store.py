"""``memoryd store``: operator commands on a store itself, with no daemon (``store copy``,
``store reindex``).

A thin click shell over store/copy/copier.py: it prints progress on stderr, the
verification on stdout (or one JSON object with ``--json``), and exits 0 when
the copy verified, 2 when it was refused, failed or did not verify, and 130
when interrupted (Ctrl-C or SIGTERM: it stops after the batch in flight; run it
again to resume).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, NoReturn

import click

from memoryd.errors import MemorydError

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
#: At most one progress line per table this often (plus each table's last batch).
PROGRESS_INTERVAL_S = 1.0
#: Test hook: SIGKILL this process after this many committed batches (tests/store_copy).
KILL_AFTER_ENV = "MEMORYD_TEST_STORE_COPY_KILL_AFTER_BATCHES"


def _fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


class _ProgressPrinter:
    """Prints ``table rows/total (rate rows/s)`` on stderr, throttled per table."""

    def __init__(self) -> None:
        self._table: str | None = None
        self._last_print = 0.0
        self.batches = 0
        self._kill_after = int(os.environ.get(KILL_AFTER_ENV, "0") or 0)

    def __call__(self, table: str, done: int, total: int, rate: float) -> None:
        now = time.monotonic()
        if table != self._table:
            self._table, self._last_print = table, 0.0
        self.batches += 1
        if done >= total or now - self._last_print >= PROGRESS_INTERVAL_S:
            click.echo(f"{table}: {done}/{total} rows ({rate:,.0f} rows/s)", err=True)
            self._last_print = now
        if self._kill_after and self.batches >= self._kill_after:
            os.kill(os.getpid(), signal.SIGKILL)


class _StopFlag:
    """Ctrl-C (SIGINT) and SIGTERM only set a flag, which the copy reads between batches: a
    signal that raised inside a driver call left the connection mid-statement, and its cleanup
    failed with an unrelated error (exit 2, "fix the cause"). A second Ctrl-C stops at once."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def is_set(self) -> bool:
        return self._event.is_set()

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self._event.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self._event.set()
        click.echo("stopping after the current batch (Ctrl-C again to stop at once)", err=True)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


@click.group("store")
def store() -> None:
    """Operator commands on a store (run with no daemon on it)."""


@store.command("copy")
@click.option("--from", "source_url", required=True, metavar="URL",
              help="The store to copy: sqlite:////PATH/memoryd.db or postgresql://...")
@click.option("--to", "target_url", required=True, metavar="URL",
              help="The store to fill: an empty database, or an interrupted copy of the same source.")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=1000, show_default=True,
              help="Rows per committed batch.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary on stdout.")
def copy_cmd(source_url: str, target_url: str, batch_size: int, as_json: bool) -> None:
    """Copy every memory, vector, link, citation, proposal, tombstone, idempotency key,
    entity, audit event and job from one store to another, ids kept, then verify the
    copy (rows per table on both sides, and the audit chain on the target).

    The target is migrated first; it must be empty, or an interrupted copy of the
    same, unchanged source, which resumes after its last committed batch (Ctrl-C or
    kill it at any time and run the same command again). Stop the daemon on the
    source first: the copy refuses a SQLite store whose daemon runs, and reads the
    source in one snapshot. Start daemons on the target once the copy verified.

    \b
    Example:
      systemctl --user stop memoryd.socket memoryd.service
      memoryd store copy --from sqlite:///$HOME/.local/share/memoryd/memoryd.db \\
                         --to postgresql://memoryd@db.internal/memoryd
      memoryd run --db-url postgresql://memoryd@db.internal/memoryd
    """
    from memoryd.log import configure_logging
    from memoryd.store.copy.copier import CopyInterrupted, copy_store

    # stdout carries the summary; the log (warnings and worse) goes to stderr with the progress.
    configure_logging("warning", "console")
    printer = _ProgressPrinter()
    stop = _StopFlag()
    interrupted = ("interrupted; every batch committed so far is kept, and the target is marked "
                   "unfinished (no daemon starts on it): run the same command again to resume")
    try:
        with stop.installed():
            report = copy_store(source_url, target_url, batch_size=batch_size, progress=printer,
                                should_stop=stop.is_set)
    except (KeyboardInterrupt, CopyInterrupted):
        _fail(interrupted, EXIT_INTERRUPTED)
    except MemorydError as exc:
        _fail(exc.message)
    except Exception as exc:  # a lost connection, a full disk: the copy resumes when rerun
        if stop.is_set():  # a second Ctrl-C tore a driver call apart: still an interruption
            _fail(interrupted, EXIT_INTERRUPTED)
        _fail(f"the copy stopped: {type(exc).__name__}: {exc}; fix the cause and run the same "
              "command again to resume (batches committed so far are kept)")
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        state = ("already complete; verified again" if report.already_complete
                 else "resumed an interrupted copy" if report.resumed else "copied")
        click.echo(f"{report.source} -> {report.target}: {state} in {report.seconds:.1f} s")
        for name, t in report.tables.items():
            mark = "ok" if t.source == t.target else "MISMATCH"
            click.echo(f"  {name:<18} source {t.source:>9}  target {t.target:>9}  {mark}")
        chain = ("verifies" if report.audit_break is None
                 else f"BREAKS at event seq {report.audit_break}")
        click.echo(f"  audit chain: {report.audit_events} events, {chain} on the target")
    if not report.verified:
        _fail("the copy did not verify (see above); do not start daemons on the target. Run the "
              "copy again into a new empty database, and report the mismatch")


@store.command("reindex")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Data directory (env MEMORYD_DATA_DIR).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Config file (env MEMORYD_CONFIG).")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary on stdout.")
def reindex_cmd(data_dir: str | None, config_path: str | None, as_json: bool) -> None:
    """Rebuild the search indexes from the store alone (this data directory's daemon must be stopped).

    The HNSW graphs (``<data dir>/index/vectors/``) are a cache of the store's
    vectors: this drops them and builds them for every owner with at least
    ``vector_index_min_rows`` vectors (split into graphs of
    ``vector_index_part_rows``), as the daemon does at start when they are
    missing. An owner with ``vector_index_flat_rows`` vectors or more is
    scanned flat instead and has no file: the daemon reads its vectors at
    each start. The lexical index (``<data dir>/index/lexical/``) is dropped and
    built again when the store holds ``lexical_index_min_rows`` active
    memories. Use it when ``memoryd status`` shows an index failing, after
    restoring the database from a backup, or to split a graph saved before
    graphs were split.

    On PostgreSQL, the HNSW index in the database is also built again with
    the current parameters (``REINDEX ... CONCURRENTLY``: other daemons on the
    database keep searching and writing meanwhile); this daemon's graphs and
    lexical index are dropped and built again as on SQLite (each daemon keeps
    its own).
    Use it once after an upgrade that changed the HNSW parameters on a store
    of more than 50,000 vectors.

    \b
    Example:
      systemctl --user stop memoryd.socket memoryd.service   # or end `memoryd run`
      memoryd store reindex
    """
    from memoryd.config import load_config
    from memoryd.datadir_lock import DataDirLock
    from memoryd.log import configure_logging
    from memoryd.store import migrate
    from memoryd.store.engine import create_store_engine, is_sqlite

    configure_logging("warning" if as_json else "info")  # on stderr: stdout is the summary
    try:
        cfg = load_config(config_path, data_dir=data_dir)
    except MemorydError as exc:
        _fail(exc.message)
    lock = DataDirLock(cfg.resolved_data_dir())
    try:
        lock.acquire()
    except MemorydError as exc:
        _fail(f"{exc.message}. Stop the daemon (`systemctl --user stop memoryd.socket "
              "memoryd.service` for the service, or end `memoryd run`) and run reindex again")
    try:
        engine = create_store_engine(cfg.resolved_db_url(), cfg.busy_timeout_ms)
        try:
            migrate.upgrade(engine)
            if not is_sqlite(engine):
                _reindex_postgres(cfg, engine, as_json)
                return
            summary = _reindex_graphs(cfg, engine, as_json)
            summary["lexical"] = lexical = _reindex_lexical(cfg, engine, as_json)
        finally:
            engine.dispose()
    finally:
        lock.release()
    if as_json:
        click.echo(json.dumps(summary))
        return
    _echo_graphs(summary)
    _echo_lexical(lexical)


def _reindex_graphs(cfg: Any, engine: Any, as_json: bool) -> dict[str, Any]:
    """Drop this data directory's HNSW graphs and build them again (with ``vector_index`` off:
    drop them, and the change log nobody else reads)."""
    from memoryd.store.annindex.index_set import AnnSet, drop_unread_log

    directory = cfg.resolved_data_dir() / "index" / "vectors"
    shutil.rmtree(directory, ignore_errors=True)
    out: dict[str, Any] = {"graphs": 0, "parts": 0, "vectors_in_graphs": 0, "flat_owners": 0,
                           "vectors_scanned_flat": 0, "directory": str(directory)}
    if not cfg.vector_index:
        drop_unread_log(engine)
        return {**out, "vectors": None, "seconds": 0.0,
                "reason": "vector_index is off (the store's own vector search answers every search)"}
    if not as_json:
        click.echo(f"building the graphs of owners with {cfg.vector_index_min_rows}+ vectors...", err=True)
    t0 = time.perf_counter()
    ann = AnnSet(engine, directory, min_rows=cfg.vector_index_min_rows, ef=cfg.vector_index_ef,
                 part_rows=cfg.vector_index_part_rows, split_ef=cfg.vector_index_split_ef,
                 flat_rows=cfg.vector_index_flat_rows)
    ann.ensure_log()
    ann.open()
    return {**out, **ann.sizes(), "vectors": ann.counts.total(),
            "seconds": round(time.perf_counter() - t0, 1)}


def _echo_graphs(summary: dict[str, Any]) -> None:
    if "reason" in summary:
        click.echo(f"HNSW graphs: not built: {summary['reason']}")
        return
    flat = (f"; {summary['vectors_scanned_flat']} vectors of {summary['flat_owners']} owner(s) are "
            "scanned flat (kept in memory, not in files)") if summary.get("flat_owners") else ""
    click.echo(f"built {summary['parts']} graph(s) for {summary['graphs']} owner(s), holding "
               f"{summary['vectors_in_graphs']} of {summary['vectors']} vectors in {summary['seconds']} s "
               f"({summary['directory']}){flat}")


def _echo_lexical(lexical: dict[str, Any]) -> None:
    if lexical["built"]:
        click.echo(f"built the lexical index: {lexical['shards']} shard(s) holding {lexical['docs']} "
                   f"memories in {lexical['seconds']} s ({lexical['directory']})")
    else:
        click.echo(f"no lexical index: {lexical['reason']}")


def _reindex_postgres(cfg: Any, engine: Any, as_json: bool) -> None:
    """REINDEX the HNSW index of a PostgreSQL store, rebuild this daemon's HNSW graphs and lexical
    index beside it, and print what was done."""
    from memoryd.store.backends import backend_for
    from memoryd.store.postgres.vectors import HNSW_INDEX
    from memoryd.store.vectors import stored_count

    with engine.connect() as conn:
        vectors = stored_count(conn)
    if not as_json:
        click.echo(f"building the HNSW index of {vectors} vectors again (searches and writes go on)...",
                   err=True)
    t0 = time.perf_counter()
    backend_for(engine).reindex_vectors(engine)
    summary: dict[str, Any] = {"backend": "postgresql", "index": HNSW_INDEX, "vectors": vectors,
                               "seconds": round(time.perf_counter() - t0, 1)}
    summary["graphs"] = graphs = _reindex_graphs(cfg, engine, as_json)
    summary["lexical"] = lexical = _reindex_lexical(cfg, engine, as_json)
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(f"built the HNSW index ({summary['index']}) of {vectors} vectors in {summary['seconds']} s")
    _echo_graphs(graphs)
    _echo_lexical(lexical)


def _reindex_lexical(cfg: Any, engine: Any, as_json: bool) -> dict[str, Any]:
    """Drop the tantivy shards and build them again when the store is large enough for them."""
    from memoryd.store.lexindex.index_set import LexSet, drop_unread_log
    from memoryd.store.lexindex.shard import wipe

    directory = cfg.resolved_data_dir() / "index" / "lexical"
    wipe(directory)  # zeros first: a shard an erasure marked still holds the erased words
    out: dict[str, Any] = {"built": False, "directory": str(directory)}
    if not cfg.lexical_index:
        drop_unread_log(engine)
        return {**out, "reason": "lexical_index is off (the store's full-text search answers every search)"}
    if not as_json:
        click.echo(f"building the lexical index if {cfg.lexical_index_min_rows}+ memories are active...",
                   err=True)
    t0 = time.perf_counter()
    lex = LexSet(engine, directory, min_rows=cfg.lexical_index_min_rows,
                 shard_rows=cfg.lexical_index_shard_rows)
    try:
        if not lex.open():
            return {**out, "reason": f"fewer than {cfg.lexical_index_min_rows} active memories "
                                     "(the store's full-text search answers every search)"}
        return {**out, "built": True, "shards": len(lex.shards), "docs": lex.docs(),
                "seconds": round(time.perf_counter() - t0, 1)}
    finally:
        lex.close()
