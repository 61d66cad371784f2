"""``memoryd store``: operator commands on a store itself, with no daemon (``store copy``).

A thin click shell over store/copy.py: it prints progress on stderr, the
verification on stdout (or one JSON object with ``--json``), and exits 0 when
the copy verified, 2 when it was refused, failed or did not verify, and 130
when interrupted (Ctrl-C or SIGTERM: it stops after the batch in flight; run it
again to resume).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import NoReturn

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
    from memoryd.store.copy import CopyInterrupted, copy_store

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
