"""The hooks block an editor's settings need to run ``memoryd capture`` (Claude Code's
``.claude/settings.json``), with this install's own command line."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

#: The Claude Code hook events capture listens to.
HOOK_EVENTS = ("UserPromptSubmit", "Stop", "SessionEnd")


def memoryd_command() -> str:
    """How this install's memoryd is run, as an absolute command line."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "memoryd" and argv0.exists():
        return shlex.quote(str(argv0.resolve()))
    beside = Path(sys.executable).parent / "memoryd"
    if beside.exists():
        return shlex.quote(str(beside))
    return f"{shlex.quote(sys.executable)} -m memoryd"


def hooks_config(command: str) -> dict[str, object]:
    """The ``hooks`` block of ``.claude/settings.json`` that runs ``command`` on each event."""
    entry = [{"hooks": [{"type": "command", "command": command, "timeout": 10}]}]
    return {"hooks": {event: entry for event in HOOK_EVENTS}}
