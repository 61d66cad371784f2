"""Configuration: defaults, the TOML file, MEMORYD_* environment and overrides, in that order."""

from __future__ import annotations

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


def test_bad_value_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(toml_file(tmp_path, "job_max_attempts = 0\n"))
    assert "job_max_attempts" in info.value.message
    with pytest.raises(ConfigError) as info:
        load_config(toml_file(tmp_path, 'job_lease_s = "soon"\n'))
    assert "job_lease_s" in info.value.message


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
