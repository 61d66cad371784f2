"""The CLI's commands, options and help texts are those recorded before the CLI became a
package (issue 25): a refactor that moves commands between modules changes none of them.

Regenerate help_recorded.json only for an intended change of a command's interface:
    .venv/bin/python -m tests.cli.test_help_unchanged > tests/cli/help_recorded.json
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from click.testing import CliRunner

from memoryd.cli import main

RECORDED = Path(__file__).with_name("help_recorded.json")


def every_help() -> dict[str, str]:
    """``memoryd … --help`` of every command and group, at a fixed width of 80 columns."""
    found: dict[str, str] = {}

    def walk(command: click.Command, path: list[str]) -> None:
        result = CliRunner().invoke(main, [*path, "--help"], prog_name="memoryd", terminal_width=80)
        assert result.exit_code == 0, (path, result.output)
        found[" ".join(["memoryd", *path])] = result.output
        if isinstance(command, click.Group):
            for name in sorted(command.commands):
                walk(command.commands[name], [*path, name])

    walk(main, [])
    return found


def test_every_command_and_its_help_is_as_recorded() -> None:
    recorded = json.loads(RECORDED.read_text())
    now = every_help()
    assert sorted(now) == sorted(recorded), "commands were added or removed"
    changed = [name for name in recorded if now[name] != recorded[name]]
    assert not changed, f"help changed for: {changed}"


if __name__ == "__main__":
    print(json.dumps(every_help(), indent=1, sort_keys=True))  # noqa: T201 - regenerates the record
