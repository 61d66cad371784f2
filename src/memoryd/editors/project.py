"""The project name ``--project auto`` gives a working directory.

The MCP bridge and Claude Code capture both name a project this way, so the
rows one writes are the rows the other reads.
"""

from __future__ import annotations

from pathlib import Path


def git_toplevel(cwd: str | Path) -> Path | None:
    """The top-level directory of the git work tree holding ``cwd``, or None.

    Found by looking for ``.git`` (a directory, or the file a worktree or a
    submodule has) from ``cwd`` upwards, which is what ``git rev-parse
    --show-toplevel`` answers, without spawning git (hooks must return fast).
    """
    start = Path(cwd).expanduser().resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def project_name(cwd: str | Path) -> str:
    """``--project auto``: the name of the git top-level of ``cwd``, else ``cwd``'s own name."""
    top = git_toplevel(cwd)
    folder = top if top is not None else Path(cwd).expanduser().resolve()
    # The root directory has no name; say so rather than write an empty owner.
    return folder.name or str(folder)
