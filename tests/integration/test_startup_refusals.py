"""What ``memoryd run`` refuses at start (exit 2), and the models it starts without.

A bad config and a database from a newer memoryd stop the start with exit
code 2 and a message saying what to do, and change nothing. A model that
cannot be used does not stop it: the daemon serves, the model's passes wait
with their jobs kept, and ``daemon.status`` / ``memoryd status`` say why
(degraded, exit 1).
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import DaemonHandle, run_cli, wait_until

EXIT_DEGRADED, EXIT_REFUSED = 1, 2

BAD_CONFIGS = {
    "not-toml": ("max_connections = = 3\n", "is not valid TOML"),
    "out-of-range": ("max_connections = 0\n", "'max_connections' must be at least 1"),
    "unknown-key": ("max_conections = 3\n", "max_conections"),
    "wrong-type": ('max_connections = "many"\n', "max_connections"),
}


def assert_nothing_created(daemon: DaemonHandle) -> None:
    assert not daemon.socket.exists(), "a refused start must not bind the socket"
    if daemon.db_url is None:
        assert not daemon.db_path.exists(), "a refused start must not create the database"
    else:  # the test's fresh database exists; a refused start must not create a table in it
        assert daemon.query("SELECT table_name FROM information_schema.tables "
                            "WHERE table_schema = 'public'") == [], "a refused start must not migrate"


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
@pytest.mark.parametrize("given_by", ["--config", "MEMORYD_CONFIG"])
def test_bad_config_stops_the_start_with_exit_2_and_creates_nothing(
        start_daemon: Callable[..., DaemonHandle], case: str, given_by: str) -> None:
    text, named = BAD_CONFIGS[case]
    daemon = start_daemon(f"bad-{case}", start=False)
    path = daemon.home / "bad.toml"
    path.write_text(text, encoding="utf-8")
    if given_by == "--config":
        daemon.config_path = path
    else:
        daemon.env["MEMORYD_CONFIG"] = str(path)
    assert daemon.run_to_exit() == EXIT_REFUSED, daemon.stderr_tail()
    stderr = daemon.stderr_text()
    assert named in stderr and str(path) in stderr  # the key (or the syntax) and the file
    assert "Traceback" not in stderr
    assert_nothing_created(daemon)


def test_bad_option_value_stops_the_start_with_exit_2(start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon("bad-flag", start=False)
    daemon.extra_args = ["--log-format", "yaml"]
    assert daemon.run_to_exit() == EXIT_REFUSED
    assert "log_format" in daemon.stderr_text() and "--log-format" in daemon.stderr_text()
    assert_nothing_created(daemon)


@pytest.mark.sqlite_only("hashes the SQLite file to show it untouched; its PostgreSQL twin is "
                         "tests/integration/test_startup_refusals_pg.py")
def test_a_database_from_a_newer_memoryd_is_refused_with_exit_2_and_left_untouched(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon("future")
    kept = daemon.write("The schema test row")["id"]
    assert daemon.stop() == 0
    head = daemon.scalar("SELECT version_num FROM alembic_version")
    with daemon.db() as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_a_newer_memoryd'")
    digest = hashlib.sha256(daemon.db_path.read_bytes()).hexdigest()

    assert daemon.run_to_exit() == EXIT_REFUSED
    stderr = daemon.stderr_text()
    assert "'9999_from_a_newer_memoryd', newer than this memoryd" in stderr
    assert "upgrade memoryd" in stderr and "Traceback" not in stderr
    assert not daemon.socket.exists()
    assert hashlib.sha256(daemon.db_path.read_bytes()).hexdigest() == digest  # not migrated, not written
    assert daemon.scalar("SELECT version_num FROM alembic_version") == "9999_from_a_newer_memoryd"

    # Positive control: stamped back to the revision this memoryd wrote, the same file starts.
    with daemon.db() as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (head,))
    daemon.expect_clean_exit = True
    daemon.start()
    assert daemon.call("memory.get", {"id": kept})["content"] == "The schema test row"


# -- models that cannot be used ------------------------------------------------------------------

def status_of(daemon: DaemonHandle) -> dict[str, Any]:
    result: dict[str, Any] = daemon.call("daemon.status")
    return result


def cli_status(daemon: DaemonHandle) -> tuple[int, dict[str, Any], str]:
    """``memoryd status`` (exit code, its --json result, its text)."""
    as_json = run_cli(["status", "--json", "--socket", str(daemon.socket)], daemon.env)
    text = run_cli(["status", "--socket", str(daemon.socket)], {**daemon.env, "COLUMNS": "250"})
    assert as_json.returncode == text.returncode, (as_json.stderr, text.stderr)
    return text.returncode, json.loads(as_json.stdout), text.stdout


def free_port() -> int:
    """A TCP port on localhost where nothing listens (bound once, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.slow
def test_llm_url_with_nothing_listening_leaves_its_passes_waiting_and_status_says_why(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    """The LLM is first tried by the extract pass, which also needs the embedder: with
    ``--embedder none`` it never runs, so this daemon has the bundled one (its model worker
    loads in the background; the extract pass does not wait for it to try the LLM)."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    daemon = start_daemon("llm-url", start=False, embedder="bundled")
    daemon.extra_args = ["--llm", url]
    daemon.start()
    code, status, _ = cli_status(daemon)
    assert (code, status["health"]) == (0, "healthy")  # not tried yet: nothing has needed it
    memory_id = daemon.write("The staging database is Postgres 15 on db1:5432")["id"]

    # The models' fields are read before the passes' in one status call: the snapshot in which the
    # pass first reads paused can predate the load error by the time between the two reads.
    status = wait_until(lambda: (s := status_of(daemon))["passes"]["extract"]["state"] == "paused"
                        and s["models"]["llm"]["error"] is not None and s,
                        timeout_s=60, message="the extract pass to find the LLM away")
    reason = status["passes"]["extract"]["reason"]
    assert reason.startswith("LLM failed to load: ") and f"the LLM server at {url} does not answer" in reason
    assert status["passes"]["reflect"]["state"] == "paused"
    assert status["models"]["llm"]["enabled"] is True and status["models"]["llm"]["loaded"] is False
    assert url in status["models"]["llm"]["error"]
    # The job waits: not charged an attempt, not dead.
    assert "extract" in daemon.call("memory.get", {"id": memory_id})["pending"]
    [(state, attempts)] = daemon.query(
        "SELECT state, attempts FROM jobs WHERE pass = 'extract' AND target = ?", (memory_id,))
    assert (state, attempts) == ("ready", 0)

    code, status, text = cli_status(daemon)
    assert code == EXIT_DEGRADED, text
    assert status["health"] == "degraded"
    assert any(p.startswith("model llm failed to load: ") and url in p for p in status["problems"])
    assert "degraded" in text.splitlines()[0] and f"the LLM server at {url} does not answer" in text
    # Writes and searches go on meanwhile.
    daemon.write("Writes do not wait for the LLM")
    found = daemon.call("memory.search", {"query": "Postgres staging", "agent_id": "agent-a",
                                          "mode": "lexical"})["results"]
    assert [r["id"] for r in found] == [memory_id]


def broken_model_dir(root: Path) -> Path:
    """A directory that looks like a model and cannot be loaded (its config.json names no model type)."""
    path = root / "not-a-model"
    path.mkdir()
    (path / "config.json").write_text('{"hidden_size": 384}', encoding="utf-8")
    (path / "modules.json").write_text("[]", encoding="utf-8")
    return path


@pytest.mark.slow
def test_embedder_path_that_fails_to_load_keeps_the_daemon_serving_degraded_with_the_reason(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path) -> None:
    model = broken_model_dir(short_tmp)
    daemon = start_daemon("bad-embedder", embedder=str(model))
    memory_id = daemon.write("Deploys go out on Tuesdays")["id"]  # an embed job makes it load

    status = wait_until(lambda: (s := status_of(daemon))["models"]["embedder"]["error"] and s,
                        timeout_s=600, interval_s=0.5, message="the embedder's load to fail")
    error = status["models"]["embedder"]["error"]
    assert status["models"]["embedder"]["loaded"] is False
    assert status["passes"]["embed"]["state"] == "paused"
    assert status["passes"]["embed"]["reason"].startswith("embedder failed to load: ")
    assert status["queues"]["embed"]["dead"] == 0
    assert daemon.call("memory.get", {"id": memory_id})["pending"][0] == "embed"  # the job waits

    code, status, text = cli_status(daemon)
    assert code == EXIT_DEGRADED, text
    assert status["health"] == "degraded"
    assert f"model embedder failed to load: {error}" in status["problems"]
    # A search says why the vector leg is missing, with the documented wording.
    result = daemon.call("memory.search", {"query": "when do deploys go out", "agent_id": "agent-a"})
    assert result["mode_used"] == "lexical"
    notice = f"vector leg skipped (embedder failed to load: {error}); results are lexical only"
    assert notice in result["notices"]
    assert [r["id"] for r in result["results"]] == [memory_id]
