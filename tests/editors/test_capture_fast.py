"""The hook's fast start: its own option parsing and path rules, held equal to memoryd.config's."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.config import load_config
from memoryd.editors.capture.fast import parse, resolve_paths

ENV_NAMES = ("MEMORYD_SOCKET", "MEMORYD_DATA_DIR", "MEMORYD_CONFIG", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME",
             "XDG_DATA_HOME", "XDG_STATE_HOME")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def _config_says(socket: str | None = None, data_dir: str | None = None,
                 config: str | None = None) -> tuple[str, str]:
    cfg = load_config(config, socket=socket, data_dir=data_dir)
    return str(cfg.resolved_socket()), str(cfg.resolved_data_dir())


@pytest.mark.parametrize("case", [
    "defaults", "runtime_dir", "xdg_homes", "env", "flags_over_env", "default_config_file",
    "explicit_config_file", "env_over_config_file", "config_env_var",
])
def test_paths_match_memoryd_config(home: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    flags: dict[str, str | None] = {}
    if case == "runtime_dir":
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "run"))
    if case == "xdg_homes":
        monkeypatch.setenv("XDG_DATA_HOME", str(home / "xd"))
        monkeypatch.setenv("XDG_STATE_HOME", str(home / "xs"))
    if case in ("env", "flags_over_env", "env_over_config_file"):
        monkeypatch.setenv("MEMORYD_SOCKET", str(home / "env.sock"))
        monkeypatch.setenv("MEMORYD_DATA_DIR", str(home / "envdata"))
    if case == "flags_over_env":
        flags = {"socket": str(home / "flag.sock"), "data_dir": str(home / "flagdata")}
    if case in ("default_config_file", "env_over_config_file"):
        path = home / ".config" / "memoryd" / "config.toml"
        path.parent.mkdir(parents=True)
        path.write_text('socket = "~/file.sock"\ndata_dir = "~/filedata"\n')
    if case in ("explicit_config_file", "config_env_var"):
        path = home / "my.toml"
        path.write_text('socket = "/tmp/elsewhere/m.sock"\n')
        if case == "config_env_var":
            monkeypatch.setenv("MEMORYD_CONFIG", str(path))
        else:
            flags["config"] = str(path)
    expected = _config_says(**flags)
    assert resolve_paths(**flags) == expected
    # Positive control that the cases differ: the default is not what the other cases resolve to.
    if case != "defaults":
        assert expected != (str(home / ".local" / "state" / "memoryd" / "memoryd.sock"),
                            str(home / ".local" / "share" / "memoryd"))


def test_options_parse_or_hand_over_to_click() -> None:
    assert parse([]) == {"verbose": False, "scope": "project", "budget_ms": 50}
    assert parse(["--scope", "user", "--user-id=dev1", "--budget-ms", "80", "--verbose"]) == {
        "verbose": True, "scope": "user", "user_id": "dev1", "budget_ms": 80}
    for handed_over in (["--help"], ["--print-config"], ["--scope", "team"], ["--budget-ms", "x"],
                        ["--socket"], ["--sokcet", "/x"], ["--budget-ms", "1"]):
        assert parse(handed_over) is None, handed_over
