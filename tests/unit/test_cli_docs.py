"""Every CLI command documents itself with an example (after sqlite-utils' tests/test_docs.py)."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from memoryd.cli import main


def walk(command: click.Command,
         path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from walk(sub, (*path, name))


COMMANDS = list(walk(main))
IDS = [" ".join(path) or "memoryd" for path, _ in COMMANDS]


def test_the_cli_has_the_commands_the_protocol_names() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"run", "status", "write", "search", "get", "config"} <= names


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_every_command_has_help_with_an_example(path: tuple[str, ...], command: click.Command) -> None:
    help_text = command.help or ""
    if isinstance(command, click.Group) and path:
        # A subgroup only routes to its commands; a docstring is enough.
        assert help_text.strip(), f"group {' '.join(path)!r} has no docstring"
        return
    assert "Example" in help_text, f"`memoryd {' '.join(path)}` help has no Example section"


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_every_command_answers_help_with_exit_0(path: tuple[str, ...], command: click.Command) -> None:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_top_level_help_exits_0_and_lists_the_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in main.commands:
        assert name in result.output
