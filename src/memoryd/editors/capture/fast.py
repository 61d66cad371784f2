"""The hook's own start: `memoryd capture claude-code` without click and without memoryd.config.

Claude Code waits for the hook, so its start-up is part of the budget: the
full CLI (click, the configuration dataclass, platformdirs) costs more than
the whole hook may take. memoryd's entry point (memoryd/entry.py) hands the
hook's argv here first; this parses the hook's few options itself, finds the
socket and the data directory by the same rules as memoryd.config (flag, then
``MEMORYD_*`` environment, then the config file, then the platform default;
tests/editors/test_capture_fast.py holds the two equal), and runs the hook.
Anything it does not recognise (``--help``, ``--print-config``, a typo) goes to
the click command, which prints help or the error.

platformdirs is imported only when neither a flag nor the environment names
both paths; ``--print-config`` writes them into the hook's command line.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

APP = "memoryd"
#: Options the fast path takes, each with a value; --verbose is the one flag.
VALUE_OPTIONS = ("--scope", "--user-id", "--socket", "--config", "--data-dir", "--budget-ms")
DEFAULT_BUDGET_MS = 50


def parse(argv: list[str]) -> dict[str, Any] | None:
    """The options in ``argv`` (after ``capture claude-code``), or None to let click handle it."""
    opts: dict[str, Any] = {"verbose": False}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if arg == "--verbose":
            opts["verbose"] = True
        elif name in VALUE_OPTIONS:
            if not eq:
                if i + 1 >= len(argv):
                    return None
                i += 1
                value = argv[i]
            opts[name[2:].replace("-", "_")] = value
        else:
            return None
        i += 1
    scope = opts.get("scope", "project")
    if scope not in ("project", "user"):
        return None
    opts["scope"] = scope
    try:
        budget = int(opts.get("budget_ms", DEFAULT_BUDGET_MS))
    except ValueError:
        return None
    if not 5 <= budget <= 10_000:
        return None
    opts["budget_ms"] = budget
    return opts


def _expand(path: str) -> str:
    """``Path(path).expanduser()`` as a string, without importing pathlib."""
    out = os.path.expanduser(path)
    return out.rstrip("/") or "/"


def _config_values(path: str, explicit: bool) -> dict[str, Any]:
    """``socket`` and ``data_dir`` from the config file (missing file: {} unless named explicitly)."""
    import tomllib

    try:
        with open(path, "rb") as fh:
            values = tomllib.load(fh)
    except FileNotFoundError:
        if explicit:
            raise
        return {}
    return {k: values[k] for k in ("socket", "data_dir") if isinstance(values.get(k), str)}


def resolve_paths(socket: str | None = None, data_dir: str | None = None,
                  config: str | None = None) -> tuple[str, str]:
    """The agent socket and the data directory, as ``load_config(config, socket=, data_dir=)``
    followed by ``resolved_socket()`` and ``resolved_data_dir()`` would give them."""
    sock = socket or os.environ.get("MEMORYD_SOCKET") or None
    data = data_dir or os.environ.get("MEMORYD_DATA_DIR") or None
    if sock is None or data is None:
        explicit = config or os.environ.get("MEMORYD_CONFIG")
        if explicit:
            found = _config_values(_expand(explicit), True)
        else:
            import platformdirs

            found = _config_values(os.path.join(platformdirs.user_config_dir(APP), "config.toml"), False)
        sock = sock or found.get("socket") or None
        data = data or found.get("data_dir") or None
    if sock:
        socket_path = _expand(sock)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        socket_path = os.path.join(_expand(os.environ["XDG_RUNTIME_DIR"]), APP, "memoryd.sock")
    else:
        import platformdirs

        socket_path = os.path.join(platformdirs.user_state_dir(APP), "memoryd.sock")
    if data:
        data_path = _expand(data)
    else:
        import platformdirs

        data_path = platformdirs.user_data_dir(APP)
    return socket_path, data_path


def run(opts: dict[str, Any], stdin: bytes) -> Any:
    """Run the hook on one payload with parsed options; return its Outcome."""
    import json

    from memoryd.editors.capture import hook as capture_hook

    try:
        hook = json.loads(stdin) if stdin.strip() else None
    except ValueError:
        return capture_hook.Outcome("ignored", detail="stdin is not JSON")
    # The budget starts once the payload is in: what the editor waits is Python's start,
    # the imports and at most the budget (bench/capture.py measures the whole).
    deadline = time.monotonic() + opts["budget_ms"] / 1000.0
    socket_path, data_dir = resolve_paths(opts.get("socket"), opts.get("data_dir"), opts.get("config"))
    user_id = opts.get("user_id") or os.environ.get("MEMORYD_USER_ID") or None
    if opts["scope"] == "user" and not user_id:
        from memoryd.editors.project import default_user

        user_id = default_user()
    options = capture_hook.Options(scope=opts["scope"], user_id=user_id, socket=socket_path,
                                   data_dir=data_dir, deadline=deadline)
    return capture_hook.run(hook, options)


def main(argv: list[str]) -> int | None:
    """The hook, when ``argv`` is only options it knows; None to hand over to click.

    Always 0 otherwise: whatever happens, the editor goes on. Nothing is
    printed on stdout; --verbose says what happened on stderr.
    """
    opts = parse(argv)
    if opts is None:
        return None
    try:
        outcome = run(opts, sys.stdin.buffer.read())
        if opts["verbose"]:
            sys.stderr.write(f"capture: {outcome.action} {outcome.turns} {outcome.detail}".rstrip() + "\n")
    except BaseException as exc:  # a hook must never fail the editor
        sys.stderr.write(f"memoryd capture: {type(exc).__name__}: {exc}\n")
    return 0
