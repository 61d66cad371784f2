"""The ``memoryd`` command's entry point: hands the Claude Code hook its fast path, else the CLI.

`memoryd capture claude-code` runs inside the editor's turn and must return
within its budget; the click CLI alone takes longer to import than that. So
the hook's argv goes to memoryd.editors.capture.fast first, which imports only
the standard library; everything else (and the hook's --help and
--print-config) is the click CLI in memoryd.cli.

Before either, the umask becomes 077 (memoryd.privatefs): whichever memoryd
command creates a file first (the hook's spool and cursors, the daemon's
database, WAL and lock, an export, a log), and whatever the user's umask,
only the user can read it. Child processes (the model worker) inherit it.
"""

from __future__ import annotations

import sys

from memoryd.privatefs import private_umask


def main() -> None:
    """Run ``memoryd`` with ``sys.argv``."""
    private_umask()
    from_hook = sys.argv[1:3] == ["capture", "claude-code"]
    if from_hook:
        from memoryd.editors.capture.fast import main as hook

        code = hook(sys.argv[3:])
        if code is not None:
            sys.exit(code)
    from memoryd.cli import main as cli

    try:
        cli()
    except SystemExit:
        # A hook command must never fail the editor, not even when its options are mistyped:
        # Claude Code reads exit 2 from a UserPromptSubmit hook as "block this prompt".
        # click has printed the usage error on stderr already.
        if from_hook:
            sys.exit(0)
        raise
