"""The ``memoryd`` command's entry point: hands the Claude Code hook its fast path, else the CLI.

`memoryd capture claude-code` runs inside the editor's turn and must return
within its budget; the click CLI alone takes longer to import than that. So
the hook's argv goes to memoryd.editors.capture_fast first, which imports only
the standard library; everything else (and the hook's --help and
--print-config) is the click CLI in memoryd.cli.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Run ``memoryd`` with ``sys.argv``."""
    if sys.argv[1:3] == ["capture", "claude-code"]:
        from memoryd.editors.capture_fast import main as hook

        code = hook(sys.argv[3:])
        if code is not None:
            sys.exit(code)
    from memoryd.cli import main as cli

    cli()
