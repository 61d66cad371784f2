"""Render the service definitions for this install (paths filled in).

A store URL given to ``memoryd service install --db-url`` (a PostgreSQL URL
carries a password) never goes into a world-readable unit file: systemd reads
it from an environment file of mode 0600 (``EnvironmentFile=``), and the
launchd plist that holds it is written with mode 0600.
"""

from __future__ import annotations

import getpass
import sys
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from xml.sax.saxutils import escape

import platformdirs

SYSTEMD_FILES = ("memoryd.service", "memoryd.socket")
LAUNCHD_FILE = "dev.memoryd.plist"
LAUNCHD_LABEL = "dev.memoryd"
ENV_FILE = "memoryd.env"


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
    #: The store URL the service runs on (None: the data directory's SQLite file).
    db_url: str | None = None
    #: Where systemd reads the store URL from (mode 0600).
    env_file: Path | None = None


def template(name: str) -> str:
    """A packaged template's text."""
    return resources.files("memoryd.osservice").joinpath("templates", name).read_text(encoding="utf-8")


def detect_platform() -> str:
    return "launchd" if sys.platform == "darwin" else "systemd"


def default_target(system: bool = False, data_dir: Path | None = None,
                   platform: str | None = None, db_url: str | None = None) -> Target:
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
    env_dir = Path("/etc/memoryd") if system else Path(platformdirs.user_config_dir("memoryd"))
    return Target(platform=platform, system=system, python=sys.executable, data_dir=data_dir,
                  unit_dir=unit_dir, log_dir=log_dir, user=getpass.getuser(), db_url=db_url,
                  env_file=env_dir / ENV_FILE)


def hide_password(url: str) -> str:
    """The URL with its password (if any, or a ``?password=``) shown as ***."""
    from memoryd.masking import mask_url

    return mask_url(url)


def env_file_text(target: Target) -> str:
    """The environment file systemd reads the store URL from (a double-quoted value)."""
    assert target.db_url is not None
    # systemd's env-file parser drops the backslash before these four inside double quotes
    # (as a shell does), so escaped they stay literal under either reading.
    value = "".join("\\" + c if c in '\\"$`' else c for c in target.db_url)
    return ("# The store URL of memoryd.service, kept out of the unit file (mode 0600).\n"
            f'MEMORYD_DB_URL="{value}"\n')


def secret_files(target: Target) -> dict[Path, str]:
    """Files that hold the store URL, written with mode 0600 (path → text)."""
    if target.db_url is None or target.platform != "systemd":
        return {}
    assert target.env_file is not None
    return {target.env_file: env_file_text(target)}


def masked(target: Target) -> Target:
    """The target with its store URL's password hidden, for printing."""
    return replace(target, db_url=hide_password(target.db_url)) if target.db_url else target


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
        if target.db_url and name == "memoryd.service":
            assert target.env_file is not None
            text = text.replace("[Install]", "# The store URL (MEMORYD_DB_URL), readable by its owner "
                                f"only.\nEnvironmentFile={target.env_file}\n\n[Install]", 1)
        if target.db_url and name == LAUNCHD_FILE:
            text = text.replace("    <string>1</string>\n  </dict>",
                                "    <string>1</string>\n    <key>MEMORYD_DB_URL</key>\n"
                                f"    <string>{escape(target.db_url)}</string>\n  </dict>", 1)
        if target.system and name == "memoryd.service":
            # A system unit runs as the installing user, started at boot.
            text = text.replace("[Service]\n", f"[Service]\nUser={target.user}\n", 1)
            text = text.replace("WantedBy=default.target", "WantedBy=multi-user.target")
        out[name] = text
    return out
