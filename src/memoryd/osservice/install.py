"""`memoryd service install|uninstall`: write the units, enable and start them
where the platform tool exists, and say what was done and how to undo it."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from memoryd.osservice.units import LAUNCHD_LABEL, Target, render

Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]


def run_tool(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _systemctl(target: Target) -> list[str]:
    return ["systemctl"] if target.system else ["systemctl", "--user"]


def install(target: Target, run: Runner = run_tool) -> list[str]:
    """Write the files and enable them; return the steps taken, for the user."""
    steps = []
    target.unit_dir.mkdir(parents=True, exist_ok=True)
    target.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    target.log_dir.mkdir(parents=True, exist_ok=True)
    for name, text in render(target).items():
        path = target.unit_dir / name
        path.write_text(text, encoding="utf-8")
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
    for name in render(target):
        path = target.unit_dir / name
        if path.exists():
            path.unlink()
            steps.append(f"removed {path}")
    if target.platform == "systemd":
        steps += _run_all([[*_systemctl(target), "daemon-reload"]], run)
    steps.append(f"kept the data directory {target.data_dir} (delete it yourself to erase all memories)")
    return steps


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
