"""The refusals of ``memoryd store copy``, answered before a row moves.

* the source must exist and be at this memoryd's schema revision (the copy
  never migrates the source: it only reads it);
* no daemon may run on a SQLite store being copied from or to: the copy takes
  the data directory's lock (``memoryd.lock`` beside the file) as the daemon
  does, and holds it to the end;
* one copy at a time into a PostgreSQL target (a session advisory lock);
* the target must be empty, or an interrupted copy of this same source, unchanged
  since (its fingerprint: row counts and the audit chain's head);
* the vector dimension must fit: an empty target adopts the source's, a target
  that holds vectors of another dimension is refused.

And the refusal of a daemon on a target the copy has not finished and verified
(:func:`refuse_unfinished_copy`, called as the daemon opens its store): an
interrupted copy (Ctrl-C, kill, a lost connection) leaves the marker's
``done`` false, so the half-filled target is never served as if it were whole.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, func, inspect, select
from sqlalchemy.engine import make_url

from memoryd.datadir_lock import DataDirLock
from memoryd.errors import ConfigError, MemorydError
from memoryd.masking import mask_url
from memoryd.store import vectors
from memoryd.store.audit import GENESIS, last_hash
from memoryd.store.backends import backend_for
from memoryd.store.copy.tables import CONTENT_TABLES, MARKER_KEY, TABLES
from memoryd.store.schema import jobs, meta

#: pg_try_advisory_lock key of a copy into a PostgreSQL database ("memo" namespace, see
#: store/postgres/backend.py).
COPY_LOCK = 0x6D656D6F_0004


class CopyRefused(MemorydError):
    """The copy cannot start (or go on); the message says why and what to do."""

    code = 1007


def shown(url: str) -> str:
    """``url`` with its password (or a ``?password=``) hidden, for messages and the summary."""
    return mask_url(url)


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None for another backend or an in-memory store)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def check_source_exists(url: str) -> None:
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        raise CopyRefused(f"there is no SQLite store at {path}; check --from (a daemon's store is "
                          "memoryd.db in its data directory, e.g. ~/.local/share/memoryd/memoryd.db)")


@contextlib.contextmanager
def data_dir_locks(source_url: str, target_url: str) -> Iterator[None]:
    """Hold the data-directory lock of each SQLite side: no daemon runs on them meanwhile.

    The source's lock is taken only where a daemon has left its lock file (a copy
    never creates files beside a store it only reads); the target's always.
    """
    with contextlib.ExitStack() as stack:
        for url, role in ((source_url, "source"), (target_url, "target")):
            path = sqlite_path(url)
            if path is None:
                continue
            lock = DataDirLock(path.parent)
            if role == "source" and not lock.path.exists():
                continue
            try:
                lock.acquire()
            except MemorydError as exc:
                raise CopyRefused(
                    f"the {role} store {path} is in use: {exc.message}. Stop that daemon "
                    "(`systemctl --user stop memoryd.socket memoryd.service` for the service, or end "
                    "`memoryd run`) and run the copy again") from None
            stack.callback(lock.release)
        yield


@contextlib.contextmanager
def target_copy_lock(engine: Engine) -> Iterator[None]:
    """One copy at a time into a PostgreSQL database (nothing to do for SQLite: the data
    directory's lock serves)."""
    if backend_for(engine).name != "postgresql":
        yield
        return
    with engine.connect() as conn:
        got = conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({COPY_LOCK})").scalar()
        conn.commit()
        if not got:
            raise CopyRefused("another `memoryd store copy` is writing to this target database; "
                              "wait for it to end (or end it), then run this copy again to resume")
        try:
            yield
        finally:
            conn.exec_driver_sql(f"SELECT pg_advisory_unlock({COPY_LOCK})")
            conn.commit()


def count_rows(conn: Connection) -> dict[str, int]:
    """Rows per copied table (the copy's own marker left out)."""
    return {t.name: int(conn.execute(select(func.count()).select_from(t.table)
                                     .where(t.rows_filter())).scalar_one()) for t in TABLES}


def fingerprint(conn: Connection, counts: dict[str, int]) -> dict[str, Any]:
    """What identifies the source's contents: an interrupted copy resumes only from an
    unchanged source (every mutation appends an audit event; embeds add vectors and
    finish jobs, which the counts and the job states show)."""
    head = last_hash(conn)
    open_jobs = int(conn.execute(select(func.count()).select_from(jobs)
                                 .where(jobs.c.state.in_(("ready", "leased")))).scalar_one())
    return {"counts": counts, "audit_head": head if head != GENESIS else None, "open_jobs": open_jobs}


def check_target(conn: Connection, marker: dict[str, Any] | None, source_id: str,
                 source_print: dict[str, Any], target_url: str) -> None:
    """Refuse a target that holds another store, or an interrupted copy of another source
    or of this one since changed."""
    if marker is None:
        held = {t.name: n for t in CONTENT_TABLES
                if (n := int(conn.execute(select(func.count()).select_from(t.table)
                                          .where(t.rows_filter())).scalar_one()))}
        if held:
            what = ", ".join(f"{n} in {name}" for name, n in held.items())
            raise CopyRefused(
                f"the target {shown(target_url)} already holds a store ({what} rows) and is not an "
                "interrupted copy; copy into a new empty database (e.g. `createdb memoryd_new`), "
                "or drop and recreate this one if its contents are not needed")
        return
    if marker["source"] != source_id:
        raise CopyRefused(
            f"the target {shown(target_url)} holds a copy of another store ({marker['source']}); "
            "copy into a new empty database, or pass that store as --from to resume its copy")
    if marker["fingerprint"] != source_print:
        raise CopyRefused(
            f"the source changed since this copy into {shown(target_url)} began (rows or audit "
            "events were added or removed), so resuming would mix two states of it; drop and "
            "recreate the target database and run the copy again with no daemon on the source")


def check_dimension(conn: Connection, source_dim: int | None) -> bool:
    """True when the target's vector index must be rebuilt at ``source_dim`` (it holds no
    vectors); refuse a target that holds vectors of another dimension."""
    target_dim = vectors.index_dim(conn)
    if source_dim is None or target_dim == source_dim:
        return False
    stored = vectors.stored_count(conn)
    if stored:
        raise CopyRefused(
            f"the source's vectors have {source_dim} dimensions, the target's index holds "
            f"{stored} vectors of {target_dim}; copy into a new empty database")
    return True


class CopyUnfinished(ConfigError):
    """The store is a ``memoryd store copy`` target that was interrupted or did not verify."""


def refuse_unfinished_copy(engine: Engine) -> None:
    """Refuse to serve a store whose copy was interrupted or did not verify.

    :raises CopyUnfinished: with the command that completes it (the copy resumes).
    """
    with engine.connect() as conn:
        if not inspect(conn).has_table(meta.name):
            return  # a new store: nothing was ever copied into it
        value = conn.execute(select(meta.c.value).where(meta.c.key == MARKER_KEY)).scalar()
    if value is None:
        return
    marker = json.loads(value)
    # "verified" is absent from the markers of copies made before it was recorded: done was all.
    if marker.get("done") and marker.get("verified", True):
        return
    what = "did not verify" if marker.get("done") else "was interrupted before it finished"
    raise CopyUnfinished(
        f"this store is a `memoryd store copy` of {marker.get('source')} that {what}; its rows are "
        "incomplete, so memoryd will not serve it. Run the same `memoryd store copy --from SOURCE "
        "--to THIS_STORE` again (it resumes after the last committed batch and verifies), then start "
        "memoryd")
