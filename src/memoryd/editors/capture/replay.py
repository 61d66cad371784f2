"""The daemon's side of the capture spool: write what hooks spooled.

Run at start, before the sockets open (turns spooled while the daemon was
down), and then every tick (turns a hook spooled because the daemon answered
later than the hook's budget; on a loaded machine that is most of them). Each
spooled item is validated
as a memory.write on the socket is (service/validation.parse_write_request: the
NUL check, then the write's own checks) and written in its own unit (a refused turn — tombstoned,
or its key reused with other params — does not hold back the others); a file
is removed only after the transaction holding its writes has committed. The
items carry idempotency keys, so a file replayed twice (a crash between the
commit and the removal) writes once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime

import structlog
from sqlalchemy import Engine

from memoryd.clock import utcnow
from memoryd.config import Config
from memoryd.editors.capture import spool as spool
from memoryd.errors import MemorydError, StoreUnavailable
from memoryd.service.validation import parse_write_request
from memoryd.store.memories import WriteContext
from memoryd.store.writes import WriteUnit, commit_units

log = structlog.get_logger(__name__)

ACTOR = "spool:claude-code"


@dataclass
class ReplayReport:
    files: int = 0
    written: int = 0
    refused: int = 0
    unreadable: int = 0
    kept: int = 0  # files left for the next start (the store failed)


def replay(engine: Engine, cfg: Config, ctx: WriteContext, now: datetime | None = None,
           folder: str | None = None) -> ReplayReport:
    """Write every spooled file's items; remove each file once its writes committed."""
    folder = folder or spool.spool_dir(cfg.resolved_data_dir())
    now = now or utcnow()
    report = ReplayReport()
    for path in spool.pending(folder):
        report.files += 1
        items, bad = spool.read(path)
        report.unreadable += bad
        units = []
        for item in items:
            try:
                units.append(WriteUnit([parse_write_request(item, cfg)], ACTOR))
            except MemorydError as exc:
                report.refused += 1
                log.warning("capture.spool_item_refused", file=os.path.basename(path), code=exc.code,
                            error=exc.message)
        outcomes = commit_units(engine, units, ctx, now) if units else []
        if any(isinstance(o, StoreUnavailable) for o in outcomes):
            report.kept += 1
            log.error("capture.spool_kept", file=os.path.basename(path),
                      reason="the store failed; kept for the next start")
            continue
        for outcome in outcomes:
            if isinstance(outcome, MemorydError):
                report.refused += 1
                log.warning("capture.spool_item_refused", file=os.path.basename(path), code=outcome.code,
                            error=outcome.message)
            else:
                report.written += 1
        spool.remove(path)
    if report.files:
        log.info("capture.spool_replayed", files=report.files, written=report.written,
                 refused=report.refused, unreadable=report.unreadable, kept=report.kept)
    return report
