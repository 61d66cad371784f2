"""`memoryd mcp config` and `memoryd mcp install` for each supported client.

Each client's file is seeded with another server and unrelated settings, as a
user's real file would be; the install must add ours, keep everything else,
back the old file up, and a dry run must change nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memoryd.cli import main
from tests.integration.harness import hermetic_env

OTHER = {"command": "other-mcp", "args": ["--flag", "x"], "env": {"TOKEN_FILE": "/etc/other"}}
#: client -> (file relative to the project dir or to HOME, where the servers live, level)
CLIENTS: dict[str, tuple[str, str, str]] = {
    "claude-code": (".mcp.json", "mcpServers", "project"),
    "cursor": (".cursor/mcp.json", "mcpServers", "project"),
    "vscode": (".vscode/mcp.json", "servers", "project"),
    "windsurf": (".codeium/windsurf/mcp_config.json", "mcpServers", "user"),
    "zed": (".config/zed/settings.json", "context_servers", "user"),
    "codex": (".codex/config.toml", "mcp_servers", "user"),
    "gemini": (".gemini/settings.json", "mcpServers", "user"),
}
CODEX_TOML = """\
# my Codex settings
model = "o3"  # keep this comment

[mcp_servers.other]
command = "other-mcp"
args = ["--flag", "x"]

[mcp_servers.other.env]
TOKEN_FILE = "/etc/other"

[profiles.fast]
model = "o4-mini"
"""


class Env:
    """A HOME and a project checkout in a temp dir, and the CLI run inside them."""

    def __init__(self, root: Path):
        self.home = root / "home"
        self.project = root / "src" / "webshop"
        (self.project / ".git").mkdir(parents=True)
        self.home.mkdir()

    def path(self, client: str) -> Path:
        rel, _, level = CLIENTS[client]
        return (self.project if level == "project" else self.home) / rel

    def run(self, *args: str) -> Any:
        return CliRunner().invoke(main, ["mcp", *args], env={"HOME": str(self.home)}, catch_exceptions=False)

    def args(self, client: str) -> list[str]:
        return ["--client", client, "--project-dir", str(self.project)] if CLIENTS[client][2] == "project" \
            else ["--client", client]


def seed(env: Env, client: str) -> bytes:
    path = env.path(client)
    path.parent.mkdir(parents=True, exist_ok=True)
    if client == "codex":
        path.write_text(CODEX_TOML, encoding="utf-8")
    else:
        container = CLIENTS[client][1]
        data = {"theme": "dark", container: {"other": OTHER}}
        path.write_text(json.dumps(data, indent=4), encoding="utf-8")
    return path.read_bytes()


def servers(env: Env, client: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the whole parsed file, its server table)."""
    text = env.path(client).read_text(encoding="utf-8")
    data = tomllib.loads(text) if client == "codex" else json.loads(text)
    return data, data[CLIENTS[client][1]]


def backups(env: Env, client: str) -> list[Path]:
    path = env.path(client)
    return sorted(path.parent.glob(f"{path.name}.memoryd-backup-*"))


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    made = Env(tmp_path)
    monkeypatch.chdir(made.project)
    return made


@pytest.mark.parametrize("client", list(CLIENTS))
def test_install_merges_keeps_other_servers_and_backs_up(env: Env, client: str) -> None:
    before = seed(env, client)

    dry = env.run("install", *env.args(client), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "+" in dry.output and "memoryd" in dry.output and str(env.path(client)) in dry.output
    assert env.path(client).read_bytes() == before and backups(env, client) == []  # dry run: nothing

    done = env.run("install", *env.args(client))
    assert done.exit_code == 0, done.output
    data, table = servers(env, client)
    assert table["other"] == OTHER  # the other server is untouched
    if client == "codex":
        assert data["model"] == "o3" and data["profiles"] == {"fast": {"model": "o4-mini"}}
        text = env.path(client).read_text(encoding="utf-8")
        assert "# my Codex settings" in text and "# keep this comment" in text
    else:
        assert data["theme"] == "dark"
    ours = table["memoryd"]
    command = Path(ours["command"])
    assert command.is_absolute() and os.access(command, os.X_OK)
    assert ours["args"][ours["args"].index("mcp"):][:3] == ["mcp", "--agent-id", client]
    # A project file names its project now; a user file serves every project, named at run time.
    project = ours["args"][ours["args"].index("--project") + 1]
    # The key of the checkout (no origin: its real path), never the folder name another shares.
    assert project == (f"path:{env.project.resolve()}" if CLIENTS[client][2] == "project" else "auto")
    [backup] = backups(env, client)
    assert backup.read_bytes() == before

    again = env.run("install", *env.args(client))
    assert again.exit_code == 0 and "nothing changed" in again.output
    assert len(backups(env, client)) == 1  # an unchanged file is not rewritten


@pytest.mark.parametrize("client", list(CLIENTS))
def test_install_creates_a_missing_file_and_config_prints_the_same_entry(env: Env, client: str) -> None:
    printed = env.run("config", *env.args(client), "--json")
    assert printed.exit_code == 0, printed.output
    shown = json.loads(printed.output)
    assert shown["path"] == str(env.path(client))
    assert not env.path(client).exists()  # config writes nothing

    done = env.run("install", *env.args(client))
    assert done.exit_code == 0, done.output
    assert "new file" in done.output and backups(env, client) == []
    assert servers(env, client)[1] == {"memoryd": shown["entry"]}
    # The printed snippet parses to the same entry, in the client's own format.
    snippet = shown["snippet"]
    parsed = tomllib.loads(snippet) if client == "codex" else json.loads(snippet)
    assert parsed[CLIENTS[client][1]]["memoryd"] == shown["entry"]


def test_reinstall_with_other_flags_replaces_our_entry_in_place(env: Env) -> None:
    original = seed(env, "codex")
    assert env.run("install", "--client", "codex").exit_code == 0
    changed = env.run("install", "--client", "codex", "--agent-id", "codex-2", "--scopes", "project")
    assert changed.exit_code == 0, changed.output
    text = env.path("codex").read_text(encoding="utf-8")
    assert text.count("[mcp_servers.memoryd]") == 1
    args = tomllib.loads(text)["mcp_servers"]["memoryd"]["args"]
    expected = ["mcp", "--agent-id", "codex-2", "--project", "auto", "--scopes", "project"]
    assert args[args.index("mcp"):] == expected
    assert len(backups(env, "codex")) == 2
    assert backups(env, "codex")[0].read_bytes() == original  # the first backup is never overwritten


def test_a_json_file_with_comments_is_left_alone_with_the_snippet_to_paste(env: Env) -> None:
    path = env.path("zed")
    path.parent.mkdir(parents=True)
    path.write_text('// Zed settings\n{\n  "theme": "One Dark", // mine\n}\n', encoding="utf-8")
    before = path.read_bytes()
    refused = env.run("install", "--client", "zed")
    assert refused.exit_code == 2
    assert "add this to it by hand" in refused.output and '"context_servers"' in refused.output
    assert path.read_bytes() == before and backups(env, "zed") == []


def test_install_from_the_installed_command(tmp_path: Path) -> None:
    project = tmp_path / "api"
    project.mkdir()
    result = subprocess.run([sys.executable, "-m", "memoryd", "mcp", "install", "--client", "cursor",
                             "--project-dir", str(project), "--json"], env=hermetic_env(tmp_path),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["written"] is True and report["path"] == str(project / ".cursor" / "mcp.json")
    entry = json.loads((project / ".cursor" / "mcp.json").read_text())["mcpServers"]["memoryd"]
    assert entry["args"][entry["args"].index("mcp"):] == ["mcp", "--agent-id", "cursor", "--project",
                                                          f"path:{project.resolve()}"]


def test_an_old_entry_in_the_middle_of_a_toml_file_is_replaced_where_it_stands(env: Env) -> None:
    path = env.path("codex")
    path.parent.mkdir(parents=True)
    path.write_text('model = "o3"\n\n[mcp_servers.memoryd]\ncommand = "/old/memoryd"\nargs = ["mcp"]\n\n'
                    '[mcp_servers.memoryd.env]\nMEMORYD_SOCKET = "/old.sock"\n\n'
                    '# profiles below\n[profiles.fast]\nmodel = "o4-mini"\n', encoding="utf-8")
    assert env.run("install", "--client", "codex").exit_code == 0
    entry = json.loads(env.run("config", "--client", "codex", "--json").output)["entry"]
    args = ", ".join(json.dumps(a) for a in entry["args"])
    command = json.dumps(entry["command"])
    assert path.read_text(encoding="utf-8") == (
        f'model = "o3"\n\n[mcp_servers.memoryd]\ncommand = {command}\nargs = [{args}]\n\n'
        '# profiles below\n[profiles.fast]\nmodel = "o4-mini"\n')
