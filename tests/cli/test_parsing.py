"""Command-line parsing alone (click's CliRunner): bad usage exits 2 before any socket is opened.

The environment names a socket where nothing listens, so a command that got
past its own checks would exit 3 (not running) instead of 2: the exit code
proves the refusal happened in parsing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from memoryd.cli import main

USAGE = [
    pytest.param(["forget"], "give a MEMORY_ID or --subject FIELD=VALUE", id="forget-nothing"),
    pytest.param(["forget", "mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB", "--subject", "user_id=a"],
                 "give a MEMORY_ID or --subject FIELD=VALUE", id="forget-both"),
    pytest.param(["forget", "--subject", "alice"], "use FIELD=VALUE", id="forget-subject-without-value"),
    pytest.param(["queue", "retry"], "name job ids, --pass NAME, or --all", id="retry-nothing"),
    pytest.param(["queue", "retry", "seven"], "'seven' is not a valid integer", id="retry-job-id-not-int"),
    pytest.param(["write", "--agent-id", "a", "--metadata", "{not json", "text"], "not JSON",
                 id="write-metadata-not-json"),
    pytest.param(["write", "--agent-id", "a", "--scope", "team", "text"], "'team' is not one of",
                 id="write-unknown-scope"),
    pytest.param(["write", "--agent-id", "a", "--importance", "high", "text"], "'high' is not a valid float",
                 id="write-importance-not-a-number"),
    pytest.param(["search", "-k", "ten", "query"], "'ten' is not a valid integer", id="search-k-not-int"),
    pytest.param(["search", "--mode", "fuzzy", "query"], "'fuzzy' is not one of", id="search-unknown-mode"),
    pytest.param(["get", "mem_x", "--include", "everything"], "'everything' is not one of",
                 id="get-unknown-include"),
    pytest.param(["queue", "list", "--state", "stuck"], "'stuck' is not one of", id="queue-unknown-state"),
    pytest.param(["write"], "Missing argument 'CONTENT'", id="write-no-content"),
    pytest.param(["status", "--frobnicate"], "No such option '--frobnicate'", id="unknown-option"),
]


@pytest.fixture
def runner(tmp_path: Path) -> CliRunner:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "MEMORYD_SOCKET": str(tmp_path / "nothing-listens-here.sock"), "MEMORYD_CONFIG": None,
           "MEMORYD_AGENT_ID": None, "MEMORYD_USER_ID": None, "MEMORYD_PROJECT": None,
           "MEMORYD_SESSION_ID": None, "MEMORYD_ADMIN_SOCKET": None}
    return CliRunner(env=env)


@pytest.mark.parametrize(("args", "message"), USAGE)
def test_bad_usage_exits_2_with_the_reason_before_any_call(runner: CliRunner, args: list[str],
                                                           message: str) -> None:
    result = runner.invoke(main, args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_well_formed_command_gets_past_parsing_to_the_socket(runner: CliRunner) -> None:
    """Positive control for the fixture: a valid command reaches the (absent) daemon and exits 3."""
    result = runner.invoke(main, ["write", "--agent-id", "a", "--metadata", '{"k": 1}', "text"])
    assert result.exit_code == 3, result.output
    assert "memoryd is not running" in result.output


def test_version_is_printed_with_the_program_name(runner: CliRunner) -> None:
    result = runner.invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("memoryd, version ")
