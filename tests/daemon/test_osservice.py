"""Unit files and the launchd plist: rendered for this install, valid, and installable."""

from __future__ import annotations

import dataclasses
import os
import plistlib
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from memoryd.cli import main
from memoryd.osservice import install as inst
from memoryd.osservice.units import Target, render

REPO = Path(__file__).resolve().parents[2]


def target(tmp_path: Path, platform: str = "systemd", system: bool = False) -> Target:
    return Target(platform=platform, system=system, python=sys.executable, data_dir=tmp_path / "data",
                  unit_dir=tmp_path / "units", log_dir=tmp_path / "logs", user="tester")


def test_repo_unit_files_are_the_packaged_templates() -> None:
    from memoryd.osservice.units import template

    for rel, name in (("systemd/memoryd.service", "memoryd.service"),
                      ("systemd/memoryd.socket", "memoryd.socket"),
                      ("launchd/dev.memoryd.plist", "dev.memoryd.plist")):
        assert (REPO / rel).read_text() == template(name)


def test_rendered_service_names_this_python_and_data_dir(tmp_path: Path) -> None:
    files = render(target(tmp_path))
    service = files["memoryd.service"]
    assert f"ExecStart={sys.executable} -m memoryd run --data-dir {tmp_path / 'data'}" in service
    assert not re.search(r"@[A-Z_]+@", service)  # every placeholder filled
    for directive in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "NoNewPrivileges=yes",
                      "ProtectSystem=strict", f"ReadWritePaths={tmp_path / 'data'}", "PrivateTmp=yes",
                      "Nice=", "IOSchedulingClass=idle"):
        assert directive in service
    socket_unit = files["memoryd.socket"]
    assert "SocketMode=0600" in socket_unit and "DirectoryMode=0700" in socket_unit
    assert socket_unit.count("ListenStream=") == 2


def test_system_unit_runs_as_the_user_and_starts_at_boot(tmp_path: Path) -> None:
    service = render(target(tmp_path, system=True))["memoryd.service"]
    assert "User=tester" in service and "WantedBy=multi-user.target" in service
    assert "User=" not in render(target(tmp_path))["memoryd.service"]  # positive control


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_rendered_units(tmp_path: Path) -> None:
    unit_dir = tmp_path / "verify"
    unit_dir.mkdir()
    for name, text in render(target(tmp_path)).items():
        (unit_dir / name).write_text(text)
    (tmp_path / "data").mkdir()
    paths = [str(unit_dir / "memoryd.socket"), str(unit_dir / "memoryd.service")]
    result = subprocess.run(["systemd-analyze", "verify", "--user", *paths], capture_output=True, text=True)
    if "Failed to initialize manager" in result.stderr:
        # No user manager in this sandbox: verify in system mode, which checks the same syntax.
        result = subprocess.run(["systemd-analyze", "verify", *paths], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "Unknown key" not in result.stderr and "Invalid" not in result.stderr


def test_plist_parses_with_the_expected_keys(tmp_path: Path) -> None:
    text = render(target(tmp_path, platform="launchd"))["dev.memoryd.plist"]
    plist = plistlib.loads(text.encode())
    assert plist["Label"] == "dev.memoryd"
    assert plist["ProgramArguments"][:4] == [sys.executable, "-m", "memoryd", "run"]
    assert str(tmp_path / "data") in plist["ProgramArguments"]
    assert plist["KeepAlive"] is True and plist["RunAtLoad"] is True
    assert plist["ProcessType"] == "Background" and plist["LowPriorityIO"] is True
    assert plist["Nice"] == 10
    assert plist["StandardErrorPath"].startswith(str(tmp_path / "logs"))


def test_service_print_cli_shows_both_units() -> None:
    result = CliRunner().invoke(main, ["service", "print"])
    assert result.exit_code == 0, result.output
    assert "memoryd.service" in result.output and "memoryd.socket" in result.output
    assert "ExecStart=" in result.output and "ListenStream=" in result.output


@pytest.fixture
def systemctl_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH whose only tool is a ``systemctl`` (never run: the tests pass their own runner),
    so install() takes its systemctl branch on any machine."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "systemctl").write_text("#!/bin/sh\nexit 0\n")
    (tools / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))


@pytest.fixture
def no_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH with no tools: a machine without systemd."""
    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))


def recorder() -> tuple[list[list[str]], Callable[[list[str]], subprocess.CompletedProcess[str]]]:
    calls: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    return calls, run


def test_install_writes_units_runs_systemctl_and_uninstall_removes_them(tmp_path: Path,
                                                                        systemctl_on_path: None) -> None:
    calls, run = recorder()
    t = target(tmp_path)
    steps = inst.install(t, run=run)
    assert (t.unit_dir / "memoryd.service").exists() and (t.unit_dir / "memoryd.socket").exists()
    assert calls == [["systemctl", "--user", "daemon-reload"],
                     ["systemctl", "--user", "enable", "--now", "memoryd.socket"],
                     ["systemctl", "--user", "enable", "--now", "memoryd.service"]]
    assert f"wrote {t.unit_dir / 'memoryd.socket'}" in steps
    assert "ran `systemctl --user enable --now memoryd.socket`" in steps
    calls.clear()
    steps = inst.uninstall(t, run=run)
    assert calls == [["systemctl", "--user", "disable", "--now", "memoryd.service", "memoryd.socket"],
                     ["systemctl", "--user", "daemon-reload"]]
    assert not (t.unit_dir / "memoryd.service").exists() and not (t.unit_dir / "memoryd.socket").exists()
    assert (t.data_dir).exists() and any("kept the data directory" in s for s in steps)


def test_install_without_systemctl_writes_the_units_and_says_what_it_skipped(tmp_path: Path,
                                                                             no_systemctl: None) -> None:
    calls, run = recorder()
    t = target(tmp_path)
    steps = inst.install(t, run=run)
    assert calls == []  # nothing to run
    assert (t.unit_dir / "memoryd.service").exists() and (t.unit_dir / "memoryd.socket").exists()
    assert "skipped `systemctl --user enable --now memoryd.socket`: systemctl is not on this machine" in steps
    assert not any(s.startswith("ran ") for s in steps)


def test_failed_platform_command_is_reported_not_hidden(tmp_path: Path, systemctl_on_path: None) -> None:
    def failing(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "Failed to connect to bus")

    steps = inst.install(target(tmp_path), run=failing)
    failed = [s for s in steps if "failed (1): Failed to connect to bus" in s]
    assert failed == ["`systemctl --user daemon-reload` failed (1): Failed to connect to bus",
                      "`systemctl --user enable --now memoryd.socket` failed (1): Failed to connect to bus",
                      "`systemctl --user enable --now memoryd.service` failed (1): Failed to connect to bus"]


SECRET_URL = 'postgresql+psycopg://memoryd:pa"s$s`w\\rd@db1:5432/memoryd'


def test_install_with_a_db_url_keeps_it_in_a_0600_env_file_not_the_unit(tmp_path: Path,
                                                                         systemctl_on_path: None) -> None:
    _, run = recorder()
    t = dataclasses.replace(target(tmp_path), db_url=SECRET_URL, env_file=tmp_path / "cfg" / "memoryd.env")
    steps = inst.install(t, run=run)
    assert f"wrote {t.env_file} (mode 0600: the store URL)" in steps
    assert stat.S_IMODE(os.stat(t.env_file).st_mode) == 0o600
    service = (t.unit_dir / "memoryd.service").read_text()
    assert f"EnvironmentFile={t.env_file}\n" in service
    assert "db1" not in service and "memoryd:pa" not in service  # no part of the URL in the unit
    # systemd reads the value as a POSIX shell does: the same URL back, quotes and all.
    line = next(x for x in t.env_file.read_text().splitlines() if x.startswith("MEMORYD_DB_URL="))
    read = subprocess.run(["/bin/sh", "-c", f'{line}; printf %s "$MEMORYD_DB_URL"'],
                          capture_output=True, text=True)
    assert read.stdout == SECRET_URL
    inst.uninstall(t, run=run)
    assert not t.env_file.exists()  # the credential goes with the service


def test_an_env_file_that_existed_world_readable_is_rewritten_0600(tmp_path: Path,
                                                                   no_systemctl: None) -> None:
    env_file = tmp_path / "memoryd.env"
    env_file.write_text("old\n")
    env_file.chmod(0o644)
    t = dataclasses.replace(target(tmp_path), db_url=SECRET_URL, env_file=env_file)
    inst.install(t, run=recorder()[1])
    assert stat.S_IMODE(os.stat(env_file).st_mode) == 0o600
    assert "old" not in env_file.read_text()


def test_launchd_plist_with_a_db_url_is_0600_and_carries_it(tmp_path: Path, no_systemctl: None) -> None:
    t = dataclasses.replace(target(tmp_path, platform="launchd"), db_url=SECRET_URL)
    inst.install(t, run=recorder()[1])
    path = t.unit_dir / "dev.memoryd.plist"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert plistlib.loads(path.read_bytes())["EnvironmentVariables"]["MEMORYD_DB_URL"] == SECRET_URL
    plain = target(tmp_path / "plain", platform="launchd")
    assert "MEMORYD_DB_URL" not in plistlib.loads(render(plain)["dev.memoryd.plist"].encode())[
        "EnvironmentVariables"]  # positive control: no URL, no key


def test_service_print_hides_the_password_and_a_bad_url_is_a_usage_error() -> None:
    shown = CliRunner().invoke(main, ["service", "print", "--db-url", "postgresql://u:topsecret@h/db"])
    assert shown.exit_code == 0, shown.output
    assert "topsecret" not in shown.output
    assert 'MEMORYD_DB_URL="postgresql://u:***@h/db"' in shown.output and "EnvironmentFile=" in shown.output
    for bad, says in (("mysql://u@h/db", "sqlite or postgresql"), ("::", "not a store URL")):
        refused = CliRunner().invoke(main, ["service", "install", "--db-url", bad])
        assert refused.exit_code == 2 and says in refused.output, refused.output
