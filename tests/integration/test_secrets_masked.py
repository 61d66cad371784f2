"""PROTOCOL.md 1.2 "Secrets": no answer, log line or process command line carries a password or
token from a configured URL.

A real daemon is given an LLM URL with credentials (``http://user:TOKEN@127.0.0.1:PORT/v1``)
and, on PostgreSQL, a store URL with a password both in its user information and as a libpq
``?password=`` (the embedded server trusts local connections, so it ignores them). Both come
through the environment, as a service file gives them, so that the daemon's own command line
holds neither. Then every place the daemon shows or logs text is searched for the secrets:
daemon.status on the agent and the operator socket, ``memoryd status --json``, the MCP
``memory_status`` tool of a real ``memoryd mcp``, the daemon's log (its stderr, where the model
worker logs too), ``jobs.last_error``, and ``/proc/PID/cmdline`` of the daemon and its worker.

The LLM is a small HTTP server in the test, on loopback. It checks the credentials (sent as
HTTP Basic authentication: the positive control that the URL was used, not just hidden), and
answers every completion with a 500 whose reason phrase quotes the URL with its token, as a
proxy naming its upstream might: the extract pass fails with that text, and it is stored.
The fast test runs without an embedder (the LLM passes then wait, and only status shows the
LLM's spec); the slow one runs the bundled embedder, so extract reaches the LLM and fails.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.editors.mcp_harness import bridge, call, ok, text_of
from tests.integration.harness import DaemonHandle, hermetic_env, wait_until

TOKEN = "llmtok-7d1e2b90c4"
PG_PASSWORD = "pgpw-5c8a1f37e2"
PG_QUERY_PASSWORD = "pgqpw-93e0d4a6b1"
SECRETS = (TOKEN, PG_PASSWORD, PG_QUERY_PASSWORD)
MEMORYD = Path(sys.executable).with_name("memoryd")


@dataclass
class LLMServer:
    """The loopback OpenAI-compatible stand-in (see the module docstring)."""

    port: int
    authorized: int = 0
    refused: int = 0

    @property
    def url(self) -> str:
        return f"http://user:{TOKEN}@127.0.0.1:{self.port}/v1"

    @property
    def shown(self) -> str:
        return f"http://user:***@127.0.0.1:{self.port}/v1"


@pytest.fixture
def llm_server() -> Iterator[LLMServer]:
    expected = "Basic " + base64.b64encode(f"user:{TOKEN}".encode()).decode()
    state = LLMServer(port=0)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            if self.headers.get("Authorization") != expected:
                state.refused += 1
                self.send_response(401)
                self.end_headers()
                return
            state.authorized += 1
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if self.command == "GET":
                body = json.dumps({"object": "list", "data": [{"id": "default"}]}).encode()
                self.send_response(200)
            else:
                body = json.dumps({"error": f"upstream {state.url} refused"}).encode()
                self.send_response(500, f"upstream {state.url} refused")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, name="llm-stand-in", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def secret_store_url(plain: str) -> str:
    """The embedded server's ``postgresql+psycopg://postgres@/db?host=…`` with both passwords."""
    assert plain.startswith("postgresql+psycopg://postgres@/") and "?" in plain, plain
    return (plain.replace("postgres@/", f"postgres:{PG_PASSWORD}@/", 1)
            + f"&password={PG_QUERY_PASSWORD}")


def start_with_secrets(start_daemon: Callable[..., DaemonHandle], new_db_url: Callable[[], str | None],
                       llm_url: str, *, embedder: str, config: dict[str, Any] | None = None) -> DaemonHandle:
    env = {"MEMORYD_LLM": llm_url}
    plain = new_db_url()
    store = secret_store_url(plain) if plain else None
    if store:
        env["MEMORYD_DB_URL"] = store
    d = start_daemon(start=False, embedder=embedder, env=env, db_url=None, config=config)
    d.llm = None  # no --llm flag: MEMORYD_LLM decides, as a service's environment file would
    d.start()
    # For the test's own reads of the store (the daemon was started without --db-url).
    d.db_url = store
    return d


def leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def mcp_status(d: DaemonHandle) -> str:
    async def body() -> str:
        async with bridge(d.socket, d.home, "--agent-id", "agent-s", "--project", "p") as session:
            answer = await call(session, "memory_status")
            return json.dumps(ok(answer)) + text_of(answer)

    return asyncio.run(body())


def cli_status(d: DaemonHandle) -> str:
    proc = subprocess.run([str(MEMORYD), "status", "--json"], capture_output=True, text=True, timeout=60,
                          env=hermetic_env(d.home, {"MEMORYD_SOCKET": str(d.socket)}),
                          stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode in (0, 1), proc.stderr  # 1: degraded
    return proc.stdout + proc.stderr


def assert_nothing_leaks(d: DaemonHandle, backend: str) -> dict[str, Any]:
    """Search every place (module docstring) for the secrets; returns the agent's daemon.status."""
    agent = d.call("daemon.status")
    operator = d.call("daemon.status", admin=True)
    places = {
        "daemon.status (agent socket)": json.dumps(agent),
        "daemon.status (operator socket)": json.dumps(operator),
        "memoryd status --json": cli_status(d),
        "MCP memory_status": mcp_status(d),
        "daemon log": d.stderr_text(),
        "jobs.last_error": json.dumps([r[0] for r in d.query("SELECT last_error FROM jobs")]),
        "daemon command line": cmdline(d.proc.pid) if d.proc else "",
    }
    worker_pid = agent["models"]["embedder"].get("worker_pid")
    if worker_pid:
        places["worker command line"] = cmdline(worker_pid)
    found = {place: leaks(text) for place, text in places.items()}
    assert not any(found.values()), "secrets shown: " + "; ".join(
        f"{place}: {', '.join(secrets)}" for place, secrets in found.items() if secrets)
    # Positive controls: the secrets were configured and are shown masked, not dropped.
    if backend == "postgres":
        assert "postgres:***@/" in agent["db"]["url"] and "password=***" in agent["db"]["url"], agent["db"]
    return agent


def test_status_tools_logs_and_command_lines_carry_no_secret_of_a_configured_url(
        start_daemon: Callable[..., DaemonHandle], new_db_url: Callable[[], str | None], backend: str,
        llm_server: LLMServer) -> None:
    d = start_with_secrets(start_daemon, new_db_url, llm_server.url, embedder="none")
    d.write("The staging cluster is called blue-heron.")
    status = assert_nothing_leaks(d, backend)
    assert status["models"]["llm"]["spec"] == llm_server.shown
    assert status["models"]["llm"]["enabled"] is True
    assert llm_server.url not in json.dumps(status)


@pytest.mark.slow
def test_a_failing_llm_whose_error_quotes_its_url_leaves_no_secret_in_jobs_status_logs_or_ps(
        start_daemon: Callable[..., DaemonHandle], new_db_url: Callable[[], str | None], backend: str,
        llm_server: LLMServer) -> None:
    d = start_with_secrets(start_daemon, new_db_url, llm_server.url, embedder="bundled",
                           config={"job_max_attempts": 1})
    d.write("Prod runs Redis 7 on cache1; staging is still on Redis 6.")

    def failed_extract() -> list[str]:
        rows = d.query("SELECT last_error FROM jobs WHERE pass = 'extract' AND last_error IS NOT NULL")
        return [r[0] for r in rows]

    def extract_paused() -> bool:
        entry = d.call("daemon.status")["passes"]["extract"]
        return entry["state"] == "paused" and bool(entry["last_error"])

    # Either extract failed on the LLM, or it waits for it (as it did when urllib took the
    # URL's user:token@ for a host name): whichever comes first, nothing may leak by then.
    wait_until(lambda: failed_extract() or extract_paused(), timeout_s=240, interval_s=0.5,
               message="extract to reach the LLM")
    assert_nothing_leaks(d, backend)
    errors = wait_until(failed_extract, timeout_s=240, interval_s=0.5, message="extract to fail on the LLM")
    # The server's reason phrase reached the stored error, its URL masked.
    assert any("HTTP Error 500" in e and llm_server.shown in e for e in errors), errors
    assert llm_server.authorized >= 2 and llm_server.refused == 0  # /v1/models, then a completion
    status = assert_nothing_leaks(d, backend)
    assert llm_server.shown in (status["passes"]["extract"]["last_error"] or ""), status["passes"]["extract"]
    worker_pid = status["models"]["embedder"]["worker_pid"]
    # Positive control: the worker's command line was read (it runs while the embedder is loaded).
    assert worker_pid and "memoryd.models.worker --fd" in cmdline(worker_pid)


def test_doctors_llm_probe_gets_the_url_by_its_environment_and_shows_it_masked(
        llm_server: LLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memoryd import doctor
    from memoryd.config import Config

    command_lines: list[str] = []
    real_run = subprocess.run

    def run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        command_lines.append(" ".join(args))  # what ps shows while the probe runs
        return real_run(args, **kwargs)

    monkeypatch.setattr(doctor.subprocess, "run", run)
    finding = doctor.check_llm(Config(data_dir=str(tmp_path)), llm_server.url)
    assert len(command_lines) == 1 and "build_llm" in command_lines[0]
    assert not leaks(command_lines[0]), command_lines[0]
    # The probe reached the server with the credentials, and its failure is shown masked.
    assert llm_server.authorized >= 1 and llm_server.refused == 0
    assert finding.level == doctor.FAIL and "HTTP Error 500" in finding.detail, finding
    assert llm_server.shown in finding.detail and not leaks(json.dumps(finding.__dict__)), finding


def test_a_url_with_a_secret_given_as_an_option_is_warned_about_and_still_masked_everywhere_else(
        start_daemon: Callable[..., DaemonHandle], backend: str, llm_server: LLMServer) -> None:
    d = start_daemon(start=False)
    d.llm = llm_server.url  # on the daemon's command line: the caller's choice, warned about
    d.start()
    status = d.call("daemon.status")
    assert status["models"]["llm"]["spec"] == llm_server.shown and not leaks(json.dumps(status))
    events = [json.loads(line) for line in d.stderr_text().splitlines() if line.startswith("{")]
    warned = [e for e in events if e.get("event") == "config.secret_on_command_line"]
    assert [e["option"] for e in warned] == ["--llm"], warned
    assert "MEMORYD_LLM" in warned[0]["fix"]
    log = "\n".join(line for line in d.stderr_text().splitlines() if not line.startswith("--- spawn"))
    assert not leaks(log)


def test_no_warning_without_a_secret_on_the_command_line(start_daemon: Callable[..., DaemonHandle],
                                                         backend: str) -> None:
    d = start_daemon(start=False)
    d.llm = "http://127.0.0.1:9/v1"  # a URL, but nothing secret in it
    d.start()
    assert "config.secret_on_command_line" not in d.stderr_text()
