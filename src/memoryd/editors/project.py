"""The identity editors write under: the project ``--project auto`` names, the default user.

The MCP bridge and Claude Code capture both name a project and a user this
way, so the rows one writes are the rows the other reads.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path


def git_toplevel(cwd: str | Path) -> str | None:
    """The top-level directory of the git work tree holding ``cwd``, or None.

    Found by looking for ``.git`` (a directory, or the file a worktree or a
    submodule has) from ``cwd`` upwards, which is what ``git rev-parse
    --show-toplevel`` answers, without spawning git (hooks must return fast;
    os.path rather than pathlib for the same reason).
    """
    folder = os.path.realpath(os.path.expanduser(cwd))
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def project_name(cwd: str | Path) -> str:
    """``--project auto``: the name of the git top-level of ``cwd``, else ``cwd``'s own name."""
    top = git_toplevel(cwd)
    folder = top if top is not None else os.path.realpath(os.path.expanduser(cwd))
    # The root directory has no name; say so rather than write an empty owner.
    return os.path.basename(folder) or folder


def default_user() -> str:
    """The user id when none is given: the login name, else ``uid-N`` (a container may
    run under a uid with no name)."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid-{os.getuid()}"
