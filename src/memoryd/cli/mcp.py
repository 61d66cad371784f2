"""``memoryd mcp``: run the MCP bridge, print or install an editor's configuration.

Only click (and the standard library) is imported here: the CLI registers this
group on every start. The SDK, the bridge and the config writers are imported
inside the commands that use them.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
from pathlib import Path
from typing import Any

import click

CLIENT_NAMES = ("claude-code", "cursor", "vscode", "windsurf", "zed", "codex", "gemini")
EXIT_ERROR = 2


def _default_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container with an unknown uid)
        return f"uid-{os.getuid()}"


@click.group("mcp", invoke_without_command=True)
@click.option("--agent-id", envvar="MEMORYD_AGENT_ID", default="mcp", show_default=True,
              help="Agent this bridge acts for (owner of 'agent' memories).")
@click.option("--user-id", envvar="MEMORYD_USER_ID", default=None,
              help="User this bridge acts for (default: your login name).")
@click.option("--project", envvar="MEMORYD_PROJECT", default="auto", show_default=True,
              help="Project name; 'auto' = the git top-level's name of the working dir, else the dir's.")
@click.option("--session-id", envvar="MEMORYD_SESSION_ID", default=None,
              help="Session id (default: a new one per bridge process).")
@click.option("--scopes", default="agent,project,user", show_default=True,
              help="Scopes the tools may read and write (agent, user, project, session, org).")
@click.option("--socket", "socket_path", default=None, metavar="PATH",
              help="Agent socket (default: $MEMORYD_SOCKET, then the runtime dir).")
@click.option("--config", "config_path", default=None, metavar="FILE",
              help="Config file (default: $MEMORYD_CONFIG, then the platform config dir).")
@click.pass_context
def mcp(ctx: click.Context, agent_id: str, user_id: str | None, project: str, session_id: str | None,
        scopes: str, socket_path: str | None, config_path: str | None) -> None:
    """Serve memoryd to an AI editor over MCP (stdio).

    The editor starts this command; the identity its tools act for is fixed
    here, by these flags, never by the model: tools take no owner fields and
    can reach only rows this binding may see. `memoryd mcp install --client
    NAME` writes the editor's configuration for you.

    \b
    Example:
      memoryd mcp --agent-id claude-code --project auto
      memoryd mcp install --client claude-code --project-dir .
    """
    if ctx.invoked_subcommand is not None:
        return
    from memoryd.config import load_config
    from memoryd.editors.mcp.binding import Binding, BindingError
    from memoryd.errors import MemorydError

    try:
        binding = Binding.from_flags(agent_id=agent_id, user_id=user_id or _default_user(), project=project,
                                     session_id=session_id, scopes=scopes, cwd=Path.cwd())
        cfg = load_config(config_path, socket=socket_path)
    except BindingError as exc:
        raise click.UsageError(str(exc)) from exc
    except MemorydError as exc:
        click.echo(f"Error: {exc.message}", err=True)
        sys.exit(EXIT_ERROR)
    if sys.stdin.isatty():
        click.echo("memoryd mcp speaks MCP on stdin/stdout and is started by an editor; to set one up run "
                   "`memoryd mcp install --client NAME` (Ctrl-C to stop).", err=True)
    from memoryd.editors.mcp import handshake as mcp_handshake

    try:
        mcp_handshake.serve(binding, cfg)
    except KeyboardInterrupt:  # Ctrl-C when run by hand
        sys.exit(130)


def _editor_options(fn: Any) -> Any:
    """The options `config` and `install` share."""
    options = [
        click.option("--client", "client_name", required=True, type=click.Choice(CLIENT_NAMES),
                     help="The editor or agent to configure."),
        click.option("--project-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="Use the client's project-level file in this directory."),
        click.option("--agent-id", default=None,
                     help="Agent id the bridge acts for (default: the client's name)."),
        click.option("--project", default=None,
                     help="Project name (default: the project dir's name for a project file, else auto)."),
        click.option("--scopes", default=None, help="Scopes the tools may use (default agent,project,user)."),
        click.option("--socket", "socket_path", default=None, metavar="PATH",
                     help="Agent socket the bridge should use (default: found at run time)."),
        click.option("--name", default="memoryd", show_default=True, help="Server name in the file."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _prepare(client_name: str, project_dir: Path | None, agent_id: str | None, project: str | None,
             scopes: str | None, socket_path: str | None) -> tuple[Any, Path, str, dict[str, Any]]:
    from memoryd.editors.mcp.config import CLIENTS, server_entry
    from memoryd.editors.project import project_key

    client = CLIENTS[client_name]
    project_dir = project_dir.expanduser().absolute() if project_dir is not None else None
    path, level = client.target(project_dir, home=Path.home(), cwd=Path.cwd())
    if project is None:
        # A project-level file belongs to one project: name it now, whatever directory the
        # editor starts the bridge in. A user-level file serves every project: name it at run time.
        project = project_key(project_dir or Path.cwd()) if level == "project" else "auto"
    args = ["--agent-id", agent_id or client_name, "--project", project]
    if scopes:
        args += ["--scopes", scopes]
    if socket_path:
        args += ["--socket", str(Path(socket_path).expanduser().absolute())]
    return client, path, level, server_entry(client, args)


@mcp.command("config")
@_editor_options
def config_cmd(client_name: str, project_dir: Path | None, agent_id: str | None, project: str | None,
               scopes: str | None, socket_path: str | None, name: str, as_json: bool) -> None:
    """Print the configuration snippet for one editor (nothing is written).

    \b
    Example:
      memoryd mcp config --client cursor
      memoryd mcp config --client codex >> ~/.codex/config.toml
    """
    from memoryd.editors.mcp.config import ConfigFileProblem, check_name, snippet

    client, path, level, entry = _prepare(client_name, project_dir, agent_id, project, scopes, socket_path)
    try:
        check_name(name)
    except ConfigFileProblem as exc:
        raise click.BadParameter(str(exc), param_hint="--name") from exc
    text = snippet(client, name, entry)
    if as_json:
        click.echo(json.dumps({"client": client.name, "path": str(path), "level": level,
                               "format": "toml" if client.toml else "json", "name": name,
                               "entry": entry, "snippet": text}, indent=2))
        return
    click.echo(f"# {client.label}: {path} ({level} level)", err=True)
    click.echo(text, nl=False)


@mcp.command("install")
@_editor_options
@click.option("--dry-run", is_flag=True, help="Show the diff and change nothing.")
def install_cmd(client_name: str, project_dir: Path | None, agent_id: str | None, project: str | None,
                scopes: str | None, socket_path: str | None, name: str, as_json: bool, dry_run: bool) -> None:
    """Add the bridge to one editor's config file, keeping every other server.

    The old file is kept as FILE.memoryd-backup-TIME; an unchanged file is not
    touched. With --dry-run the diff is printed and nothing is written.

    \b
    Example:
      memoryd mcp install --client claude-code --project-dir ~/src/api --dry-run
      memoryd mcp install --client codex
    """
    from memoryd.editors.mcp.config import ConfigFileProblem, apply, plan

    client, path, level, entry = _prepare(client_name, project_dir, agent_id, project, scopes, socket_path)
    try:
        install = plan(client, path, level, name, entry)
    except ConfigFileProblem as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    backup = None if dry_run else apply(install)
    if as_json:
        click.echo(json.dumps({"client": client.name, "path": str(path), "level": level, "name": name,
                               "changed": install.changed, "written": install.changed and not dry_run,
                               "backup": str(backup) if backup else None, "diff": install.diff()}, indent=2))
        return
    if dry_run:
        diff = install.diff()
        if diff:
            click.echo(diff, nl=False)
            click.echo("(dry run: nothing was written)", err=True)
        else:
            click.echo(f"{path} already has this configuration; nothing would change")
        return
    if not install.changed:
        click.echo(f"{path} already has this configuration; nothing changed")
        return
    click.echo(f"{client.label}: wrote server {name!r} to {path}"
               + (f" (backup of the old file: {backup})" if backup else " (new file)"))
    click.echo(f"Restart {client.label} (or reload its MCP servers) to pick it up; "
               "memoryd must be running: `memoryd run` or `memoryd service install`.")
