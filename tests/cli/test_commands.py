"""The client commands against a real daemon: owner variables, get, forget, write from stdin, config.

Each command runs as the real ``memoryd`` console script; what it printed is
checked against what the daemon stored (read back over the socket or from
the SQLite file), so a command that prints the right words but does the
wrong thing fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.cli.conftest import Cli
from tests.integration.harness import DaemonHandle, wait_until

EXIT_ERROR = 2
MEMORY_ID = re.compile(r"^(mem_[0-9A-HJKMNP-TV-Z]{26}) queued: ")

#: (scope, the owner flag, its environment variable, the field it fills): README.md's last tour paragraph.
OWNERS = [
    ("agent", "--agent-id", "MEMORYD_AGENT_ID", "agent_id"),
    ("user", "--user-id", "MEMORYD_USER_ID", "user_id"),
    ("project", "--project", "MEMORYD_PROJECT", "project"),
    ("session", "--session-id", "MEMORYD_SESSION_ID", "session_id"),
]


@pytest.fixture
def daemon(module_daemon: DaemonHandle) -> DaemonHandle:
    """One daemon for the module; every test writes its own texts and owners."""
    return module_daemon


def written_id(result: subprocess.CompletedProcess[str]) -> str:
    match = MEMORY_ID.match(result.stdout)
    assert match, f"not a write's answer: {result.stdout!r} {result.stderr!r}"
    return match.group(1)


def get_json(cli: Cli, memory_id: str, *extra: str) -> dict[str, object]:
    shown = cli("get", memory_id, "--json", *extra)
    assert shown.returncode == 0, shown.stderr
    result: dict[str, object] = json.loads(shown.stdout)
    return result


def search_ids(cli: Cli, query: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    shown = cli("search", query, "--mode", "lexical", "--json", *args, env=env)
    assert shown.returncode == 0, shown.stderr
    return [r["id"] for r in json.loads(shown.stdout)["results"]]


# -- owner fields from the environment -------------------------------------------------------------

@pytest.mark.parametrize(("scope", "flag", "variable", "field"), OWNERS, ids=[o[0] for o in OWNERS])
def test_owner_variable_fills_the_owner_field_of_writes_and_opens_the_scope_for_search(
        cli: Cli, scope: str, flag: str, variable: str, field: str) -> None:
    text = f"The {scope} owner comes from {variable} here"
    written = cli("write", "--scope", scope, text, env={variable: f"env-{scope}"})
    memory_id = written_id(written)
    row = get_json(cli, memory_id)
    assert (row["scope"], row[field]) == (scope, f"env-{scope}")

    assert search_ids(cli, text, "--scope", scope, env={variable: f"env-{scope}"}) == [memory_id]
    assert search_ids(cli, text, "--scope", scope, env={variable: "someone-else"}) == []
    # Without the variable the scope's key is missing: no rows, and the write is refused.
    assert search_ids(cli, text, "--scope", scope) == []
    refused = cli("write", "--scope", scope, text + " again")
    assert refused.returncode == EXIT_ERROR
    assert f"[field: {field}]" in refused.stderr and "Error -32602" in refused.stderr


@pytest.mark.parametrize(("scope", "flag", "variable", "field"), OWNERS, ids=[o[0] for o in OWNERS])
def test_owner_flag_wins_over_its_variable(cli: Cli, scope: str, flag: str, variable: str,
                                           field: str) -> None:
    memory_id = written_id(cli("write", "--scope", scope, flag, f"flag-{scope}", f"Flag beats {variable}",
                               env={variable: f"env-{scope}"}))
    assert get_json(cli, memory_id)[field] == f"flag-{scope}"


def test_all_four_variables_are_read_together(cli: Cli) -> None:
    env = {"MEMORYD_AGENT_ID": "ag", "MEMORYD_USER_ID": "us", "MEMORYD_PROJECT": "pr",
           "MEMORYD_SESSION_ID": "se"}
    memory_id = written_id(cli("write", "All four owner fields at once", env=env))
    row = get_json(cli, memory_id)
    assert (row["agent_id"], row["user_id"], row["project"], row["session_id"]) == ("ag", "us", "pr", "se")


# -- write from stdin, get ---------------------------------------------------------------------------

def test_write_dash_reads_the_content_from_stdin(cli: Cli) -> None:
    memory_id = written_id(cli("write", "--project", "api", "--scope", "project", "-",
                               input="Fix flaky upload test by pinning the S3 mock\n"))
    row = get_json(cli, memory_id)
    assert str(row["content"]).strip() == "Fix flaky upload test by pinning the S3 mock"
    assert (row["scope"], row["project"]) == ("project", "api")


def test_get_prints_the_memory_and_its_history(daemon: DaemonHandle, cli: Cli) -> None:
    memory_id = written_id(cli("write", "--agent-id", "a1", "--kind", "decision",
                               "We chose Postgres over MySQL for the ledger"))
    shown = cli("get", memory_id, "--include", "history")
    assert shown.returncode == 0, shown.stderr
    fields = {m.group(1): m.group(2).strip() for m in re.finditer(r"^\s*(\w+)\s+(.*)$", shown.stdout, re.M)}
    assert fields["id"] == memory_id
    assert fields["content"] == "We chose Postgres over MySQL for the ledger"
    assert (fields["kind"], fields["scope"], fields["agent_id"], fields["status"]) == \
        ("decision", "agent", "a1", "active")
    # The history line names the write's audit event and the peer that wrote it (this uid).
    assert re.search(rf"memory\.write\s+by peer:uid={os.getuid()},pid=\d+", shown.stdout), shown.stdout


def test_get_of_an_unknown_id_exits_2_with_not_found(cli: Cli) -> None:
    shown = cli("get", "mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB")
    assert shown.returncode == EXIT_ERROR
    assert shown.stderr.startswith("Error 1002: ") and "[field: id]" in shown.stderr
    assert shown.stdout == ""


# -- forget --------------------------------------------------------------------------------------------

def test_forget_by_id_marks_the_row_and_tombstones_its_text(daemon: DaemonHandle, cli: Cli) -> None:
    text = "The wifi password of the lab is hunter2"
    memory_id = written_id(cli("write", "--agent-id", "a1", text))
    shown = cli("forget", memory_id, "--reason", "secret")
    assert shown.returncode == 0, shown.stderr
    assert re.fullmatch(r"forget request fgt_[0-9A-HJKMNP-TV-Z]{26}: 1 memory\(ies\) now deleting\n",
                        shown.stdout), shown.stdout
    row = get_json(cli, memory_id)
    assert row["status"] in ("deleting", "forgotten")
    # The retention pass erases it: content gone from the answer and the file.
    wait_until(lambda: get_json(cli, memory_id)["status"] == "forgotten", timeout_s=60,
               message="the retention pass to erase the forgotten row")
    assert get_json(cli, memory_id)["content"] is None
    assert daemon.count_content(text) == 0
    again = cli("write", "--agent-id", "a1", text)
    assert again.returncode == EXIT_ERROR
    assert again.stderr.startswith("Error 1006: ") and "[field: content]" in again.stderr
    assert daemon.count_content(text) == 0


def test_forget_with_no_tombstone_lets_the_text_be_written_again(cli: Cli) -> None:
    text = "The release branch is cut on Thursdays"
    memory_id = written_id(cli("write", "--agent-id", "a1", text))
    assert cli("forget", memory_id, "--no-tombstone").returncode == 0
    rewritten = written_id(cli("write", "--agent-id", "a1", text))
    assert rewritten != memory_id


def test_forget_by_subject_forgets_that_owners_rows_in_every_scope_only(daemon: DaemonHandle,
                                                                        cli: Cli) -> None:
    alice = [written_id(cli("write", "--scope", "user", "--user-id", "alice", "Alice prefers tabs")),
             written_id(cli("write", "--agent-id", "a9", "--user-id", "alice", "Alice's agent note"))]
    bob = written_id(cli("write", "--scope", "user", "--user-id", "bob", "Bob prefers spaces"))
    shown = cli("forget", "--subject", "user_id=alice")
    assert shown.returncode == 0, shown.stderr
    assert re.search(r": 2 memory\(ies\) now deleting$", shown.stdout.strip()), shown.stdout
    for memory_id in alice:
        assert get_json(cli, memory_id)["status"] in ("deleting", "forgotten")
    assert get_json(cli, bob)["status"] == "active"


def test_forget_of_an_unknown_id_exits_2(cli: Cli) -> None:
    shown = cli("forget", "mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB")
    assert shown.returncode == EXIT_ERROR and shown.stderr.startswith("Error 1002: ")


# -- config ---------------------------------------------------------------------------------------------

#: Defaults stated in docs/protocol.md (the connection and framing limits, the idempotency window).
DOCUMENTED_DEFAULTS = {"max_connections": 256, "max_inflight_per_connection": 64,
                       "max_frame_bytes": 1024 * 1024, "max_content_bytes": 65536,
                       "idempotency_ttl_s": 172800, "retention_interval_s": 600}


def test_config_prints_a_toml_file_of_every_default_that_loads_back(cli: Cli, short_tmp: Path) -> None:
    shown = cli("config")
    assert shown.returncode == 0, shown.stderr
    values = tomllib.loads(shown.stdout)
    for key, value in DOCUMENTED_DEFAULTS.items():
        assert values[key] == value, key
    # The docstring's use: `memoryd config > config.toml` gives a file memoryd accepts as is.
    saved = short_tmp / "config.toml"
    saved.write_text(shown.stdout, encoding="utf-8")
    # (An empty MEMORYD_SOCKET counts as unset, so the file's own socket value shows.)
    effective = cli("config", "--config", str(saved), "--json", env={"MEMORYD_SOCKET": ""})
    assert effective.returncode == 0, effective.stderr
    assert json.loads(effective.stdout) == values
    assert cli("status", "--config", str(saved)).returncode == 0


def test_config_with_a_file_shows_the_files_values(cli: Cli, short_tmp: Path) -> None:
    path = short_tmp / "mine.toml"
    path.write_text("max_connections = 8\nkinds = [\"fact\", \"todo\"]\n", encoding="utf-8")
    effective = json.loads(cli("config", "--config", str(path), "--json").stdout)
    assert effective["max_connections"] == 8 and effective["kinds"] == ["fact", "todo"]
    assert effective["max_frame_bytes"] == DOCUMENTED_DEFAULTS["max_frame_bytes"]  # the rest: defaults


def test_config_with_a_bad_file_exits_2(cli: Cli, short_tmp: Path) -> None:
    path = short_tmp / "bad.toml"
    path.write_text("idempotency_ttl_s = 60\n", encoding="utf-8")  # the config refuses less than 24 h
    shown = cli("config", "--config", str(path))
    assert shown.returncode == EXIT_ERROR
    assert "idempotency_ttl_s" in shown.stderr and shown.stdout == ""
