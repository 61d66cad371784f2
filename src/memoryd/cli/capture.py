"""``memoryd capture``: conversation capture hooks for editors (Claude Code for now).

The hook itself normally never reaches this module: memoryd's entry point
(memoryd/entry.py) runs it through editors/capture/fast.py without importing
click. This click command is its help text, ``--print-config``, the error for
a mistyped option, and the same run when the CLI is invoked another way
(``memoryd.cli:main``). Only click is imported at module level: the CLI
registers this command on every start.
"""

from __future__ import annotations

import json
import shlex
import sys

import click


@click.group("capture")
def capture() -> None:
    """Capture editor conversations as memories (hook commands)."""


@capture.command("claude-code")
@click.option("--scope", type=click.Choice(["project", "user"]), default="project", show_default=True,
              help="Scope of the captured turns.")
@click.option("--user-id", envvar="MEMORYD_USER_ID", default=None, show_envvar=True,
              help="Owner for --scope user (default: your login name, as `memoryd mcp`).")
@click.option("--socket", "socket_path", default=None, metavar="PATH", help="Agent socket path.")
@click.option("--config", "config_path", default=None, metavar="FILE", help="Config file.")
@click.option("--data-dir", default=None, metavar="DIR",
              help="Data directory for the cursors and the spool (default: the daemon's).")
@click.option("--budget-ms", type=click.IntRange(5, 10_000), default=50, show_default=True,
              help="How long to wait for the daemon before spooling the turns instead.")
@click.option("--print-config", is_flag=True,
              help="Print the hooks block for .claude/settings.json (with this install's paths).")
@click.option("--verbose", is_flag=True, help="Say on stderr what the run did.")
def claude_code(scope: str, user_id: str | None, socket_path: str | None, config_path: str | None,
                data_dir: str | None, budget_ms: int, print_config: bool, verbose: bool) -> None:
    """Claude Code hook: write the conversation's new turns as memories.

    Reads the hook's JSON on stdin (UserPromptSubmit, Stop, SessionEnd), reads
    the transcript's new turns and writes them as `conversation` memories of
    the project named from the hook's cwd (or of the user). Prints nothing on
    stdout and always exits 0; when the daemon is down or slow the turns wait
    in a spool under the data directory until it starts. A turn the daemon
    refuses (--verbose names it) is skipped alone; the others are written.

    Only a regular file inside Claude Code's transcript folder is read
    ($CLAUDE_CONFIG_DIR/projects, by default ~/.claude/projects; name others,
    separated by ':', in MEMORYD_CAPTURE_TRANSCRIPT_DIRS), a few MiB a run:
    a long transcript is read over the next runs.

    \b
    Example:
      memoryd capture claude-code --print-config   # merge into .claude/settings.json
      echo "$HOOK_JSON" | memoryd capture claude-code --scope user --verbose
    """
    from memoryd.editors.capture import fast as capture_fast
    from memoryd.editors.capture.config import hooks_config, memoryd_command

    if print_config:
        # The resolved paths go into the command: the hook then needs no config lookup at all.
        sock, data = capture_fast.resolve_paths(socket_path, data_dir, config_path)
        command = (f"{memoryd_command()} capture claude-code --socket {shlex.quote(str(sock))} "
                   f"--data-dir {shlex.quote(str(data))}")
        if scope != "project":
            command += f" --scope {scope}"
        if user_id:
            command += f" --user-id {shlex.quote(user_id)}"
        click.echo(json.dumps(hooks_config(command), indent=2))
        return
    opts = {"scope": scope, "user_id": user_id, "socket": socket_path, "config": config_path,
            "data_dir": data_dir, "budget_ms": budget_ms, "verbose": verbose}
    try:
        outcome = capture_fast.run(opts, sys.stdin.buffer.read())
        if verbose:
            click.echo(f"capture: {outcome.action} {outcome.turns} {outcome.detail}".rstrip(), err=True)
    except BaseException as exc:  # a hook must never fail the editor
        click.echo(f"memoryd capture: {type(exc).__name__}: {exc}", err=True)
    sys.exit(0)
