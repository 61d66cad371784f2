"""The ``memoryd`` group: every command module's commands under one name.

A command module's heavy imports (SQLAlchemy, the models, the MCP SDK) wait
inside its commands, so gathering them here costs the CLI's start nothing.
"""

from __future__ import annotations

import click

from memoryd import __version__
from memoryd.cli import (
    audit,
    capture,
    console,
    daemon,
    data,
    mcp,
    memories,
    project,
    queue,
    reembed,
    review,
    service,
    store,
)


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


for command in (daemon.run, daemon.status, daemon.config_cmd, daemon.doctor,
                memories.write, memories.get, memories.search, memories.forget,
                data.list_cmd, data.export_cmd, data.import_cmd,
                queue.queue, review.review, audit.audit, service.service,
                project.project, store.store, reembed.reembed,
                capture.capture, mcp.mcp, console.console_command):
    main.add_command(command)
