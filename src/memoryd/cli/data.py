"""``memoryd list``, ``memoryd export`` and ``memoryd import``: browsing and moving memories.

Thin click shells: ``list`` over memory.list (agent socket), ``export`` over
memory.export (operator socket) and ``import`` over memory.write_many
(operator socket) through :mod:`memoryd.exchange`. Heavy imports (rich) wait
until a command runs, so registering these commands costs the CLI's start
nothing.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import click

from memoryd import __version__
from memoryd.cli.common import (
    EXIT_ERROR,
    call,
    client_options,
    client_session,
    load,
    owner_fields,
    owner_options,
    print_json,
)
from memoryd.config import Config

SCOPE_CHOICE = click.Choice(["agent", "user", "session", "project", "org"])
STATUS_CHOICE = click.Choice(["active", "candidate", "superseded", "rejected", "archived", "deleting",
                              "forgotten"])
EXPORT_STATUS_CHOICE = click.Choice(["active", "candidate", "superseded", "rejected", "archived"])
EXPORT_PAGE = 500


@contextlib.contextmanager
def _session(cfg: Config, admin: bool) -> Iterator[Callable[[str, dict[str, Any]], Any]]:
    """One connection for many calls (export and import page through it)."""
    with client_session(cfg, admin=admin, timeout_s=120.0) as client:
        yield lambda method, params: client.call(method, params)


class _Progress:
    """A progress bar on stderr when stderr is a terminal; silent otherwise."""

    def __init__(self, label: str, enabled: bool):
        self.label = label
        self.bar: Any = None
        self.task: Any = None
        self.enabled = enabled

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress("[bold]{task.description}", BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self.bar.__enter__()
        return self

    def start(self, total: int | None) -> None:
        if self.bar is not None:
            self.task = self.bar.add_task(self.label, total=total)

    def advance(self, n: int, note: str | None = None) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.advance(self.task, n)
            if note is not None:
                self.bar.update(self.task, description=f"{self.label} ({note})")

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def _status_params(status: tuple[str, ...]) -> dict[str, Any]:
    if not status:
        return {}
    return {"status": status[0] if len(status) == 1 else list(status)}


@click.command("list")
@client_options
@owner_options
@click.option("--scope", type=SCOPE_CHOICE, default=None, help="Only this scope.")
@click.option("--kind", default=None, help="Only this kind.")
@click.option("--status", multiple=True, type=STATUS_CHOICE,
              help="Only these statuses (repeatable; default active).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True,
              help="Memories per page.")
@click.option("--cursor", default=None, help="Continue from an earlier page's next_cursor.")
@click.option("--all", "all_pages", is_flag=True, help="Follow the cursor to the last page.")
def list_cmd(cfg: Config, as_json: bool, scope: str | None, kind: str | None, status: tuple[str, ...],
             limit: int, cursor: str | None, all_pages: bool, **owners: str | None) -> None:
    """List the memories the given owner fields may see, newest first.

    Owner fields are access keys, as in `memoryd search`: no key, no rows of
    that scope (org rows are always visible).

    \b
    Example:
      memoryd list --project api --scope project --kind decision
      memoryd list --agent-id demo --all --json | jq '.memories | length'
    """
    params: dict[str, Any] = {"limit": limit, **owner_fields(**owners), **_status_params(status)}
    for name, value in (("scope", scope), ("kind", kind), ("cursor", cursor)):
        if value:
            params[name] = value
    if not all_pages:
        result = call(cfg, "memory.list", params)
    else:
        rows: list[dict[str, Any]] = []
        notices: list[str] = []
        with _session(cfg, admin=False) as page_of:
            while True:
                page = page_of("memory.list", params)
                rows += page["memories"]
                notices = page.get("notices", notices)
                if not page["next_cursor"]:
                    break
                params["cursor"] = page["next_cursor"]
        result = {"memories": rows, "next_cursor": None, "notices": notices}
    if as_json:
        print_json(result)
        return
    _print_list(result)


def _print_list(result: dict[str, Any]) -> None:
    from rich.table import Table

    from memoryd.statusview import console

    for notice in result.get("notices", []):
        console.print(f"note: {notice}", style="yellow")
    table = Table(show_lines=False)
    for name in ("recorded_at", "id", "kind", "scope", "status", "content"):
        table.add_column(name, overflow="fold" if name == "content" else "ellipsis")
    for row in result["memories"]:
        content = row.get("content") or ""
        table.add_row(str(row.get("recorded_at") or "")[:19], row["id"], str(row.get("kind") or ""),
                      str(row.get("scope") or ""), row["status"],
                      content if len(content) <= 200 else content[:199] + "…")
    console.print(table)
    if result.get("next_cursor"):
        click.echo(f"more: add --cursor {result['next_cursor']} (or --all)", err=True)


def _owner_filters(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Owner fields as export filters: no environment variables, so a shell's
    MEMORYD_AGENT_ID never narrows an export by accident."""
    for name in reversed(("agent-id", "user-id", "project", "session-id")):
        fn = click.option(f"--{name}", default=None,
                          help=f"Only rows whose {name.replace('-', '_')} is this.")(fn)
    return fn


@click.command("export")
@click.option("--socket", "socket_path", default=None, metavar="PATH",
              help="Agent socket path; the operator socket beside it is used.")
@click.option("--config", "config_path", default=None, metavar="FILE", help="Config file.")
@_owner_filters
@click.option("--scope", type=SCOPE_CHOICE, default=None, help="Only this scope.")
@click.option("--kind", default=None, help="Only this kind.")
@click.option("--status", multiple=True, type=EXPORT_STATUS_CHOICE,
              help="Only these statuses (repeatable; default every status but forgotten ones).")
@click.option("--with-vectors", is_flag=True, help="Include each memory's embedding.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write to FILE instead of stdout.")
def export_cmd(socket_path: str | None, config_path: str | None, scope: str | None, kind: str | None,
               status: tuple[str, ...], with_vectors: bool, output: str | None,
               **owners: str | None) -> None:
    """Write memories as JSON Lines (docs/export-format.md), with a progress bar on stderr.

    Owner fields here select rows carrying that value (an operator's export of
    a subject), not access keys. Forgotten rows, and rows being forgotten, are
    never exported. Uses the operator socket.

    \b
    Example:
      memoryd export > memories.jsonl
      memoryd export --user-id alice --with-vectors -o alice.jsonl
    """
    from memoryd.clock import to_rfc3339, utcnow
    from memoryd.exchange import exportfile

    cfg = load(config_path, socket_path)
    params: dict[str, Any] = {"limit": EXPORT_PAGE, **owner_fields(**owners), **_status_params(status)}
    if scope:
        params["scope"] = scope
    if kind:
        params["kind"] = kind
    if with_vectors:
        params["with_vectors"] = True
    filters = {k: v for k, v in params.items() if k not in ("limit", "with_vectors")}
    from memoryd import privatefs

    # The export holds every memory's text: 0600, also when the file existed looser.
    target: IO[str] = privatefs.open_text(output) if output else sys.stdout
    count = 0
    try:
        with _session(cfg, admin=True) as call, _Progress("export", sys.stderr.isatty()) as bar:
            page = call("memory.export", params)
            bar.start(page.get("total"))
            exportfile.dump(exportfile.header(
                exported_at=to_rfc3339(utcnow()), memoryd_version=__version__, filters=filters,
                with_vectors=with_vectors, total=page.get("total", 0)), target)
            while True:
                for memory in page["memories"]:
                    exportfile.dump(exportfile.memory_record(memory), target)
                count += len(page["memories"])
                bar.advance(len(page["memories"]))
                if not page["next_cursor"]:
                    break
                page = call("memory.export", {**params, "cursor": page["next_cursor"]})
            exportfile.dump(exportfile.end(count), target)
            target.flush()
    finally:
        if output:
            target.close()
    click.echo(f"exported {count} memories", err=True)


@click.command("import")
@click.option("--socket", "socket_path", default=None, metavar="PATH",
              help="Agent socket path; the operator socket beside it is used.")
@click.option("--config", "config_path", default=None, metavar="FILE", help="Config file.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--batch-size", type=click.IntRange(1, 1000), default=500, show_default=True,
              help="Memories per memory.write_many call.")
@click.option("--no-vectors", is_flag=True,
              help="Ignore the file's vectors: this daemon embeds every memory again.")
@click.option("--progress/--no-progress", "progress", default=None,
              help="Show progress on stderr (default: when stderr is a terminal; forced on, a "
                   "line every few seconds).")
@click.option("--connections", type=click.IntRange(1, 4), default=1, show_default=True,
              help="Batches in flight at once, one per connection (a batch with links waits for "
                   "those before it). More did not help on 2 cores (bench/import.py).")
def import_cmd(socket_path: str | None, config_path: str | None, as_json: bool, file: str,
               batch_size: int, no_vectors: bool, progress: bool | None, connections: int) -> None:
    """Write the memories of an export into this store through memory.write_many.

    The file (or - for stdin) is read line by line and written in batches as
    it is read, so a file of any size takes the same memory; progress
    (memories done of the header's total, memories/s) goes to stderr.

    Each line is written with an idempotency key derived from it, so an import
    that was interrupted (Ctrl-C included) can be run again: nothing is
    written twice (within the idempotency window, 48 h by default). Status,
    record times, citations and links are restored. Prints written,
    duplicates and refused lines.

    A memory's vector (export --with-vectors) is kept when this daemon's
    embedder is the model that made it and the memory's text is the one it
    was made from; the others are embedded again (--no-vectors: all of them).

    The file is untrusted: a line that cannot be read, or a record with a
    field of the wrong shape or one the store refuses, is refused alone (by
    its line number and field; a record is written whole or not at all) and
    the rest is imported.

    Exit code 0 when every line was imported; 1 when the rest was imported
    but some lines were refused (listed, and in --json's "refused" and
    "bad_lines"); 2 when the file is not an export or the import stopped
    (nothing more was written; run it again); 3 when memoryd is not running;
    4 when this user may not use the operator socket.

    \b
    Example:
      memoryd import memories.jsonl
      memoryd export --with-vectors --socket /old/memoryd.sock | memoryd import -
      memoryd import --json memories.jsonl | jq .refused
    """
    from memoryd.client import ClientError
    from memoryd.exchange import exportfile
    from memoryd.exchange.importer import DEFAULT_BATCH_BYTES, Importer, prefetch

    cfg = load(config_path, socket_path)
    stream: IO[bytes] = sys.stdin.buffer if file == "-" else open(file, "rb")  # noqa: SIM115
    try:
        try:
            reader = exportfile.Reader(stream)
        except exportfile.FormatError as exc:
            click.echo(f"Error: {file}: {exc}", err=True)
            sys.exit(EXIT_ERROR)
        size = None if file == "-" else _file_size(file)
        shown = sys.stderr.isatty() and not as_json if progress is None else progress
        meter = ImportProgress(reader.total, size, lambda: reader.bytes_read, enabled=shown)
        with contextlib.ExitStack() as sessions, Importer(
                [sessions.enter_context(_session(cfg, admin=True)) for _ in range(connections)],
                batch_size=batch_size, keep_vectors=not no_vectors, progress=meter.update,
                # A batch stays under the frame limit (vectors make records ~3 KB each).
                batch_bytes=min(DEFAULT_BATCH_BYTES, cfg.max_frame_bytes * 3 // 4)) as importer:
            try:
                summary = importer.run(prefetch(reader))
            except (ClientError, KeyboardInterrupt) as exc:
                meter.finish()
                why = ("interrupted" if isinstance(exc, KeyboardInterrupt)
                       else f"Error {exc.code}: {exc.message}")
                click.echo(f"{why}; {importer.summary.done} records were imported or refused (the "
                           f"file up to line {importer.last_line}); run the same import again to "
                           "finish (nothing is written twice)", err=True)
                sys.exit(EXIT_ERROR)
            meter.finish(summary)
    finally:
        if file != "-":
            stream.close()
    report = summary.as_dict()
    if as_json:
        print_json(report)
    else:
        _print_summary(report, Path(file).name)
    sys.exit(1 if summary.refused or summary.bad_lines else 0)


def _file_size(file: str) -> int | None:
    """The size of a regular file (None for a pipe or a device: no fraction to show)."""
    import stat

    info = Path(file).stat()
    return info.st_size if stat.S_ISREG(info.st_mode) else None


class ImportProgress:
    """``memoryd import``'s progress on stderr: memories done (of the header's total, or the
    bytes read of the file's size), memories/s and what is left. On a terminal one line is
    redrawn a few times a second; forced on elsewhere (--progress), a line every 5 s."""

    def __init__(self, total: int | None, size: int | None, bytes_read: Callable[[], int], *,
                 enabled: bool, clock: Callable[[], float] | None = None):
        import time

        self.total = total
        self.size = size
        self.bytes_read = bytes_read
        self.enabled = enabled
        self.clock = clock or time.monotonic
        self.tty = sys.stderr.isatty()
        self.start = self.clock()
        self.last = -1e9
        self.line = ""

    def text(self, done: int, kept: int) -> str:
        """The progress line for ``done`` memories (``kept`` with their vectors) so far."""
        elapsed = max(self.clock() - self.start, 1e-9)
        rate = done / elapsed
        parts = [f"{done:,} of {self.total:,} memories" if self.total else f"{done:,} memories"]
        if self.total:
            fraction: float | None = min(done / self.total, 1.0)
        elif self.size:
            fraction = min(self.bytes_read() / self.size, 1.0)
            parts.append(f"{self.bytes_read() / 1e6:,.0f} of {self.size / 1e6:,.0f} MB")
        else:
            fraction = None
        if fraction is not None:
            parts[0] += f" ({fraction:.0%})"
        parts.append(f"{rate:,.0f}/s")
        parts.append(f"{kept:,} vectors kept")
        if fraction and rate and fraction < 1:
            left = elapsed * (1 - fraction) / fraction
            parts.append(f"~{_duration(left)} left")
        parts.append(f"{_duration(elapsed)} so far")
        return "import: " + " · ".join(parts)

    def update(self, summary: Any) -> None:
        """After a batch: redraw when it is time to."""
        if not self.enabled:
            return
        now = self.clock()
        if now - self.last < (0.25 if self.tty else 5.0):
            return
        self.last = now
        self._show(self.text(summary.done, summary.vectors_kept), final=False)

    def finish(self, summary: Any = None) -> None:
        """The last line (and a newline after a redrawn one)."""
        if not self.enabled:
            return
        if summary is not None:
            self._show(self.text(summary.done, summary.vectors_kept), final=True)
        elif self.tty and self.line:
            click.echo("", err=True)

    def _show(self, line: str, final: bool) -> None:
        if self.tty:
            click.echo("\r" + line.ljust(len(self.line)) + ("\n" if final else ""), err=True, nl=False)
        else:
            click.echo(line, err=True)
        self.line = line


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _print_summary(report: dict[str, Any], name: str) -> None:
    unreadable = f" and {len(report['bad_lines'])} unreadable lines" if report["bad_lines"] else ""
    already = (f", {report['already_imported']} already imported by an earlier run"
               if report["already_imported"] else "")
    click.echo(f"{name}: {report['records']} memories read; {report['written']} written, "
               f"{report['duplicates']} duplicates of existing memories{already}, "
               f"{len(report['refused'])} refused{unreadable}")
    click.echo(f"links: {report['links_restored']} restored, {report['links_skipped']} skipped "
               "(their other memory is not in this export or was refused)")
    if report["vectors_kept"]:
        click.echo(f"vectors: {report['vectors_kept']} kept from the file (searchable now); the other "
                   "memories written are queued to embed")
    for refusal in report["refused"]:
        field = f" field {refusal['field']}" if refusal["field"] else ""
        click.echo(f"  refused line {refusal['line']} ({refusal['id']}){field}: {refusal['reason']}")
    for bad in report["bad_lines"]:
        click.echo(f"  unreadable line {bad['line']}: {bad['reason']}")
    if not report["complete"]:
        click.echo("warning: the file has no end record: the export was cut short; what it holds was "
                   "imported", err=True)


#: Registered on ``memoryd`` by cli.py.
DATA_COMMANDS = (list_cmd, export_cmd, import_cmd)
