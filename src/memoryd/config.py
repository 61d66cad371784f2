"""Configuration: defaults, the TOML file, the environment and flags, in that order.

Every key is a field of :class:`Config` with its default and a one-line help
text; ``memoryd config`` prints them all as a commented TOML file, and
docs/operations.md is written from the same table.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import platformdirs

from memoryd.errors import ConfigError

APP = "memoryd"
SOCKET_NAME = "memoryd.sock"
ADMIN_SOCKET_NAME = "memoryd-admin.sock"

DEFAULT_ENTITY_TYPES = (
    "person", "project", "service", "tool", "library", "language", "host", "file", "url",
    "version", "issue", "organization", "database", "command", "config_key",
)

DEFAULT_KINDS = (
    "fact",
    "decision",
    "preference",
    "procedure",
    "event",
    "task",
    "observation",
    "conversation",
)


def _key(default: Any, help_text: str) -> Any:
    if isinstance(default, list | dict | tuple):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata={"help": help_text})
    return field(default=default, metadata={"help": help_text})


@dataclass
class Config:
    """memoryd's settings. Field order is the order ``memoryd config`` prints."""

    data_dir: str = _key("", "Directory for the database, lock and models ('' = platform data dir).")
    db_url: str = _key("", "Store URL ('' = sqlite:///<data_dir>/memoryd.db).")
    socket: str = _key("", "Agent socket ('' = $XDG_RUNTIME_DIR/memoryd/memoryd.sock, else state dir).")
    embedder: str = _key("bundled", "Embedder: 'bundled' (all-MiniLM-L6-v2), 'none', or a model directory.")
    llm: str = _key("bundled", "LLM: 'bundled' (Gemma 3 270M), 'none', or a GGUF path (later passes).")
    kinds: list[str] = _key(list(DEFAULT_KINDS), "Memory kinds a writer may name (besides 'auto').")
    entity_types: list[str] = _key(list(DEFAULT_ENTITY_TYPES), "Entity types the extract pass may emit.")
    llm_entity_types: list[str] = _key(["person", "project", "service", "organization"],
                                       "Entity types taken from the LLM (the rules find the others better).")
    log_level: str = _key("info", "Log level: debug, info, warning, error.")
    log_format: str = _key("auto", "Log format: 'json', 'console', or 'auto' (console on a terminal).")
    max_frame_bytes: int = _key(1048576, "Largest request frame accepted (bytes); larger answers 1001.")
    max_content_bytes: int = _key(65536, "Largest content accepted (UTF-8 bytes); larger answers 1001.")
    max_connections: int = _key(256, "Concurrent client connections per socket; more are refused.")
    max_inflight_per_connection: int = _key(64, "Requests in flight per connection before its reads pause.")
    write_queue_max: int = _key(4096, "Writes waiting for group commit before new ones answer 1004.")
    write_batch_max: int = _key(512, "Most writes carried by one group-commit transaction.")
    busy_timeout_ms: int = _key(5000, "SQLite busy timeout (ms); a write still locked after it answers 1003.")
    read_threads: int = _key(4, "Threads serving reads (get, search, status).")
    job_lease_s: float = _key(300.0, "Seconds a claimed job stays leased before another worker may take it.")
    job_max_attempts: int = _key(5, "Attempts before a job is marked dead.")
    backoff_base_s: float = _key(2.0, "First retry delay after a failed attempt (doubles per attempt).")
    backoff_max_s: float = _key(600.0, "Longest retry delay.")
    done_retention_s: float = _key(86400.0, "How long finished jobs are kept before pruning.")
    idempotency_ttl_s: float = _key(172800.0, "How long idempotency keys are remembered (at least 24 h).")
    embed_batch_size: int = _key(1024, "Memories claimed per embed-pass batch (encoded sorted by length).")
    embed_encode_batch: int = _key(32, "Texts per model forward pass (small: less padding).")
    classify_margin: float = _key(0.05, "The embedding classifier decides alone above this lead over #2.")
    classify_llm: bool = _key(False, "Ask the LLM when the classifier's margin is low (for a capable model).")
    llm_timeout_s: float = _key(120.0, "Longest one LLM completion may take (the attempt then fails).")
    merge_min_cosine: float = _key(0.93, "Consolidate proposes a merge only at or above this cosine.")
    merge_min_jaccard: float = _key(0.6, "...and at or above this content-word overlap (and equal values).")
    reflect_min_cosine: float = _key(0.6, "Reflect considers neighbours at or above this cosine.")
    reflect_subject_jaccard: float = _key(0.0, "Extra floor on the masked subjects' word overlap (0 = off).")
    reflect_llm_veto: bool = _key(False, "Let the LLM veto reflect candidates (for a capable model only).")
    session_ttl_s: float = _key(86400.0, "Session-scope memories are archived after this many seconds.")
    archive_window_s: float = _key(2592000.0, "Archived memories are hard-deleted after this many seconds.")
    retention_interval_s: float = _key(600.0, "How often the retention sweep runs (expiry, purge).")
    retention_batch: int = _key(500, "Rows expired or purged per retention sweep.")
    decay_interval_s: float = _key(3600.0, "How often one decay batch runs.")
    decay_batch: int = _key(2000, "Rows whose importance one decay run updates.")
    decay_half_life_days: float = _key(30.0, "Importance halves after this many days without a read.")
    tick_interval_s: float = _key(60.0, "Safety-net wake of the pass runner (it also wakes on writes).")
    prune_interval_s: float = _key(3600.0, "How often finished jobs and expired idempotency keys are pruned.")
    governor_enabled: bool = _key(True, "Follow the machine's load; false keeps the state idle always.")
    governor_interval_s: float = _key(5.0, "Seconds between governor readings.")
    governor_busy_cpu_percent: float = _key(50.0, "Others' CPU % (all cores) that means busy.")
    governor_idle_cpu_percent: float = _key(30.0, "Others' CPU % below which busy turns idle again.")
    governor_busy_load_per_cpu: float = _key(1.5, "1-minute load average per core that means busy.")
    governor_pause_mem_available_mb: float = _key(512.0, "Available MiB below which model passes pause.")
    governor_pause_battery_percent: float = _key(20.0, "On battery below this charge, model passes pause.")
    governor_busy_on_battery: bool = _key(True, "Treat running on battery as busy.")
    busy_batch_size: int = _key(8, "Jobs per batch while busy (one pass per cycle).")
    busy_pause_s: float = _key(1.0, "Pause between batches while busy, leaving the CPU to the user.")
    access_flush_s: float = _key(
        1.0, "Read counts (access_count, last_accessed_at) from searches and gets wait up to this long "
        "to ride along with a write's transaction before they are committed alone.")
    runner_gather_s: float = _key(
        0.05, "After a write wakes the pass runner, and after a cycle whose batches all came up short, "
        "wait this long so work gathers into fuller batches (0 = never wait).")
    model_worker: bool = _key(True, "Run models in a child process that exits when idle (false: in-daemon).")
    model_idle_s: float = _key(300.0, "Seconds without model work before the model worker exits.")
    model_timeout_s: float = _key(300.0, "Longest one model request may take before the worker is killed.")
    model_threads: int = _key(2, "Threads for model inference when idle (the governor uses 1 when busy).")
    nice: int = _key(10, "CPU niceness the daemon gives itself at start (0 = unchanged).")
    shutdown_grace_s: float = _key(20.0, "On SIGTERM, seconds a running batch may take before release.")

    # -- derived paths ---------------------------------------------------
    def resolved_data_dir(self) -> Path:
        """The data directory, created on demand by the daemon."""
        return Path(self.data_dir).expanduser() if self.data_dir else Path(platformdirs.user_data_dir(APP))

    def resolved_db_url(self) -> str:
        """The store URL."""
        if self.db_url:
            return self.db_url
        return f"sqlite:///{self.resolved_data_dir() / 'memoryd.db'}"

    def resolved_socket(self) -> Path:
        """The agent socket path (PROTOCOL.md: flag, env, XDG runtime dir, state dir)."""
        if self.socket:
            return Path(self.socket).expanduser()
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        if runtime:
            return Path(runtime) / APP / SOCKET_NAME
        return Path(platformdirs.user_state_dir(APP)) / SOCKET_NAME

    def admin_socket(self) -> Path:
        """The operator socket, beside the agent socket."""
        return self.resolved_socket().with_name(ADMIN_SOCKET_NAME)

    def validate(self) -> None:
        """Raise ConfigError naming the key and the fix when a value is unusable."""
        positive = (
            "decay_batch", "retention_batch", "busy_batch_size", "model_threads",
            "max_frame_bytes", "max_content_bytes", "max_connections", "max_inflight_per_connection",
            "write_queue_max", "write_batch_max", "read_threads", "job_max_attempts", "embed_batch_size",
            "embed_encode_batch",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"config key {name!r} must be at least 1 (got {getattr(self, name)!r})")
        for name in ("job_lease_s", "backoff_base_s", "backoff_max_s", "tick_interval_s", "busy_timeout_ms",
                     "decay_half_life_days", "decay_interval_s", "retention_interval_s", "session_ttl_s",
                     "archive_window_s", "governor_interval_s", "model_idle_s", "model_timeout_s",
                     "llm_timeout_s", "prune_interval_s", "done_retention_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"config key {name!r} must be positive (got {getattr(self, name)!r})")
        if not 0.0 <= self.access_flush_s <= 60.0:
            raise ConfigError("config key 'access_flush_s' must be between 0 and 60 seconds "
                              f"(got {self.access_flush_s!r})")
        if not 0.0 <= self.runner_gather_s <= 5.0:
            raise ConfigError("config key 'runner_gather_s' must be between 0 and 5 seconds "
                              f"(got {self.runner_gather_s!r})")
        if self.busy_timeout_ms > 10000:
            # A longer wait would hold a write past the 30 s SIGTERM deadline.
            raise ConfigError("config key 'busy_timeout_ms' must be at most 10000 (10 s)")
        if self.idempotency_ttl_s < 86400:
            raise ConfigError("config key 'idempotency_ttl_s' must be at least 86400 (24 h, PROTOCOL.md)")
        if self.log_format not in ("auto", "json", "console"):
            raise ConfigError("config key 'log_format' must be 'auto', 'json' or 'console'")
        for name in ("merge_min_cosine", "merge_min_jaccard", "reflect_min_cosine",
                     "reflect_subject_jaccard", "classify_margin"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"config key {name!r} must be between 0 and 1 "
                                  f"(got {getattr(self, name)!r})")
        if not self.entity_types or any(not isinstance(t, str) or not t for t in self.entity_types):
            raise ConfigError("config key 'entity_types' must be a non-empty list of names")
        if any(t not in self.entity_types for t in self.llm_entity_types):
            raise ConfigError("config key 'llm_entity_types' may only name types in 'entity_types'")
        if not self.kinds or any(not isinstance(k, str) or not k or k == "auto" for k in self.kinds):
            raise ConfigError("config key 'kinds' must be a non-empty list of names other than 'auto'")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


ENV_KEYS = {
    "MEMORYD_DATA_DIR": "data_dir",
    "MEMORYD_DB_URL": "db_url",
    "MEMORYD_SOCKET": "socket",
    "MEMORYD_EMBEDDER": "embedder",
    "MEMORYD_LLM": "llm",
}


def default_config_path() -> Path:
    """``<platform config dir>/config.toml``."""
    return Path(platformdirs.user_config_dir(APP)) / "config.toml"


def load_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Config:
    """Build the effective configuration.

    Precedence, lowest first: defaults, the TOML file (``path``, else
    ``$MEMORYD_CONFIG``, else the platform config dir when it exists), the
    ``MEMORYD_*`` environment, then ``overrides`` whose value is not None.
    """
    values: dict[str, Any] = {}
    explicit = path or os.environ.get("MEMORYD_CONFIG")
    file_path = Path(explicit).expanduser() if explicit else default_config_path()
    if explicit and not file_path.exists():
        raise ConfigError(f"config file {file_path} does not exist; create it or drop --config")
    if file_path.exists():
        try:
            values.update(tomllib.loads(file_path.read_text(encoding="utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {file_path} is not valid TOML: {exc}") from exc
    for env, key in ENV_KEYS.items():
        if os.environ.get(env):
            values[key] = os.environ[env]
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name: f for f in fields(Config)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown config key(s) {', '.join(unknown)} in {file_path}; "
            "run `memoryd config` to list the valid keys"
        )
    for name, value in list(values.items()):
        values[name] = _coerce(name, known[name].default, known[name].default_factory, value)
    cfg = Config(**values)
    cfg.validate()
    return cfg


def _coerce(name: str, default: Any, factory: Any, value: Any) -> Any:
    proto = factory() if default is MISSING else default
    try:
        if isinstance(proto, bool):
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError("expected true or false")
                return value.lower() in ("true", "1", "yes")
            return bool(value)
        if isinstance(proto, int):
            return int(value)
        if isinstance(proto, float):
            return float(value)
        if isinstance(proto, list):
            if not isinstance(value, list):
                raise TypeError("expected a list")
            return list(value)
        if isinstance(proto, str):
            return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config key {name!r} has a bad value {value!r}: {exc}") from exc
    return value


def render_defaults() -> str:
    """The whole configuration as a commented TOML file with every default."""
    lines = ["# memoryd configuration; every key with its default.", ""]
    for f in fields(Config):
        default = f.default_factory() if f.default is MISSING else f.default  # type: ignore[operator]
        lines.append(f"# {f.metadata['help']}")
        lines.append(f"{f.name} = {_toml_value(default)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
