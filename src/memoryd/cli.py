"""The ``memoryd`` command: a thin click shell over the client and the daemon."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from memoryd import __version__
from memoryd.config import Config, load_config, render_defaults
from memoryd.errors import MemorydError

EXIT_OK, EXIT_DEGRADED, EXIT_ERROR, EXIT_NOT_RUNNING, EXIT_DENIED = 0, 1, 2, 3, 4


class UsageProblem(click.ClickException):
    """A bad config file or flag: exit 2, never 1 (which `status` uses for "degraded")."""

    exit_code = EXIT_ERROR


def _load(config: str | None, socket: str | None, admin_socket: str | None = None) -> Config:
    try:
        return load_config(config, socket=socket, admin_socket_path=admin_socket)
    except MemorydError as exc:
        raise UsageProblem(exc.message) from exc


def client_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--socket, --config and --json, shared by every client command."""

    @click.option("--socket", "socket_path", default=None, metavar="PATH",
                  help="Agent socket path (default: $MEMORYD_SOCKET, then the runtime dir).")
    @click.option("--config", "config_path", default=None, metavar="FILE",
                  help="Config file (default: $MEMORYD_CONFIG, then the platform config dir).")
    @click.option("--admin-socket", "admin_socket", default=None, metavar="PATH",
                  help="Operator socket path (default: $MEMORYD_ADMIN_SOCKET, then "
                       "memoryd-admin/memoryd-admin.sock beside the agent socket's directory).")
    @click.option("--json", "as_json", is_flag=True, help="Print the method's result as JSON.")
    @functools.wraps(fn)
    def wrapper(*args: Any, socket_path: str | None, config_path: str | None, as_json: bool,
                admin_socket: str | None, **kwargs: Any) -> Any:
        cfg = _load(config_path, socket_path, admin_socket)
        return fn(*args, cfg=cfg, as_json=as_json, **kwargs)

    return wrapper


def owner_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The owner fields, each with an environment variable."""
    for name, env in reversed((("agent-id", "MEMORYD_AGENT_ID"), ("user-id", "MEMORYD_USER_ID"),
                               ("project", "MEMORYD_PROJECT"), ("session-id", "MEMORYD_SESSION_ID"))):
        fn = click.option(f"--{name}", envvar=env, default=None, show_envvar=True,
                          help=f"Owner field {name.replace('-', '_')}.")(fn)
    return fn


def _call(cfg: Config, method: str, params: dict[str, Any], admin: bool = False) -> Any:
    with client_session(cfg, admin=admin) as client:
        return client.call(method, params)


@contextlib.contextmanager
def client_session(cfg: Config, *, admin: bool = False, timeout_s: float | None = None) -> Iterator[Any]:
    """One connection for one or many calls; a daemon that is down, refuses, or breaks the
    connection ends the command with the message and exit code every command uses."""
    from memoryd.client import AccessDenied, Client, ClientError, Disconnected, NotRunning, Timeout

    try:
        client = Client(config=cfg, admin=admin) if timeout_s is None else Client(
            config=cfg, admin=admin, timeout_s=timeout_s)
        with client:
            yield client
    except NotRunning as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_NOT_RUNNING)
    except AccessDenied as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_DENIED)
    except ClientError as exc:
        field = f" [field: {exc.field}]" if exc.field else ""
        click.echo(f"Error {exc.code}: {exc.message}{field}", err=True)
        sys.exit(EXIT_ERROR)
    except (Disconnected, Timeout) as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_ERROR)


def _print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False))


def _owners(agent_id: str | None, user_id: str | None, project: str | None,
            session_id: str | None) -> dict[str, str]:
    values = {"agent_id": agent_id, "user_id": user_id, "project": project, "session_id": session_id}
    return {k: v for k, v in values.items() if v}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memoryd")
def main() -> None:
    """memoryd: local-first memory for AI coding agents.

    \b
    Example:
      memoryd run &
      memoryd write --agent-id demo "The staging DB is Postgres 15 on db1:5432"
      memoryd search --agent-id demo "which database does staging use"
      memoryd status
    """


@main.command()
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Data directory (env MEMORYD_DATA_DIR).")
@click.option("--db-url", default=None, help="Store URL (env MEMORYD_DB_URL).")
@click.option("--socket", "socket_path", type=click.Path(dir_okay=False), default=None,
              help="Agent socket path (env MEMORYD_SOCKET).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Config file (env MEMORYD_CONFIG).")
@click.option("--admin-socket", "admin_socket", type=click.Path(dir_okay=False), default=None,
              help="Operator socket path (env MEMORYD_ADMIN_SOCKET; default: "
                   "memoryd-admin/memoryd-admin.sock in the parent of the agent socket's directory).")
@click.option("--embedder", default=None, help="none | bundled | PATH (env MEMORYD_EMBEDDER).")
@click.option("--llm", default=None, help="none | bundled | PATH (env MEMORYD_LLM).")
@click.option("--log-level", default=None, help="debug | info | warning | error.")
@click.option("--log-format", default=None, help="json | console | auto.")
def run(data_dir: str | None, db_url: str | None, socket_path: str | None, config_path: str | None,
        admin_socket: str | None, embedder: str | None, llm: str | None, log_level: str | None,
        log_format: str | None) -> None:
    """Run the daemon in the foreground until SIGTERM or Ctrl-C.

    \b
    Example:
      memoryd run --data-dir ~/.local/share/memoryd --embedder bundled
    """
    # The config is read before the daemon's heavy imports (SQLAlchemy, Alembic, numpy),
    # so a bad config is refused at once.
    try:
        cfg = load_config(config_path, data_dir=data_dir, db_url=db_url, socket=socket_path,
                          admin_socket_path=admin_socket, embedder=embedder, llm=llm,
                          log_level=log_level, log_format=log_format)
    except MemorydError as exc:
        click.echo(f"Error: {exc.message}", err=True)
        sys.exit(EXIT_ERROR)
    from memoryd.daemon.app import Daemon
    from memoryd.log import configure_logging

    configure_logging(cfg.log_level, cfg.log_format)
    _warn_secrets_in_options({"--db-url": (db_url, "MEMORYD_DB_URL"), "--llm": (llm, "MEMORYD_LLM")})
    try:
        code = Daemon(cfg).run()
    except MemorydError as exc:
        import structlog

        structlog.get_logger("memoryd").error("daemon.refused", error=exc.message)
        click.echo(f"Error: {exc.message}", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(code)


def _warn_secrets_in_options(options: dict[str, tuple[str | None, str]]) -> None:
    """Log a warning for an option whose URL holds a password or token: memoryd keeps it out of
    every answer, log line and child's command line, but the daemon's own command line, which
    every local user can read, is the caller's."""
    import structlog

    from memoryd.masking import mask_url

    for option, (value, variable) in options.items():
        if value and mask_url(value) != value:
            structlog.get_logger("memoryd").warning(
                "config.secret_on_command_line", option=option,
                fix=f"give it by {variable} or the config file (mode 0600): every local user can read "
                    "a process's command line")


def _status_exit(status: dict[str, Any]) -> int:
    return EXIT_DEGRADED if status.get("health") == "degraded" else EXIT_OK


@main.command()
@client_options
@click.option("--watch", is_flag=True, help="Refresh a live view every second until Ctrl-C.")
def status(cfg: Config, as_json: bool, watch: bool) -> None:
    """Show the daemon's health, queues, passes and models.

    Exit code: 0 healthy, 1 degraded, 3 not running, 4 access denied.

    \b
    Example:
      memoryd status --json | jq .queues
    """
    from memoryd import statusview

    if watch and not as_json:
        statusview.watch(lambda: _call(cfg, "daemon.status", {}))
        return
    result = _call(cfg, "daemon.status", {})
    if as_json:
        _print_json(result)
    else:
        statusview.print_status(result)
    sys.exit(_status_exit(result))


@main.command()
@client_options
@owner_options
@click.argument("content")
@click.option("--kind", default="auto", show_default=True, help="Memory kind, or auto.")
@click.option("--scope", default="agent", show_default=True,
              type=click.Choice(["agent", "user", "session", "project", "org"]))
@click.option("--importance", type=float, default=None, help="0..1 (default 0.5).")
@click.option("--metadata", default=None, help="A JSON object.")
@click.option("--ttl", "ttl_s", type=float, default=None, help="Expire after this many seconds.")
@click.option("--idempotency-key", default=None, help="Retries with this key write once.")
def write(cfg: Config, as_json: bool, content: str, kind: str, scope: str,
          importance: float | None, metadata: str | None, ttl_s: float | None,
          idempotency_key: str | None, **owners: str | None) -> None:
    """Write a memory (CONTENT, or - to read it from stdin).

    \b
    Example:
      memoryd write --agent-id demo "Run tests with make test"
      git log -1 --format=%B | memoryd write --project api --scope project -
    """
    if content == "-":
        content = sys.stdin.read()
    params: dict[str, Any] = {"content": content, "kind": kind, "scope": scope, **_owners(**owners)}
    if importance is not None:
        params["importance"] = importance
    if metadata:
        try:
            params["metadata"] = json.loads(metadata)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--metadata") from exc
    if ttl_s is not None:
        params["ttl_s"] = ttl_s
    if idempotency_key:
        params["idempotency_key"] = idempotency_key
    result = _call(cfg, "memory.write", params)
    if as_json:
        _print_json(result)
    elif result.get("duplicate_of"):
        click.echo(f"{result['id']} (duplicate of an existing memory; nothing written)")
    else:
        click.echo(f"{result['id']} queued: {', '.join(result['queued']) or '-'}")


@main.command()
@client_options
@click.argument("memory_id")
@click.option("--include", multiple=True, type=click.Choice(["history", "citations", "links", "entities"]),
              help="Extra sections (repeatable).")
def get(cfg: Config, as_json: bool, memory_id: str, include: tuple[str, ...]) -> None:
    """Show one memory by id.

    \b
    Example:
      memoryd get mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB --include history
    """
    result = _call(cfg, "memory.get", {"id": memory_id, "include": list(include)})
    if as_json:
        _print_json(result)
        return
    from memoryd import statusview

    statusview.print_memory(result)


@main.command()
@client_options
@owner_options
@click.argument("query")
@click.option("-k", "k", type=int, default=10, show_default=True, help="Results wanted (1..100).")
@click.option("--scope", default=None, type=click.Choice(["agent", "user", "session", "project", "org"]))
@click.option("--kind", default=None, help="Only this kind.")
@click.option("--mode", default="hybrid", show_default=True,
              type=click.Choice(["hybrid", "lexical", "vector"]))
@click.option("--as-of", default=None, help="What the store believed at this RFC 3339 time.")
@click.option("--valid-at", default=None, help="Only memories valid at this RFC 3339 time.")
@click.option("--include-candidates", is_flag=True, help="Include unpromoted derived memories.")
def search(cfg: Config, as_json: bool, query: str, k: int, scope: str | None, kind: str | None,
           mode: str, as_of: str | None, valid_at: str | None, include_candidates: bool,
           **owners: str | None) -> None:
    """Search memories visible to the given owner fields.

    \b
    Example:
      memoryd search --agent-id demo "how do I run the tests"
    """
    params: dict[str, Any] = {"query": query, "k": k, "mode": mode, **_owners(**owners)}
    for name, value in (("scope", scope), ("kind", kind), ("as_of", as_of), ("valid_at", valid_at)):
        if value:
            params[name] = value
    if include_candidates:
        params["include_candidates"] = True
    result = _call(cfg, "memory.search", params)
    if as_json:
        _print_json(result)
        return
    from memoryd import statusview

    statusview.print_search(result)


@main.group()
def queue() -> None:
    """Inspect and revive jobs (operator socket)."""


@queue.command("list")
@client_options
@click.option("--state", type=click.Choice(["ready", "failed", "leased", "done", "dead"]), default=None)
@click.option("--pass", "pass_name", default=None, help="Only this pass.")
@click.option("--limit", type=int, default=50, show_default=True)
def queue_list(cfg: Config, as_json: bool, state: str | None, pass_name: str | None,
               limit: int) -> None:
    """List jobs, newest first.

    \b
    Example:
      memoryd queue list --state dead
    """
    params: dict[str, Any] = {"limit": limit}
    if state:
        params["state"] = state
    if pass_name:
        params["pass"] = pass_name
    result = _call(cfg, "queue.list", params, admin=True)
    if as_json:
        _print_json(result)
        return
    from memoryd import statusview

    statusview.print_jobs(result["jobs"])


@queue.command("retry")
@client_options
@click.argument("job_ids", nargs=-1, type=int)
@click.option("--pass", "pass_name", default=None, help="Revive the dead jobs of this pass.")
@click.option("--all", "all_dead", is_flag=True, help="Revive every dead job.")
def queue_retry(cfg: Config, as_json: bool, job_ids: tuple[int, ...], pass_name: str | None,
                all_dead: bool) -> None:
    """Revive dead jobs with fresh attempts.

    \b
    Example:
      memoryd queue retry --all
    """
    if not job_ids and not pass_name and not all_dead:
        raise click.UsageError("name job ids, --pass NAME, or --all")
    params: dict[str, Any] = {"ids": list(job_ids)}
    if pass_name:
        params["pass"] = pass_name
    if all_dead:
        params["all"] = True
    result = _call(cfg, "queue.retry", params, admin=True)
    if as_json:
        _print_json(result)
    else:
        click.echo(f"revived {result['revived']} job(s)")


@main.command("config")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Show the effective values of this file instead of the defaults.")
@click.option("--json", "as_json", is_flag=True, help="Print the effective configuration as JSON.")
def config_cmd(config_path: str | None, as_json: bool) -> None:
    """Print every configuration key with its default, as a commented TOML file.

    \b
    Example:
      memoryd config > ~/.config/memoryd/config.toml
    """
    if as_json or config_path:
        cfg = _load(config_path, None)
        _print_json(cfg.as_dict())
    else:
        click.echo(render_defaults())


@main.group()
def service() -> None:
    """Install memoryd as an OS service (systemd user unit, launchd agent)."""


def _target(system: bool, data_dir: str | None, db_url: str | None = None) -> Any:
    from memoryd.osservice.units import default_target

    return default_target(system=system, data_dir=Path(data_dir).expanduser() if data_dir else None,
                          db_url=db_url)


def _service_db_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A store URL the service can run on, or a usage error naming what is wrong."""
    if value is None:
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        backend = make_url(value).get_backend_name()
    except ArgumentError as exc:
        raise click.BadParameter(f"not a store URL ({exc}); e.g. postgresql+psycopg://user:pw@host/db "
                                 "or sqlite:////path/memoryd.db") from exc
    if backend not in ("sqlite", "postgresql"):
        raise click.BadParameter(f"memoryd stores in sqlite or postgresql, not {backend!r}")
    return value


_db_url_opt = click.option("--db-url", default=None, callback=_service_db_url,
                           help="Store URL the service runs on (e.g. a PostgreSQL URL). Kept out of the "
                                "unit file: in an environment file (systemd) or plist of mode 0600.")


_system_opt = click.option("--system", is_flag=True, help="System-wide (needs root) instead of per user.")
_data_dir_opt = click.option("--data-dir", type=click.Path(file_okay=False), default=None,
                             help="Data directory the service uses.")


@service.command("print")
@_system_opt
@_data_dir_opt
@_db_url_opt
@click.option("--json", "as_json", is_flag=True, help="Print {path: text} as JSON.")
def service_print(system: bool, data_dir: str | None, db_url: str | None, as_json: bool) -> None:
    """Print the unit files (or plist) `install` would write (a URL's password shown as ***).

    \b
    Example:
      memoryd service print | less
    """
    from memoryd.osservice.units import masked, render, secret_files

    target = masked(_target(system, data_dir, db_url))
    files = {str(path): text for path, text in secret_files(target).items()}
    files.update({str(target.unit_dir / name): text for name, text in render(target).items()})
    if as_json:
        _print_json(files)
        return
    for path, text in files.items():
        click.echo(f"# ---- {path}")
        click.echo(text)


@service.command("install")
@_system_opt
@_data_dir_opt
@_db_url_opt
@click.option("--json", "as_json", is_flag=True, help="Print the steps as JSON.")
def service_install(system: bool, data_dir: str | None, db_url: str | None, as_json: bool) -> None:
    """Write the service files, enable and start them.

    \b
    Examples:
      memoryd service install && memoryd status
      memoryd service install --db-url postgresql+psycopg://memoryd:PW@db1/memoryd
    """
    from memoryd.osservice.install import install, undo_hint

    target = _target(system, data_dir, db_url)
    steps = install(target)
    failed = [s for s in steps if " failed (" in s]
    if as_json:
        _print_json({"steps": steps, "undo": undo_hint(target), "ok": not failed})
    else:
        for step in steps:
            click.echo(f"- {step}")
        click.echo(undo_hint(target))
    if failed:
        click.echo(f"Error: {len(failed)} step(s) failed; the unit files are written, start them by hand "
                   "or fix the cause and run install again", err=True)
        sys.exit(EXIT_ERROR)


@service.command("uninstall")
@_system_opt
@_data_dir_opt
@click.option("--json", "as_json", is_flag=True, help="Print the steps as JSON.")
def service_uninstall(system: bool, data_dir: str | None, as_json: bool) -> None:
    """Stop and remove the service (the data directory is kept).

    \b
    Example:
      memoryd service uninstall
    """
    from memoryd.osservice.install import uninstall

    steps = uninstall(_target(system, data_dir))
    failed = [s for s in steps if " failed (" in s]
    if as_json:
        _print_json({"steps": steps, "ok": not failed})
    else:
        for step in steps:
            click.echo(f"- {step}")
    if failed:
        sys.exit(EXIT_ERROR)


@main.command()
@client_options
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Data directory to check.")
@click.option("--skip-models", is_flag=True, help="Do not load the models (faster).")
def doctor(cfg: Config, as_json: bool, data_dir: str | None, skip_models: bool) -> None:
    """Check the socket, the store, the disk, the models and the queue; print fixes.

    Exit code 0 when every check passes, 1 otherwise.

    \b
    Example:
      memoryd doctor --skip-models
    """
    from memoryd import doctor as doc

    if data_dir:
        cfg.data_dir = data_dir
    findings = doc.run_checks(cfg, models=not skip_models)
    report = doc.as_json(findings)
    if as_json:
        _print_json(report)
    else:
        marks = {doc.OK: "[green]ok[/green]", doc.WARN: "[yellow]warn[/yellow]", doc.FAIL: "[red]FAIL[/red]"}
        from memoryd.statusview import console

        for f in findings:
            console.print(f"{marks[f.level]:>20}  {f.check}: {f.detail}")
            if f.fix:
                console.print(f"{'':>9}fix: {f.fix}")
    sys.exit(EXIT_OK if report["result"] == doc.OK else EXIT_DEGRADED)


@main.command()
@client_options
@click.argument("memory_id", required=False)
@click.option("--subject", default=None, metavar="FIELD=VALUE",
              help="Forget every memory with this owner value, e.g. user_id=alice.")
@click.option("--reason", default=None, help="Why (kept in the audit log).")
@click.option("--no-tombstone", is_flag=True, help="Allow the same content to be written again later.")
def forget(cfg: Config, as_json: bool, memory_id: str | None, subject: str | None, reason: str | None,
           no_tombstone: bool) -> None:
    """Erase a memory (or everything of one owner) and keep it from coming back.

    By id, the memory's copies (collapsed duplicates) go with it, and review
    proposals that involve it are withdrawn. By subject (an operator verb,
    sent on the operator socket), every row carrying that owner value in any
    scope is forgotten in batches of 500, with progress on stderr.

    \b
    Example:
      memoryd forget mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB --reason "wrong host"
      memoryd forget --subject user_id=alice
    """
    if (memory_id is None) == (subject is None):
        raise click.UsageError("give a MEMORY_ID or --subject FIELD=VALUE")
    params: dict[str, Any] = {"tombstone": not no_tombstone}
    if memory_id:
        params["id"] = memory_id
    else:
        assert subject is not None
        field, _, value = subject.partition("=")
        if not value:
            raise click.BadParameter("use FIELD=VALUE, e.g. user_id=alice", param_hint="--subject")
        params["subject"] = {field: value}
    if reason:
        params["reason"] = reason
    if memory_id:
        result = _call(cfg, "memory.forget", params)
    else:
        result = _forget_subject(cfg, params, show_progress=not as_json and sys.stderr.isatty())
    if as_json:
        _print_json(result)
    else:
        click.echo(f"forget request {result['request_id']}: {result['matched']} memory(ies) now deleting")


def _forget_subject(cfg: Config, params: dict[str, Any], show_progress: bool) -> dict[str, Any]:
    """Forget by subject one batch at a time on the operator socket, showing progress."""
    matched, request_ids, cursor = 0, [], None
    while True:
        page = _call(cfg, "memory.forget", {**params, "limit": 500, **({"cursor": cursor} if cursor else {})},
                     admin=True)
        matched += page["matched"]
        request_ids += page["request_ids"]
        if show_progress:
            total = matched + page["remaining"]
            click.echo(f"\rforgetting: {matched}/{total} rows marked", nl=False, err=True)
        cursor = page["next_cursor"]
        if cursor is None:
            break
    if show_progress:
        click.echo("", err=True)
    return {"request_id": request_ids[0] if request_ids else page["request_id"],
            "request_ids": request_ids, "matched": matched}


@main.group()
def review() -> None:
    """Review proposals from the passes (operator socket)."""


@review.command("list")
@client_options
@click.option("--status", type=click.Choice(["open", "approved", "rejected", "stale"]), default="open",
              show_default=True)
@click.option("--limit", type=int, default=50, show_default=True)
def review_list(cfg: Config, as_json: bool, status: str, limit: int) -> None:
    """List proposals.

    \b
    Example:
      memoryd review list
    """
    result = _call(cfg, "review.list", {"status": status, "limit": limit}, admin=True)
    if as_json:
        _print_json(result)
        return
    from memoryd import statusview

    statusview.print_proposals(result["proposals"])


@review.command("show")
@client_options
@click.argument("proposal_id")
def review_show(cfg: Config, as_json: bool, proposal_id: str) -> None:
    """Show one proposal with a diff of the memories involved.

    \b
    Example:
      memoryd review show prp_01JD3Z8W6KQ2V7N4X9R5T1Y0AB
    """
    got = _call(cfg, "review.get", {"id": proposal_id}, admin=True)
    found, rows = got["proposal"], got["memories"]
    if as_json:
        _print_json(got)
        return
    from memoryd import statusview

    statusview.print_proposal(found, rows)


def _decide(cfg: Config, as_json: bool, proposal_id: str, decision: str, note: str | None) -> None:
    params: dict[str, Any] = {"id": proposal_id, "decision": decision}
    if note:
        params["note"] = note
    result = _call(cfg, "review.decide", params, admin=True)
    if as_json:
        _print_json(result)
    else:
        click.echo(f"{proposal_id}: {decision}d" + (f" → {result}" if len(result) > 2 else ""))


@review.command("approve")
@client_options
@click.argument("proposal_id")
@click.option("--note", default=None, help="Kept with the decision.")
def review_approve(cfg: Config, as_json: bool, proposal_id: str, note: str | None) -> None:
    """Approve a proposal: apply the supersession, merge or promotion.

    \b
    Example:
      memoryd review approve prp_01JD3Z8W6KQ2V7N4X9R5T1Y0AB
    """
    _decide(cfg, as_json, proposal_id, "approve", note)


@review.command("reject")
@client_options
@click.argument("proposal_id")
@click.option("--note", default=None, help="Kept with the decision.")
def review_reject(cfg: Config, as_json: bool, proposal_id: str, note: str | None) -> None:
    """Reject a proposal; it is never raised again (a rejected candidate is tombstoned).

    \b
    Example:
      memoryd review reject prp_01JD3Z8W6KQ2V7N4X9R5T1Y0AB --note "both are true"
    """
    _decide(cfg, as_json, proposal_id, "reject", note)


@main.group()
def audit() -> None:
    """Inspect the audit log (operator socket)."""


@audit.command("verify")
@click.option("--expect", "expect_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A file holding an earlier `memoryd audit verify --json` answer: each lane must "
                   "still hold the head it recorded (a log rewritten since fails).")
@client_options
def audit_verify(cfg: Config, as_json: bool, expect_path: Path | None) -> None:
    """Check the audit log's hash chains (its lanes, their head rows and cross-anchors);
    report the first broken event and every problem found.

    Exit code 0 when the log verifies, 1 when it is broken. Keep the `--json` answer
    somewhere the database's writers cannot reach, and pass it to `--expect` later.

    \b
    Example:
      memoryd audit verify --json > ~/audit-heads.json
      memoryd audit verify --expect ~/audit-heads.json
    """
    params: dict[str, Any] = {}
    if expect_path is not None:
        try:
            params["expect_heads"] = json.loads(expect_path.read_text())["heads"]
        except (ValueError, KeyError, TypeError) as exc:
            raise click.ClickException(
                f"{expect_path} is not a `memoryd audit verify --json` answer ({exc}); "
                "save one with `memoryd audit verify --json > FILE`") from exc
    result = _call(cfg, "audit.verify", params, admin=True)
    if as_json:
        _print_json(result)
    elif result["ok"]:
        click.echo(f"audit log verified: {result['events']} events in {result.get('lanes', 1)} lane(s), "
                   f"{result.get('anchors', 0)} cross-anchors")
    else:
        where = (f"at event seq {result['first_break_seq']}" if result["first_break_seq"] is not None
                 else "(no single event: a lane's end or head row)")
        click.echo(f"audit log BROKEN {where} ({result['events']} events verify before it)")
        for problem in result.get("problems", []):
            click.echo(f"  - {problem}")
    sys.exit(EXIT_OK if result["ok"] else EXIT_DEGRADED)


# Commands that live in their own modules (imported last: they build on the options above).
from memoryd.cli_data import export_cmd, import_cmd, list_cmd  # noqa: E402
from memoryd.cli_project import project  # noqa: E402
from memoryd.cli_reembed import reembed  # noqa: E402
from memoryd.cli_store import store  # noqa: E402
from memoryd.console.cli import console as console_cmd  # noqa: E402
from memoryd.editors.cli_capture import capture  # noqa: E402
from memoryd.editors.cli_mcp import mcp  # noqa: E402

main.add_command(list_cmd)
main.add_command(export_cmd)
main.add_command(import_cmd)
main.add_command(capture)
main.add_command(mcp)
main.add_command(reembed)
main.add_command(store)
main.add_command(project)
main.add_command(console_cmd)
