"""The bridge driven by an MCP client nobody here wrote: the MCP Inspector's CLI mode.

`@modelcontextprotocol/inspector` (npm; it uses the TypeScript MCP SDK) is
installed once into a cache directory outside the repository and then run as
`mcp-inspector --cli <command> --method ...` against a real `memoryd mcp`
and a real daemon. The test skips, saying so, only when npm cannot fetch it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memoryd.client import Client
from tests.integration.harness import DaemonHandle, hermetic_env

pytestmark = pytest.mark.slow  # an npm install the first time, then a node process per call

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
#: Outside the repository, kept between runs (the install takes a minute).
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memoryd-tests" / "inspector"


@pytest.fixture(scope="module")
def inspector() -> Path:
    """The Inspector's launcher, installed on first use."""
    launcher = CACHE / "node_modules" / ".bin" / "mcp-inspector"
    if launcher.exists():
        return launcher
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("node/npm are not installed, so the MCP Inspector cannot run here")
    CACHE.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["npm", "install", "--prefix", str(CACHE), INSPECTOR, "--no-audit", "--no-fund"],
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0 or not launcher.exists():
        pytest.skip(f"npm could not fetch {INSPECTOR} (exit {done.returncode}): {done.stderr[-500:]}")
    return launcher


#: The Inspector CLI's exit code for a tool result with isError set (it still prints the result).
TOOL_ERROR_EXIT = 5


def inspect(launcher: Path, daemon: DaemonHandle, *args: str, tool_error: bool = False) -> dict[str, Any]:
    """One Inspector CLI run against a fresh `memoryd mcp`; its JSON output."""
    bridge = [sys.executable, "-m", "memoryd", "mcp", "--socket", str(daemon.socket),
              "--agent-id", "inspector", "--user-id", "user-me", "--project", "alpha"]
    done = subprocess.run([str(launcher), "--cli", *bridge, *args], env=hermetic_env(daemon.home),
                          capture_output=True, text=True, timeout=180, check=False)
    expected = TOOL_ERROR_EXIT if tool_error else 0
    assert done.returncode == expected, f"inspector exit {done.returncode}: {done.stdout}\n{done.stderr}"
    output: dict[str, Any] = json.loads(done.stdout)
    return output


def test_inspector_lists_the_tools_and_round_trips_remember_and_recall(
        inspector: Path, module_daemon: DaemonHandle) -> None:
    listed = inspect(inspector, module_daemon, "--method", "tools/list")
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert set(tools) == {"remember", "recall", "get_memory", "update_memory", "forget", "memory_status"}
    assert tools["recall"]["annotations"]["readOnlyHint"] is True
    assert tools["forget"]["annotations"]["destructiveHint"] is True
    assert all("outputSchema" in tool for tool in tools.values())

    content = "The Inspector's round trip: invoices are archived after 7 years"
    written = inspect(inspector, module_daemon, "--method", "tools/call", "--tool-name", "remember",
                      "--tool-arg", f"content={content}")
    assert written["isError"] is False
    memory_id = written["structuredContent"]["id"]

    found = inspect(inspector, module_daemon, "--method", "tools/call", "--tool-name", "recall",
                    "--tool-arg", "query=invoices archived years", "mode=lexical")
    assert found["isError"] is False
    assert [hit["id"] for hit in found["structuredContent"]["results"]] == [memory_id]

    with Client(module_daemon.socket) as client:
        row = client.get(memory_id)
    assert (row.content, row.project, row.agent_id) == (content, "alpha", "inspector")


def test_inspector_sees_tool_errors_for_bad_arguments_and_foreign_ids(
        inspector: Path, module_daemon: DaemonHandle) -> None:
    bad = inspect(inspector, module_daemon, "--method", "tools/call", "--tool-name", "recall",
                  "--tool-arg", "query=x", "k=500", tool_error=True)
    assert bad["isError"] is True and "'k'" in bad["content"][0]["text"]

    with Client(module_daemon.socket) as client:
        foreign = client.write("another agent's private note", agent_id="agent-other").id
    refused = inspect(inspector, module_daemon, "--method", "tools/call", "--tool-name", "get_memory",
                      "--tool-arg", f"id={foreign}", tool_error=True)
    assert refused["isError"] is True and "is visible" in refused["content"][0]["text"]
