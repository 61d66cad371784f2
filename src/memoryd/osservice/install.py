"""`memoryd service install|uninstall`: write the units, enable and start them
where the platform tool exists, and say what was done and how to undo it."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from memoryd import privatefs
from memoryd.osservice.units import LAUNCHD_FILE, LAUNCHD_LABEL, Target, render, secret_files

Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]


def run_tool(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _systemctl(target: Target) -> list[str]:
    return ["systemctl"] if target.system else ["systemctl", "--user"]


def install(target: Target, run: Runner = run_tool) -> list[str]:
    """Write the files and enable them; return the steps taken, for the user."""
    steps = []
    # Every directory created here is 0700 and every file 0600 (memoryd.privatefs), the
    # data directory's parents included; the daemon checks an existing data directory at start.
    for folder in (target.unit_dir, target.data_dir, target.log_dir):
        privatefs.make_dirs(folder)
    for path, text in secret_files(target).items():
        privatefs.make_dirs(path.parent)
        write_private(path, text)
        steps.append(f"wrote {path} (mode 0600: the store URL)")
    for name, text in render(target).items():
        path = target.unit_dir / name
        write_private(path, text)
        if target.db_url and name == LAUNCHD_FILE:
            steps.append(f"wrote {path} (mode 0600: it holds the store URL)")
        else:
            steps.append(f"wrote {path}")
    if target.platform == "systemd":
        commands = [
            [*_systemctl(target), "daemon-reload"],
            [*_systemctl(target), "enable", "--now", "memoryd.socket"],
            [*_systemctl(target), "enable", "--now", "memoryd.service"],
        ]
    else:
        domain = "system" if target.system else f"gui/{os.getuid()}"
        commands = [["launchctl", "bootstrap", domain, str(target.unit_dir / f"{LAUNCHD_LABEL}.plist")]]
    steps += _run_all(commands, run)
    return steps


def uninstall(target: Target, run: Runner = run_tool) -> list[str]:
    """Stop, disable and remove the files (the data directory is kept)."""
    steps = []
    if target.platform == "systemd":
        steps += _run_all([
            [*_systemctl(target), "disable", "--now", "memoryd.service", "memoryd.socket"],
        ], run)
    else:
        domain = "system" if target.system else f"gui/{os.getuid()}"
        steps += _run_all([["launchctl", "bootout", f"{domain}/{LAUNCHD_LABEL}"]], run)
    paths = [target.unit_dir / name for name in render(target)]
    if target.env_file is not None:
        paths.append(target.env_file)  # whether or not this install gave a URL: a credential
    for path in paths:
        if path.exists():
            path.unlink()
            steps.append(f"removed {path}")
    if target.platform == "systemd":
        steps += _run_all([[*_systemctl(target), "daemon-reload"]], run)
    steps.append(f"kept the data directory {target.data_dir} (delete it yourself to erase all memories)")
    return steps


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (mode 0600 from the first byte,
    also when the file existed with a wider mode)."""
    privatefs.write_private(path, text)


def _run_all(commands: list[list[str]], run: Runner) -> list[str]:
    steps = []
    for argv in commands:
        if shutil.which(argv[0]) is None:
            steps.append(f"skipped `{' '.join(argv)}`: {argv[0]} is not on this machine")
            continue
        result = run(argv)
        if result.returncode == 0:
            steps.append(f"ran `{' '.join(argv)}`")
        else:
            detail = (result.stderr or result.stdout).strip().splitlines()
            steps.append(f"`{' '.join(argv)}` failed ({result.returncode}): "
                         f"{detail[-1] if detail else 'no output'}")
    return steps


def undo_hint(target: Target) -> str:
    return "undo with: memoryd service uninstall" + (" --system" if target.system else "")


def unit_paths(target: Target) -> list[Path]:
    return [target.unit_dir / name for name in render(target)]
