"""Configuration: defaults, the TOML file, MEMORYD_* environment and options, in that order, with
strict types (a wrong type stops the start naming the key, the type, the value and its source)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from memoryd.config import ENV_KEYS, Config, load_config, render_defaults
from memoryd.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No MEMORYD_* from the developer's shell, and no real config file."""
    for name in (*ENV_KEYS, "MEMORYD_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))


def toml_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(body, encoding="utf-8")
    return path


def test_defaults_validate() -> None:
    Config().validate()
    assert load_config() == Config()


def test_every_key_has_help_text() -> None:
    for f in fields(Config):
        assert f.metadata.get("help"), f"config key {f.name} has no help text"


def test_rendered_defaults_parse_as_toml_and_round_trip() -> None:
    assert tomllib.loads(render_defaults()) == Config().as_dict()


def test_rendered_defaults_load_back_as_the_default_config(tmp_path: Path) -> None:
    assert load_config(toml_file(tmp_path, render_defaults())) == Config()


def test_file_values_override_defaults(tmp_path: Path) -> None:
    cfg = load_config(toml_file(tmp_path, 'embedder = "none"\njob_lease_s = 30\nkinds = ["fact"]\n'))
    assert (cfg.embedder, cfg.job_lease_s, cfg.kinds) == ("none", 30.0, ["fact"])
    assert isinstance(cfg.job_lease_s, float)
    assert cfg.llm == Config().llm  # untouched keys keep their defaults


def test_unknown_key_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(toml_file(tmp_path, 'embeder = "none"\n'))
    assert "embeder" in info.value.message
    assert "memoryd config" in info.value.message


def test_invalid_toml_and_missing_explicit_file_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(toml_file(tmp_path, "embedder = \n"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.toml")


def test_environment_beats_the_file_and_overrides_beat_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = toml_file(tmp_path, 'embedder = "/models/from-file"\nllm = "none"\n')
    monkeypatch.setenv("MEMORYD_EMBEDDER", "/models/from-env")
    cfg = load_config(path)
    assert cfg.embedder == "/models/from-env"
    assert cfg.llm == "none"  # the file still wins over the default where env is silent
    assert load_config(path, embedder="bundled").embedder == "bundled"
    assert load_config(path, embedder=None).embedder == "/models/from-env"  # None is "not given"


def test_every_env_key_maps_to_a_config_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for env, key in ENV_KEYS.items():
        monkeypatch.setenv(env, f"/from/{key}")
    cfg = load_config()
    for key in ENV_KEYS.values():
        assert getattr(cfg, key) == f"/from/{key}"


def test_memoryd_config_env_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_CONFIG", str(toml_file(tmp_path, "write_batch_max = 7\n")))
    assert load_config().write_batch_max == 7


def test_platform_config_file_is_read_when_present(tmp_path: Path) -> None:
    path = tmp_path / "xdg-config" / "memoryd" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text("read_threads = 2\n", encoding="utf-8")
    assert load_config().read_threads == 2


def test_idempotency_window_below_a_day_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="idempotency_ttl_s"):
        load_config(toml_file(tmp_path, "idempotency_ttl_s = 60\n"))


# -- strict types: a wrong type is refused, never converted (issue 11, defect 9) ----------------


@pytest.mark.parametrize(("line", "key", "takes", "shown"), [
    ("job_max_attempts = 1.9", "job_max_attempts", "an integer", "1.9 (a float)"),
    ("job_max_attempts = 5.0", "job_max_attempts", "an integer", "5.0 (a float)"),
    ("job_max_attempts = true", "job_max_attempts", "an integer", "true (a boolean)"),
    ('job_max_attempts = "5"', "job_max_attempts", "an integer", '"5" (a string)'),
    ("governor_enabled = 2", "governor_enabled", "true or false", "2 (an integer)"),
    ('governor_enabled = "yes"', "governor_enabled", "true or false", '"yes" (a string)'),
    ('governor_enabled = "true"', "governor_enabled", "true or false", '"true" (a string)'),
    ("job_lease_s = true", "job_lease_s", "a finite number", "true (a boolean)"),
    ('job_lease_s = "soon"', "job_lease_s", "a finite number", '"soon" (a string)'),
    ("job_lease_s = nan", "job_lease_s", "a finite number", "nan (a float)"),
    ("job_lease_s = inf", "job_lease_s", "a finite number", "inf (a float)"),
    ('embedder = ["bundled"]', "embedder", "a string", '["bundled"] (a list)'),
    ("embedder = 5", "embedder", "a string", "5 (an integer)"),
    ('kinds = "fact"', "kinds", "a list of strings", '"fact" (a string)'),
    ('kinds = ["fact", 3]', "kinds", "a list of strings", '["fact", 3] (a list with non-strings)'),
    ('[embedder]\nname = "x"', "embedder", "a string", '{name = "x"} (a table)'),
])
def test_wrong_type_in_the_file_names_key_type_value_and_file(
        tmp_path: Path, line: str, key: str, takes: str, shown: str) -> None:
    path = toml_file(tmp_path, line + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = info.value.message
    assert f"config key '{key}' takes {takes}" in message
    assert f"config file {path} gives {shown}" in message
    assert info.value.data["field"] == key


def test_wrong_type_message_says_how_to_write_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(toml_file(tmp_path, "job_max_attempts = 1.9\n"))
    assert info.value.message.endswith("write it like the default: job_max_attempts = 5")


def test_integer_is_accepted_for_a_float_key_and_stays_a_float(tmp_path: Path) -> None:
    cfg = load_config(toml_file(tmp_path, "job_lease_s = 30\ngovernor_enabled = false\nread_threads = 2\n"))
    assert (cfg.job_lease_s, cfg.governor_enabled, cfg.read_threads) == (30.0, False, 2)
    assert type(cfg.job_lease_s) is float and type(cfg.read_threads) is int


def test_unknown_key_names_the_file_and_the_nearest_key(tmp_path: Path) -> None:
    path = toml_file(tmp_path, 'embeder = "none"\nzzz_nothing_like_it = 1\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = info.value.message
    assert "'embeder' (did you mean 'embedder'?)" in message
    assert "'zzz_nothing_like_it'" in message and "zzz_nothing_like_it' (did" not in message
    assert f"in config file {path}" in message


def test_out_of_range_value_names_the_file_it_came_from(tmp_path: Path) -> None:
    path = toml_file(tmp_path, "job_max_attempts = 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.message == (f"config key 'job_max_attempts' must be at least 1 (got 0), "
                                  f"set by config file {path}")


@pytest.mark.parametrize(("text", "expected"), [
    ("true", True), ("false", False), ("1", True), ("0", False), ("TRUE", True), ("False", False)])
def test_environment_booleans_are_true_false_1_or_0(
        monkeypatch: pytest.MonkeyPatch, text: str, expected: bool) -> None:
    # No bool key has a variable today; this one is added for the test to reach the parser.
    monkeypatch.setitem(ENV_KEYS, "MEMORYD_TEST_GOVERNOR", "governor_enabled")
    monkeypatch.setenv("MEMORYD_TEST_GOVERNOR", text)
    assert load_config().governor_enabled is expected


@pytest.mark.parametrize(("key", "text", "takes"), [
    ("governor_enabled", "yes", "true, false, 1 or 0"),
    ("governor_enabled", "2", "true, false, 1 or 0"),
    ("governor_enabled", "on", "true, false, 1 or 0"),
    ("read_threads", "1.9", "an integer"),
    ("read_threads", "four", "an integer"),
    ("job_lease_s", "inf", "a finite number"),
    ("job_lease_s", "30s", "a finite number"),
])
def test_wrong_environment_text_names_the_variable(
        monkeypatch: pytest.MonkeyPatch, key: str, text: str, takes: str) -> None:
    monkeypatch.setitem(ENV_KEYS, "MEMORYD_TEST_VALUE", key)
    monkeypatch.setenv("MEMORYD_TEST_VALUE", text)
    with pytest.raises(ConfigError) as info:
        load_config()
    assert f"config key '{key}' takes {takes}" in info.value.message
    assert f"environment variable MEMORYD_TEST_VALUE gives \"{text}\" (a string)" in info.value.message


def test_environment_numbers_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ENV_KEYS, "MEMORYD_TEST_THREADS", "read_threads")
    monkeypatch.setitem(ENV_KEYS, "MEMORYD_TEST_LEASE", "job_lease_s")
    monkeypatch.setenv("MEMORYD_TEST_THREADS", "3")
    monkeypatch.setenv("MEMORYD_TEST_LEASE", "2.5e1")
    cfg = load_config()
    assert (cfg.read_threads, cfg.job_lease_s) == (3, 25.0)


def test_wrong_type_of_an_option_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, embedder=5)
    assert "config key 'embedder' takes a string, but option --embedder gives 5 (an integer)" \
        in info.value.message
    with pytest.raises(ConfigError) as info:
        load_config(None, log_format="xml")
    assert info.value.message.endswith("set by option --log-format")


def test_unknown_option_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key.*'sockett'.*did you mean 'socket'"):
        load_config(None, sockett="/tmp/x")


def test_admin_socket_key_file_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(None, socket=str(tmp_path / "run" / "memoryd" / "memoryd.sock"))
    assert cfg.admin_socket() == tmp_path / "run" / "memoryd-admin" / "memoryd-admin.sock"
    cfg = load_config(toml_file(tmp_path, f'admin_socket_path = "{tmp_path}/ops/a.sock"\n'))
    assert cfg.admin_socket() == tmp_path / "ops" / "a.sock"
    monkeypatch.setenv("MEMORYD_ADMIN_SOCKET", str(tmp_path / "env" / "a.sock"))
    assert load_config().admin_socket() == tmp_path / "env" / "a.sock"


# -- `memoryd run` refuses a bad config with exit 2 (PROTOCOL.md; docs/operations.md) ---------


def run_daemon(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`memoryd run` in a child with a private HOME and no MEMORYD_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
               XDG_RUNTIME_DIR=str(tmp_path / "run"), XDG_DATA_HOME=str(tmp_path / "xdg-data"),
               XDG_STATE_HOME=str(tmp_path / "xdg-state"))
    return subprocess.run(
        [sys.executable, "-m", "memoryd", "run", "--data-dir", str(tmp_path / "data"),
         "--socket", str(tmp_path / "s" / "memoryd.sock"), "--embedder", "none", "--llm", "none", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(("body", "wanted"), [
    ("job_max_attempts = 1.9\n",
     "config key 'job_max_attempts' takes an integer, but config file {path} gives 1.9 (a float)"),
    ('embeder = "none"\n',
     "unknown config key(s) 'embeder' (did you mean 'embedder'?) in config file {path}"),
])
def test_memoryd_run_exits_2_on_a_bad_config_file(tmp_path: Path, body: str, wanted: str) -> None:
    path = toml_file(tmp_path, body)
    done = run_daemon(tmp_path, "--config", str(path))
    assert done.returncode == 2, done.stderr
    assert wanted.format(path=path) in done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was created
