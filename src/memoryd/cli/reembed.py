"""``memoryd reembed``: switch the store to another embedder.

An operator action, run with the daemon stopped (it takes the data
directory's lock, as the daemon does): it checks that the new embedder loads
and encodes, drops every stored vector (overwritten, not just unlinked),
rebuilds the vector index at the embedder's dimension, records it, and queues
every memory that holds text for the embed pass. The daemon, started with the
same embedder, then embeds them; until a memory is embedded again, searches
find it by the lexical leg only (with a notice).

Why not over the operator socket: the daemon would have to drop its index
while its passes and searches use it, and the embedder it runs is fixed at
start; the new one must be in its config anyway.
"""

from __future__ import annotations

import sys
import time
from typing import NoReturn

import click

from memoryd.errors import MemorydError

EXIT_ERROR = 2


def _fail(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _probe(spec: str) -> int:
    """Load the embedder and encode one sentence: the dimension it really makes."""
    from memoryd.models.embedder import LocalEmbedder

    embedder = LocalEmbedder(spec, batch_size=1)
    try:
        return int(embedder.encode(["memoryd reembed: dimension probe"]).shape[1])
    finally:
        embedder.release()


@click.command("reembed")
@click.option("--embedder", default=None,
              help="bundled | PATH of a sentence-transformers model (default: the configured one).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Data directory (env MEMORYD_DATA_DIR).")
@click.option("--db-url", default=None, help="Store URL (env MEMORYD_DB_URL).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Config file (env MEMORYD_CONFIG).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reembed(embedder: str | None, data_dir: str | None, db_url: str | None, config_path: str | None,
            yes: bool) -> None:
    """Re-embed every memory with another embedder (the daemon must be stopped).

    Drops the stored vectors, rebuilds the vector index at the new embedder's
    dimension and queues every memory for the embed pass. Start the daemon
    with the same embedder afterwards; it refuses one whose dimension differs
    from the store's.

    \b
    Example:
      systemctl --user stop memoryd.socket memoryd.service   # or end `memoryd run`
      memoryd reembed --embedder ~/models/all-mpnet-base-v2 --yes
      memoryd run --embedder ~/models/all-mpnet-base-v2
    """
    from sqlalchemy import func, select

    from memoryd.config import load_config
    from memoryd.datadir_lock import DataDirLock
    from memoryd.models.embedder import model_dimension, spec_name
    from memoryd.passes.embed import EMBEDDABLE
    from memoryd.queue import jobs as jobq
    from memoryd.store import migrate, vectors
    from memoryd.store.engine import create_store_engine
    from memoryd.store.schema import memories

    try:
        cfg = load_config(config_path, data_dir=data_dir, db_url=db_url, embedder=embedder)
        configured = load_config(config_path, data_dir=data_dir, db_url=db_url).embedder
    except MemorydError as exc:
        _fail(exc.message)
    spec = cfg.embedder
    if spec == "none":
        _fail("reembed needs an embedder: pass --embedder bundled or --embedder PATH")
    lock = DataDirLock(cfg.resolved_data_dir())
    try:
        lock.acquire()
    except MemorydError as exc:
        _fail(f"{exc.message}. Stop the daemon (`systemctl --user stop memoryd.socket "
              "memoryd.service` for the service, or end `memoryd run`) and run reembed again")
    embeddable = (memories.c.content.is_not(None), memories.c.status.in_(EMBEDDABLE))
    try:
        name = spec_name(spec)
        click.echo(f"loading {name} to check that it encodes...")
        try:
            dim = _probe(spec)
        except Exception as exc:  # the store is not touched
            _fail(f"the embedder {spec!r} does not load or encode ({type(exc).__name__}: {exc}); "
                  "nothing was changed")
        stated = model_dimension(spec)
        if stated is not None and stated != dim:
            click.echo(f"warning: the model's files say {stated} dimensions, it made {dim}; using {dim}",
                       err=True)
        engine = create_store_engine(cfg.resolved_db_url(), cfg.busy_timeout_ms)
        try:
            migrate.upgrade(engine)
            with engine.connect() as conn:
                before = vectors.index_dim(conn)
                total = int(conn.execute(select(func.count()).select_from(memories)
                                         .where(*embeddable)).scalar_one())
            if not yes:
                click.confirm(f"drop the vectors of this store ({before} dimensions) and re-embed "
                              f"{total} memories with {name} ({dim} dimensions)?", abort=True)
            with engine.begin() as conn:
                dropped = vectors.rebuild_index(conn, dim, name)
                ids = [r[0] for r in conn.execute(select(memories.c.id).where(*embeddable))]
                jobq.enqueue_many(conn, [("embed", mid) for mid in ids], now=time.time(),
                                  max_attempts=cfg.job_max_attempts)
            vectors.reclaim_space(engine)
        finally:
            engine.dispose()
    finally:
        lock.release()
    click.echo(f"dropped {dropped} vectors of {before} dimensions; the index now takes {dim} "
               f"({name}); {len(ids)} memories queued for the embed pass.")
    if spec != configured:
        click.echo(f"start the daemon with this embedder: `memoryd run --embedder {spec}`, or set "
                   f"embedder = \"{spec}\" in the config (the daemon refuses an embedder whose "
                   "dimension differs from the store's)")
