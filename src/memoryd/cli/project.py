"""``memoryd project``: the project key a directory maps to, and adopting old project rows.

Since protocol 1.2, ``--project auto`` (the MCP bridge) and capture key a
project by its repository's identity (docs/projects.md). ``memoryd project
key`` shows the key for a directory; ``memoryd project adopt OLD`` moves the
rows a store written before 1.2 holds under a folder name to that key (the
operator socket's ``project.adopt``). Nothing does this by itself: any
repository with that folder name could otherwise take the rows over.
"""

from __future__ import annotations

from pathlib import Path

import click

from memoryd.cli.common import call, client_options, print_json
from memoryd.config import Config


@click.group("project")
def project() -> None:
    """Project keys: show one, adopt rows written under a folder name (operator socket)."""


@project.command("key")
@click.argument("path", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print key and name as JSON.")
def key_cmd(path: Path | None, as_json: bool) -> None:
    """Print the project key `--project auto` and capture use for PATH (default: here).

    \b
    Example:
      memoryd project key ~/src/api
    """
    from memoryd.editors.project import project_of

    found = project_of(path or Path.cwd())
    if as_json:
        print_json({"key": found.key, "name": found.name})
    else:
        click.echo(found.key)


@project.command("adopt")
@click.argument("old")
@click.option("--cwd", "cwd", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="A checkout of the repository whose key the rows move to (default: here).")
@click.option("--to", "to_key", default=None, metavar="KEY",
              help="Move the rows to this key instead of the one --cwd gives.")
@client_options
def adopt_cmd(cfg: Config, as_json: bool, old: str, cwd: Path | None, to_key: str | None) -> None:
    """Move the rows of project OLD (a folder name from before protocol 1.2) to a checkout's key.

    Every memory whose project is OLD, and the project's tombstones,
    idempotency keys and entities, are rewritten to the key of the repository
    at --cwd, in batches, with an audit event per batch. Run it once per
    repository, from the checkout that wrote the rows: two repositories that
    shared the folder name shared OLD too, and only you know whose rows they are.

    \b
    Example:
      memoryd project adopt api --cwd ~/src/client-api
    """
    if to_key is not None and cwd is not None:
        raise click.UsageError("give --cwd or --to, not both")
    if to_key is None:
        from memoryd.editors.project import project_key

        to_key = project_key(cwd or Path.cwd())
    result = call(cfg, "project.adopt", {"from": old, "to": to_key}, admin=True)
    if as_json:
        print_json(result)
        return
    click.echo(f"project {old!r} -> {to_key!r}: {result['memories']} memories, "
               f"{result['tombstones']} tombstones, {result['idempotency_keys']} idempotency keys, "
               f"{result['entities']} entities moved in {result['batches']} batch(es)")
