"""Human-readable renderings (rich) of status, memories, search results and jobs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

console = Console()


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _when(stamp: str | None) -> str:
    if stamp is None:
        return "-"
    from memoryd.clock import parse_rfc3339

    return _age(time.time() - parse_rfc3339(stamp).timestamp()) + " ago"


#: Below this many columns the passes table leaves out its secondary columns (a table of every
#: column needs about 105; at 80 rich cut each pass's name to four letters).
WIDE_STATUS_COLUMNS = 110
#: The columns a narrow terminal does without (``--json`` always has them).
SECONDARY_PASS_COLUMNS = ("leased", "oldest", "ms/batch")


def status_renderable(s: dict[str, Any], rates: dict[str, float] | None = None,
                      width: int | None = None) -> Group:
    """The status page as one rich renderable (used by print and by --watch, which adds rates).

    ``width`` is the terminal's: a narrow one gets the passes table without its secondary
    columns, and a note saying where they are, rather than every name cut short."""
    health = s.get("health", "?")
    style = "green" if health == "healthy" else "yellow"
    head = Text.assemble(
        ("memoryd ", "bold"), (f"{s['version']}  ", ""), (health, f"bold {style}"),
        f"  pid {s['pid']}  up {_age(s['uptime_s'])}  db {s['db']['bytes'] / 1e6:.1f} MB",
    )
    parts: list[Any] = [head]
    for problem in s.get("problems", []):
        parts.append(Text(f"  ! {problem}", style="yellow"))
    mem = ", ".join(f"{k} {v}" for k, v in sorted(s["memories"].items())) or "none"
    parts.append(Text(f"memories: {mem}"))
    gov = s["governor"]
    parts.append(Text(f"governor: {gov['state']} ({gov['reason']}); cpu {gov['cpu_percent']:.0f}%, "
                      f"mem free {gov['mem_available_bytes'] / 1e9:.1f} GB"))
    index = vector_index_line(s.get("vector_index"))
    if index is not None:
        parts.append(index)
    lexical = lexical_index_line(s.get("lexical_index"))
    if lexical is not None:
        parts.append(lexical)
    narrow = width is not None and width < WIDE_STATUS_COLUMNS
    caption = (f"{', '.join(SECONDARY_PASS_COLUMNS)}: in a terminal of {WIDE_STATUS_COLUMNS}+ "
               "columns, or with --json") if narrow else None
    table = Table(title="passes", title_justify="left", expand=False, caption=caption,
                  caption_justify="left")
    columns = ["pass", "state", "ready", "failed", "leased", "dead", "oldest", "done", "errors",
               "ms/batch", "last run"]
    if rates is not None:
        columns.insert(columns.index("errors"), "rate/s")
    if narrow:
        columns = [col for col in columns if col not in SECONDARY_PASS_COLUMNS]
    longest = max((len(name) for name in s["passes"]), default=4)
    for col in columns:
        if col == "pass":
            table.add_column(col, no_wrap=True, min_width=longest)
        elif col == "state":
            table.add_column(col, overflow="fold", min_width=len("active"))
        else:
            table.add_column(col, justify="right", no_wrap=True)
    for name, p in s["passes"].items():
        q = s["queues"].get(name, {})
        state = p["state"] if not p.get("reason") else f"{p['state']}: {p['reason']}"
        cells = {
            "pass": name, "state": state[:48], "ready": str(q.get("ready", 0)),
            "failed": str(q.get("failed", 0)), "leased": str(q.get("leased", 0)),
            "dead": str(q.get("dead", 0)), "oldest": _age(q.get("oldest_ready_age_s")),
            "done": str(p["processed_total"]), "errors": str(p["errors_total"]),
            "rate/s": f"{(rates or {}).get(name, 0.0):.1f}",
            "ms/batch": "-" if p["mean_batch_ms"] is None else f"{p['mean_batch_ms']:.0f}",
            "last run": _when(p["last_run_at"]),
        }
        table.add_row(*(cells[col] for col in columns))
    parts.append(table)
    models = Table(title="models", title_justify="left")
    for col in ("model", "enabled", "loaded", "path", "error"):
        # A long path or error is folded over lines, never cut: it is there to be copied.
        models.add_column(col, overflow="fold")
    for name, m in s["models"].items():
        models.add_row(name, str(m.get("enabled")), str(m.get("loaded")), str(m.get("path") or "-"),
                       _model_problem(m))
    parts.append(models)
    daemons = cluster_table(s.get("cluster"))
    if daemons is not None:
        parts.append(daemons)
    return Group(*parts)


def vector_index_line(vi: dict[str, Any] | None) -> Text | None:
    """The HNSW graphs beside the store, in one line (None when off)."""
    if not vi:
        return None
    # What answers without the graphs (older daemons, SQLite only: the exact scan).
    store = vi.get("fallback") or "the exact scan"
    if vi.get("error"):
        return Text(f"vector index: failed ({vi['error']}); searches use {store}; "
                    "run `memoryd store reindex` with the daemon stopped", style="yellow")
    state = "ready" if vi["ready"] else f"opening (searches use {store} meanwhile)"
    behind = f", {vi['behind']} changes to apply" if vi.get("behind") else ""
    # An owner past vector_index_part_rows has several graphs (status "parts"; "graphs": owners).
    parts = vi.get("parts", vi["graphs"])
    owners = "owners" if parts == vi["graphs"] else f"{vi['graphs']} owner(s)"
    # An owner past vector_index_flat_rows is scanned flat instead (status "flat_owners").
    flat = (f"; {vi['vectors_scanned_flat']:,} vectors of {vi['flat_owners']} owner(s) scanned flat"
            if vi.get("flat_owners") else "")
    return Text(f"vector index: {state}; {parts} graph(s) of {owners} with "
                f"{vi['min_rows']:,}+ vectors, {vi['vectors_in_graphs']:,} vectors{flat}{behind}")


def lexical_index_line(li: dict[str, Any] | None) -> Text | None:
    """The tantivy shards beside a large store, in one line (None when off)."""
    if not li:
        return None
    store = li.get("fallback") or "FTS5"  # what answers without the shards (older daemons: FTS5)
    if li.get("error"):
        return Text(f"lexical index: failed ({li['error']}); searches use {store}; "
                    "run `memoryd store reindex` with the daemon stopped", style="yellow")
    if li.get("state") == "waiting":
        return Text(f"lexical index: not needed yet ({store} answers; built once {li['min_rows']:,} "
                    "memories are active, looked at every minute)")
    if not li["ready"]:
        return Text(f"lexical index: opening (searches use {store} meanwhile)")
    behind = f", {li['behind']} changes to apply" if li.get("behind") else ""
    rebuilding = f", {li['rebuilding']} shard(s) to rebuild after an erasure" if li.get("rebuilding") else ""
    return Text(f"lexical index: ready; {li['shards']} shard(s), {li['docs']:,} memories{behind}{rebuilding}")


def cluster_table(cluster: dict[str, Any] | None) -> Table | None:
    """The daemons sharing the store (None on a store only this daemon has ever used)."""
    if not cluster or (not cluster.get("shared") and len(cluster.get("daemons", [])) < 2):
        return None
    table = Table(title="daemons sharing the store (queues above are theirs too)", title_justify="left")
    numeric = ("pid", "leases", "lag s", "writes/s", "commit p99 ms")
    for col in ("node", "host", "pid", "state", "leases", "lag s", "writes/s", "commit p99 ms", "up since"):
        table.add_column(col, justify="right" if col in numeric else "left")
    for d in cluster["daemons"]:
        # lag: seconds since the daemon last renewed its row; writes: its figures over the
        # heartbeat period before that (a daemon of an older version has none).
        writes = d.get("writes") or {}
        lag = d.get("lag_s", d.get("seen_s_ago"))
        table.add_row(d["node"] + (" (this)" if d.get("self") else ""), str(d.get("host") or "-"),
                      str(d.get("pid") or "-"), d["state"], str(d["leases"]),
                      "-" if lag is None else f"{lag:.0f}", _figure(writes.get("per_s")),
                      _figure(writes.get("commit_p99_ms")), _when(d.get("started_at")))
    return table


def _figure(value: Any) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _model_problem(m: dict[str, Any]) -> Text:
    """The models table's last cell: broken (signal, what to run), a load error, or a note."""
    broken = m.get("broken")
    if broken:
        name = m.get("model") or "model"
        return Text(f"BROKEN: {name} crashed the worker {m.get('crashes_in_a_row', 2)}x in a row, "
                    f"{broken.get('signal')} (exit {broken.get('exit_code')}); run `memoryd doctor`",
                    style="bold red")
    return Text(str(m.get("error") or m.get("note") or ""))


def print_status(s: dict[str, Any]) -> None:
    console.print(status_renderable(s, width=console.width))


def pass_rates(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict[str, float]:
    """Jobs per second each pass finished between two status snapshots."""
    if seconds <= 0:
        return {}
    return {name: max(0, p["processed_total"] - before["passes"].get(name, {}).get("processed_total", 0))
            / seconds for name, p in after["passes"].items()}


def watch(fetch: Callable[[], dict[str, Any]], interval_s: float = 1.0) -> None:
    """Redraw status in place (no flicker: rich Live updates one region) until Ctrl-C."""
    previous, at = fetch(), time.monotonic()
    try:
        with Live(status_renderable(previous, {}, console.width), console=console, refresh_per_second=4,
                  screen=False, transient=False) as live:
            while True:
                time.sleep(interval_s)
                current, now = fetch(), time.monotonic()
                live.update(status_renderable(current, pass_rates(previous, current, now - at),
                                              console.width))
                previous, at = current, now
    except KeyboardInterrupt:
        pass


def print_memory(m: dict[str, Any]) -> None:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key, value in m.items():
        if key in ("history",):
            continue
        table.add_row(key, "-" if value is None else str(value))
    console.print(table)
    for event in m.get("history", []):
        console.print(f"  {event['at']}  {event['action']}  by {event['actor']}")


def print_search(result: dict[str, Any]) -> None:
    for notice in result.get("notices", []):
        console.print(f"[yellow]note:[/yellow] {notice}")
    table = Table(title=f"mode: {result['mode_used']}", title_justify="left")
    for col in ("score", "id", "kind", "scope", "content"):
        table.add_column(col, overflow="fold")
    for r in result["results"]:
        content = (r.get("content") or "").replace("\n", " ")
        table.add_row(f"{r['score']:.3f}", r["id"], r["kind"], r["scope"],
                      content if len(content) < 120 else content[:117] + "...")
    console.print(table)


def print_jobs(jobs: list[dict[str, Any]]) -> None:
    table = Table()
    for col in ("id", "pass", "target", "state", "attempts", "last error"):
        table.add_column(col, overflow="fold")
    for j in jobs:
        table.add_row(str(j["id"]), j["pass"], j["target"], j["state"],
                      f"{j['attempts']}/{j['max_attempts']}", (j.get("last_error") or "")[:80])
    console.print(table)


def print_proposals(items: list[dict[str, Any]]) -> None:
    table = Table()
    for col in ("id", "kind", "memories", "reason", "by", "created"):
        table.add_column(col, overflow="fold")
    for p in items:
        table.add_row(p["id"], p["kind"], "\n".join(p["memory_ids"]), p["reason"], p["created_by"],
                      p["created_at"])
    console.print(table)


def print_proposal(p: dict[str, Any], rows: dict[str, dict[str, Any] | None]) -> None:
    """A proposal and a line diff of the memories it involves."""
    import difflib

    console.print(f"[bold]{p['id']}[/bold]  {p['kind']}  ({p['status']})  by {p['created_by']}")
    console.print(f"reason: {p['reason']}")
    texts = []
    for mid in p["memory_ids"]:
        row = rows.get(mid)
        content = (row or {}).get("content") or "(gone)"
        status = (row or {}).get("status", "?")
        console.print(f"  {mid}  [{status}]  recorded {(row or {}).get('recorded_at', '-')}")
        texts.append(content)
    if p["payload"].get("merged_text"):
        texts.append(p["payload"]["merged_text"])
    if len(texts) >= 2:
        for line in difflib.unified_diff(texts[0].split(), texts[-1].split(), "first", "proposed"
                                         if p["payload"].get("merged_text") else "second", lineterm="", n=50):
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
            console.print(Text(line, style=style))
