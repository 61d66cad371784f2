"""Editor configuration for the bridge: each client's file, its snippet, and a safe merge.

Each supported client keeps its MCP servers in a file of its own shape (the
clients' documentation, checked for this release):

=============  ==============================================  =====================
client         file (project / user)                            servers under
=============  ==============================================  =====================
claude-code    ``.mcp.json`` / -                                ``mcpServers``
cursor         ``.cursor/mcp.json`` / ``~/.cursor/mcp.json``    ``mcpServers``
vscode         ``.vscode/mcp.json`` / -                         ``servers``
windsurf       - / ``~/.codeium/windsurf/mcp_config.json``      ``mcpServers``
zed            ``.zed/settings.json`` / ``~/.config/zed/settings.json``  ``context_servers``
codex          ``.codex/config.toml`` / ``~/.codex/config.toml``  ``[mcp_servers.NAME]``
gemini         ``.gemini/settings.json`` / ``~/.gemini/settings.json``  ``mcpServers``
=============  ==============================================  =====================

A merge changes only our server's entry: every other key and server is kept
(checked after the edit, not assumed), TOML files are edited as text so their
comments stay, and a JSON file with comments is left alone with the snippet to
paste by hand, since rewriting it would drop them.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd import privatefs

DEFAULT_NAME = "memoryd"
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ConfigFileProblem(Exception):
    """The client's file cannot be merged safely; the message says what to do instead."""


@dataclass(frozen=True)
class EditorClient:
    """One MCP client: where its config lives and how a server entry looks there."""

    name: str
    label: str
    container: str
    project_file: str | None
    user_file: str | None
    default_level: str
    toml: bool = False
    entry_extra: dict[str, Any] = field(default_factory=dict)

    def target(self, project_dir: Path | None, *, home: Path, cwd: Path) -> tuple[Path, str]:
        """The file to write and its level (``project`` or ``user``).

        ``--project-dir`` picks the project file where the client has one;
        otherwise the client's usual file (project files in the current directory).
        """
        if self.project_file and (project_dir is not None or self.default_level == "project"):
            return (project_dir or cwd) / self.project_file, "project"
        assert self.user_file is not None, f"{self.name} has neither a project nor a user file"
        return home / self.user_file, "user"


CLIENTS: dict[str, EditorClient] = {c.name: c for c in (
    EditorClient("claude-code", "Claude Code", "mcpServers", ".mcp.json", None, "project",
                 entry_extra={"type": "stdio"}),
    EditorClient("cursor", "Cursor", "mcpServers", ".cursor/mcp.json", ".cursor/mcp.json", "project"),
    EditorClient("vscode", "VS Code", "servers", ".vscode/mcp.json", None, "project",
                 entry_extra={"type": "stdio"}),
    EditorClient("windsurf", "Windsurf", "mcpServers", None, ".codeium/windsurf/mcp_config.json", "user"),
    EditorClient("zed", "Zed", "context_servers", ".zed/settings.json", ".config/zed/settings.json", "user"),
    EditorClient("codex", "Codex CLI", "mcp_servers", ".codex/config.toml", ".codex/config.toml", "user",
                 toml=True),
    EditorClient("gemini", "Gemini CLI", "mcpServers", ".gemini/settings.json", ".gemini/settings.json",
                 "user"),
)}


def memoryd_argv() -> list[str]:
    """The absolute command that runs this install's ``memoryd``."""
    beside = Path(sys.executable).parent / "memoryd"  # the console script of this environment
    if beside.is_file():
        return [str(beside.absolute())]
    found = shutil.which("memoryd")
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "memoryd"]


def check_name(name: str) -> str:
    """A server name every client's file accepts as a plain key."""
    if not _NAME_RE.match(name):
        raise ConfigFileProblem(f"server name {name!r}: use letters, digits, '-' and '_' only")
    return name


def server_entry(client: EditorClient, bridge_args: list[str]) -> dict[str, Any]:
    """The client's entry that starts ``memoryd mcp BRIDGE_ARGS``."""
    argv = memoryd_argv()
    return {**client.entry_extra, "command": argv[0], "args": [*argv[1:], "mcp", *bridge_args]}


def snippet(client: EditorClient, name: str, entry: dict[str, Any]) -> str:
    """The text to paste into the client's file."""
    if client.toml:
        return _toml_block(name, entry)
    return json.dumps({client.container: {name: entry}}, indent=2, ensure_ascii=False) + "\n"


def _toml_str(value: str) -> str:
    # A JSON string is a valid TOML basic string: the same escapes, quotes and \uXXXX.
    return json.dumps(value, ensure_ascii=False)


def _toml_block(name: str, entry: dict[str, Any]) -> str:
    lines = [f"[mcp_servers.{name}]"]
    for key, value in entry.items():
        if isinstance(value, list):
            lines.append(f"{key} = [{', '.join(_toml_str(v) for v in value)}]")
        else:
            lines.append(f"{key} = {_toml_str(str(value))}")
    return "\n".join(lines) + "\n"


# -- merging ---------------------------------------------------------------------------------------
def merge(client: EditorClient, path: Path, old_text: str | None, name: str, entry: dict[str, Any]) -> str:
    """The file's new text with our entry set and nothing else changed (raises ConfigFileProblem)."""
    if client.toml:
        return _merge_toml(path, old_text or "", name, entry)
    return _merge_json(client, path, old_text, name, entry)


def _merge_json(client: EditorClient, path: Path, old_text: str | None, name: str,
                entry: dict[str, Any]) -> str:
    if old_text is None or not old_text.strip():
        data: dict[str, Any] = {}
    else:
        try:
            loaded = json.loads(old_text)
        except json.JSONDecodeError as exc:
            raise ConfigFileProblem(
                f"{path} is not plain JSON ({exc.msg} at line {exc.lineno}; comments or trailing "
                f"commas?), and rewriting it would lose them: add this to it by hand instead:\n"
                f"{snippet(client, name, entry)}") from exc
        if not isinstance(loaded, dict):
            raise ConfigFileProblem(f"{path} does not hold a JSON object; fix or move it, then run again")
        data = loaded
    servers = data.setdefault(client.container, {})
    if not isinstance(servers, dict):
        raise ConfigFileProblem(f"{path}: {client.container!r} is not an object; fix it, then run again")
    servers[name] = entry
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


def _header_path(line: str) -> list[str] | None:
    """The dotted key of a TOML table header line, unquoted; None for other lines."""
    match = _HEADER.match(line)
    if not match:
        return None
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)', match.group(1))
    return [a or b or c for a, b, c in parts]


def _merge_toml(path: Path, old_text: str, name: str, entry: dict[str, Any]) -> str:
    try:
        before = tomllib.loads(old_text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileProblem(f"{path} is not valid TOML ({exc}); fix it, then run again") from exc
    block = _toml_block(name, entry)
    lines = old_text.splitlines(keepends=True)
    kept: list[str] = []
    insert_at: int | None = None
    skipping = False
    # Blank and comment lines closing a skipped table belong to what follows (a separation,
    # or a comment above the next table): they are kept.
    blanks: list[str] = []
    for line in lines:
        header = _header_path(line)
        if header is not None:
            ours = header[:2] == ["mcp_servers", name]
            if skipping and not ours:
                kept.extend(blanks)
            skipping, blanks = ours, []
            if skipping and insert_at is None:
                insert_at = len(kept)
        if not skipping:
            kept.append(line)
        elif not line.strip() or line.lstrip().startswith("#"):
            blanks.append(line)
        else:
            blanks = []
    kept.extend(blanks)
    had_entry = name in before.get("mcp_servers", {})
    if had_entry and insert_at is None:
        raise ConfigFileProblem(
            f"{path} defines mcp_servers.{name} inline, which this installer does not rewrite; "
            f"replace it by hand with:\n{block}")
    if insert_at is None:
        text = "".join(kept)
        if text and not text.endswith("\n"):
            text += "\n"
        if text.strip():
            text += "\n"  # a blank line between the last table and ours
        new_text = text + block
    else:
        kept.insert(insert_at, block)
        new_text = "".join(kept)
    try:
        after = tomllib.loads(new_text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileProblem(f"{path}: adding [mcp_servers.{name}] would not parse ({exc}); "
                                f"add it by hand:\n{block}") from exc
    # The safety net: our entry is exactly what we meant, and nothing else moved.
    others_before = {**before, "mcp_servers": {k: v for k, v in before.get("mcp_servers", {}).items()
                                                if k != name}}
    others_after = {**after, "mcp_servers": {k: v for k, v in after.get("mcp_servers", {}).items()
                                              if k != name}}
    if after.get("mcp_servers", {}).get(name) != entry or others_before != others_after:
        raise ConfigFileProblem(f"{path}: the edit would change more than mcp_servers.{name}; "
                                f"add it by hand:\n{block}")
    return new_text


# -- writing -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InstallPlan:
    """What ``install`` would do to one file."""

    client: EditorClient
    path: Path
    level: str
    old_text: str | None
    new_text: str

    @property
    def changed(self) -> bool:
        return self.old_text != self.new_text

    def diff(self) -> str:
        """A unified diff from the file as it is to the file as it would be."""
        old = (self.old_text or "").splitlines(keepends=True)
        new = self.new_text.splitlines(keepends=True)
        label = str(self.path) if self.old_text is not None else "/dev/null"
        return "".join(difflib.unified_diff(old, new, fromfile=label, tofile=str(self.path)))


def plan(client: EditorClient, path: Path, level: str, name: str, entry: dict[str, Any]) -> InstallPlan:
    """Read the file (if any) and compute its merged text; nothing is written."""
    try:
        old_text: str | None = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        old_text = None
    return InstallPlan(client, path, level, old_text, merge(client, path, old_text, check_name(name), entry))


def _free_backup_name(path: Path, stamp: str) -> Path:
    # Two installs within a second must not overwrite the first backup (the original file).
    backup = path.with_name(f"{path.name}.memoryd-backup-{stamp}")
    n = 1
    while backup.exists():
        n += 1
        backup = path.with_name(f"{path.name}.memoryd-backup-{stamp}-{n}")
    return backup


def _private_copy(source: Path, backup: Path) -> None:
    """Copy ``source`` to the new file ``backup``, mode 0600 from its first byte, times kept."""
    fd = privatefs.open_private(backup, os.O_WRONLY | os.O_EXCL)
    with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
        shutil.copyfileobj(src, out)
    st = source.stat()
    os.utime(backup, ns=(st.st_atime_ns, st.st_mtime_ns))


def apply(install: InstallPlan, *, now: float | None = None) -> Path | None:
    """Write the merged file; return the backup of the old one (None when there was none).

    The old file is copied to ``NAME.memoryd-backup-YYYYmmddTHHMMSS`` first (a free
    name: an earlier backup is never overwritten; mode 0600 whatever the
    original's, since an editor's config may hold its tokens), and
    the new text replaces it atomically (same directory, then rename), keeping
    its permission bits. A file memoryd creates is 0600, and so is each
    directory it creates for it (memoryd.privatefs). An unchanged file is not touched.
    """
    if not install.changed:
        return None
    path = install.path
    privatefs.make_dirs(path.parent)
    backup = None
    mode = privatefs.FILE_MODE
    if install.old_text is not None:
        backup = _free_backup_name(path, time.strftime("%Y%m%dT%H%M%S", time.localtime(now)))
        _private_copy(path, backup)
        mode = path.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(install.new_text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return backup
