"""Render the service definitions for this install (paths filled in)."""

from __future__ import annotations

import getpass
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import platformdirs

SYSTEMD_FILES = ("memoryd.service", "memoryd.socket")
LAUNCHD_FILE = "dev.memoryd.plist"
LAUNCHD_LABEL = "dev.memoryd"


@dataclass(frozen=True)
class Target:
    """Where and how the service is installed."""

    platform: str  # "systemd" | "launchd"
    system: bool
    python: str
    data_dir: Path
    unit_dir: Path
    log_dir: Path
    user: str


def template(name: str) -> str:
    """A packaged template's text."""
    return resources.files("memoryd.osservice").joinpath("templates", name).read_text(encoding="utf-8")


def detect_platform() -> str:
    return "launchd" if sys.platform == "darwin" else "systemd"


def default_target(system: bool = False, data_dir: Path | None = None,
                   platform: str | None = None) -> Target:
    """The install target for this machine, user or system-wide."""
    platform = platform or detect_platform()
    if platform == "launchd":
        unit_dir = (Path("/Library/LaunchDaemons") if system
                    else Path.home() / "Library" / "LaunchAgents")
        log_dir = Path(platformdirs.user_log_dir("memoryd"))
    else:
        unit_dir = (Path("/etc/systemd/system") if system
                    else Path(platformdirs.user_config_dir("systemd")) / "user")
        log_dir = Path("/var/log/memoryd") if system else Path(platformdirs.user_log_dir("memoryd"))
    if data_dir is None:
        data_dir = Path("/var/lib/memoryd") if system else Path(platformdirs.user_data_dir("memoryd"))
    return Target(platform=platform, system=system, python=sys.executable, data_dir=data_dir,
                  unit_dir=unit_dir, log_dir=log_dir, user=getpass.getuser())


def render(target: Target) -> dict[str, str]:
    """File name → rendered text for the target's platform."""
    names = SYSTEMD_FILES if target.platform == "systemd" else (LAUNCHD_FILE,)
    out = {}
    for name in names:
        text = (
            template(name)
            .replace("@PYTHON@", target.python)
            .replace("@DATA_DIR@", str(target.data_dir))
            .replace("@LOG_DIR@", str(target.log_dir))
        )
        if target.system and name == "memoryd.socket":
            # System sockets would be root's; the daemon runs as the user, so the user owns them.
            text = text.replace("SocketMode=0600\n", f"SocketMode=0600\nSocketUser={target.user}\n", 1)
        if target.system and name == "memoryd.service":
            # A system unit runs as the installing user, started at boot.
            text = text.replace("[Service]\n", f"[Service]\nUser={target.user}\n", 1)
            text = text.replace("WantedBy=default.target", "WantedBy=multi-user.target")
        out[name] = text
    return out
