"""Configuration: defaults, the TOML file, the environment and flags, in that order.

Every key is a field of :class:`Config` with its default and a one-line help
text; ``memoryd config`` prints them all as a commented TOML file, and
docs/operations.md's table is generated from them
(``python -m memoryd.config --docs-table --write docs/operations.md``).
Values are checked strictly against the fields' types: TOML has real types,
so a float for an integer key or a string for a boolean is refused, never
converted.
"""

from __future__ import annotations

import math
import os
import re
import sys
import tomllib
import typing
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import platformdirs

from memoryd.errors import ConfigError

APP = "memoryd"
SOCKET_NAME = "memoryd.sock"
ADMIN_SOCKET_NAME = "memoryd-admin.sock"
ADMIN_DIR_NAME = "memoryd-admin"

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
    admin_socket_path: str = _key(
        "", "Operator socket ('' = memoryd-admin/memoryd-admin.sock in the parent of the agent "
        "socket's directory: a directory of its own, never inside the agent socket's).")
    embedder: str = _key("bundled", "Embedder: 'bundled' (all-MiniLM-L6-v2), 'none', or a model directory.")
    llm: str = _key("bundled", "LLM: 'bundled' (Gemma 3 270M), 'none', a GGUF path, or the http(s) URL "
                    "of an OpenAI-compatible completion server.")
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
    conn_max_buffered_bytes: int = _key(
        8388608, "Bytes of answers one client may leave unread (a connection, or an MCP bridge's "
        "editor) before further answers are refused with 1004; one answer goes alone whatever its size.")
    total_max_buffered_bytes: int = _key(
        67108864, "Bytes of answers all clients may leave unread before answers over 4 KiB are refused "
        "with 1004; one answer goes alone whatever its size.")
    write_queue_max: int = _key(4096, "Writes waiting for group commit before new ones answer 1004.")
    write_batch_max: int = _key(512, "Most writes carried by one group-commit transaction.")
    busy_timeout_ms: int = _key(5000, "SQLite busy timeout (ms); a write still locked after it answers 1003.")
    pg_lock_timeout_ms: int = _key(0, "PostgreSQL lock_timeout (ms): a statement waiting longer for a lock "
                                   "(a row, a table, another daemon's advisory lock) fails; a write then "
                                   "answers 1003 and a pass's jobs go back to the queue "
                                   "(0 = busy_timeout_ms).")
    pg_statement_timeout_ms: int = _key(60000, "PostgreSQL statement_timeout (ms): a longer statement is "
                                        "cancelled and answers 1003 (0 = none; migrations and index "
                                        "builds run without it).")
    pg_pool_size: int = _key(12, "PostgreSQL: connections one daemon keeps at most (writers, pass runner, "
                             "readers, schedules); one more listens for other daemons' jobs. N daemons "
                             "use N x (pg_pool_size + 1) of the server's max_connections.")
    pg_writers: int = _key(3, "PostgreSQL: write transactions one daemon commits at once, each on a "
                           "connection of its pool (SQLite has one writer).")
    read_threads: int = _key(4, "Threads serving reads (get, search, status).")
    job_lease_s: float = _key(300.0, "Seconds a claimed job stays leased before another worker may take it.")
    job_max_attempts: int = _key(5, "Attempts before a job is marked dead.")
    backoff_base_s: float = _key(2.0, "First retry delay after a failed attempt (doubles per attempt).")
    backoff_max_s: float = _key(600.0, "Longest retry delay.")
    done_retention_s: float = _key(86400.0, "How long finished jobs are kept before pruning.")
    idempotency_ttl_s: float = _key(172800.0, "How long idempotency keys are remembered (at least 24 h).")
    embed_batch_size: int = _key(1024, "Memories claimed per embed-pass batch (encoded sorted by length).")
    embed_encode_batch: int = _key(64, "Texts per model forward pass (a claimed batch is sorted by length).")
    vector_index: bool = _key(True, "Keep HNSW graphs beside the store (in the data directory) for each "
                              "owner with vector_index_min_rows vectors or more (false: the store's own "
                              "vector search only: SQLite's exact scan, pgvector's one HNSW index).")
    vector_index_min_rows: int = _key(20000, "An owner's vectors at which its graph is built (below it the "
                                      "exact scan costs a few ms).")
    vector_index_ef: int = _key(512, "HNSW search beam: higher finds more of the exact top-k, slower.")
    vector_index_part_rows: int = _key(100000, "Vectors per HNSW graph: a larger owner's rows are split by "
                                       "age into graphs of this size, searched side by side (one graph "
                                       "finds less of the exact top-k as it grows).")
    vector_index_split_ef: int = _key(1024, "HNSW search beam for each graph holding more than half of "
                                      "vector_index_part_rows vectors (vector_index_ef for smaller graphs, "
                                      "and for searches by kind).")
    vector_index_flat_rows: int = _key(200000, "An owner's vectors at which they are scanned flat as float16 "
                                       "codes, a slice a core, instead of walked as HNSW graphs: no build, "
                                       "768 bytes a vector in RAM, and a search time that does not depend "
                                       "on the vectors (0: graphs at any size).")
    lexical_index: bool = _key(True, "Once the store holds lexical_index_min_rows active memories, keep a "
                               "tantivy index of their words beside it (false: the store's full-text "
                               "search only, FTS5 or PostgreSQL's tsvector).")
    lexical_index_min_rows: int = _key(200000, "Active memories at which the lexical index is built (below "
                                       "it FTS5 ranks a query's matches in a few ms).")
    lexical_index_shard_rows: int = _key(100000, "Consecutive memories per shard of the lexical index (an "
                                         "erased text rebuilds its shard).")
    classify_margin: float = _key(0.05, "With classify_llm, a lead over the runner-up kind below this goes "
                                  "to the LLM (else the embedding classifier decides alone).")
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
    metrics_interval_s: float = _key(10.0, "Seconds between metrics.series readings (console charts).")
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
    search_reranker: str = _key(
        "", "Reranker for hybrid searches ('' = off): a local sentence-transformers CrossEncoder "
        "directory (never downloaded), or a rerank endpoint on loopback, e.g. "
        "http://127.0.0.1:8080/v1/rerank (llama.cpp) or http://127.0.0.1:8080/rerank "
        "(text-embeddings-inference). Also written [search] reranker = ...")
    search_rerank_budget_ms: float = _key(
        200.0, "Longest the reranker may take per search; past it the fused order stands, with a notice.")
    search_rerank_candidates: int = _key(
        40, "Fused candidates (scope-filtered, best first) the reranker reorders; the top k are answered.")
    search_learned_ranking: bool = _key(
        True, "Order a hybrid search's fused candidates that hold conversation turns by the learned "
        "ranking (weights fitted on the tuning half of tests/data/conversations/); false: fused order.")

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
        """The operator socket (PROTOCOL.md 1.1): its own 0700 directory beside the agent's.

        A sandbox that is given only the agent socket's directory cannot reach
        it: ``<parent of the agent socket's dir>/memoryd-admin/memoryd-admin.sock``.
        """
        if self.admin_socket_path:
            return Path(self.admin_socket_path).expanduser()
        return self.resolved_socket().parent.parent / ADMIN_DIR_NAME / ADMIN_SOCKET_NAME

    def validate(self) -> None:
        """Raise ConfigError naming the key and the fix when a value is out of range.

        The types are checked before (``load_config``); these are the rules
        beyond them. Each error's ``data.field`` is the key, so the loader can
        name where the value came from.
        """
        positive = (
            "decay_batch", "retention_batch", "busy_batch_size", "model_threads",
            "max_frame_bytes", "max_content_bytes", "max_connections", "max_inflight_per_connection",
            "conn_max_buffered_bytes", "total_max_buffered_bytes",
            "write_queue_max", "write_batch_max", "read_threads", "job_max_attempts", "embed_batch_size",
            "embed_encode_batch", "vector_index_min_rows", "vector_index_ef", "vector_index_part_rows",
            "vector_index_split_ef",
            "pg_writers",
            "lexical_index_min_rows", "lexical_index_shard_rows",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise _range_error(name, "at least 1", getattr(self, name))
        for name in ("job_lease_s", "backoff_base_s", "backoff_max_s", "tick_interval_s", "busy_timeout_ms",
                     "decay_half_life_days", "decay_interval_s", "retention_interval_s", "session_ttl_s",
                     "archive_window_s", "governor_interval_s", "metrics_interval_s", "model_idle_s",
                     "model_timeout_s",
                     "llm_timeout_s", "prune_interval_s", "done_retention_s"):
            if getattr(self, name) <= 0:
                raise _range_error(name, "positive", getattr(self, name))
        if not 0.0 <= self.access_flush_s <= 60.0:
            raise _range_error("access_flush_s", "between 0 and 60 seconds", self.access_flush_s)
        if not 0.0 <= self.runner_gather_s <= 5.0:
            raise _range_error("runner_gather_s", "between 0 and 5 seconds", self.runner_gather_s)
        if self.busy_timeout_ms > 10000:
            # A longer wait would hold a write past the 30 s SIGTERM deadline.
            raise _range_error("busy_timeout_ms", "at most 10000 (10 s)", self.busy_timeout_ms)
        if self.pg_pool_size < self.pg_writers + 2:  # the writers, plus the runner and a reader
            raise _range_error("pg_pool_size", f"at least pg_writers + 2 ({self.pg_writers + 2})",
                               self.pg_pool_size)
        if not 0 <= self.pg_lock_timeout_ms <= 10000:  # the same bound, for the same reason
            raise _range_error("pg_lock_timeout_ms", "from 0 to 10000 (10 s)", self.pg_lock_timeout_ms)
        if self.vector_index_flat_rows < 0:
            raise _range_error("vector_index_flat_rows", "0 (graphs at any size) or more",
                               self.vector_index_flat_rows)
        if self.pg_statement_timeout_ms < 0:
            raise _range_error("pg_statement_timeout_ms", "0 (none) or more", self.pg_statement_timeout_ms)
        if self.idempotency_ttl_s < 86400:
            raise _range_error("idempotency_ttl_s", "at least 86400 (24 h, PROTOCOL.md)",
                               self.idempotency_ttl_s)
        if self.log_format not in ("auto", "json", "console"):
            raise _range_error("log_format", "'auto', 'json' or 'console'", self.log_format)
        for name in ("merge_min_cosine", "merge_min_jaccard", "reflect_min_cosine",
                     "reflect_subject_jaccard", "classify_margin"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise _range_error(name, "between 0 and 1", getattr(self, name))
        if not self.entity_types or any(not t for t in self.entity_types):
            raise _range_error("entity_types", "a non-empty list of names", self.entity_types)
        if any(t not in self.entity_types for t in self.llm_entity_types):
            raise _range_error("llm_entity_types", "a list of types that 'entity_types' also names",
                               self.llm_entity_types)
        if not self.kinds or any(not k or k == "auto" for k in self.kinds):
            raise _range_error("kinds", "a non-empty list of names other than 'auto'", self.kinds)
        self._validate_reranker()

    def _validate_reranker(self) -> None:
        from memoryd.rerank import is_url  # light: the model code loads only when used
        from memoryd.rerank.endpoint import EndpointRefused, check_loopback

        if is_url(self.search_reranker):
            try:
                check_loopback(self.search_reranker)
            except EndpointRefused as exc:
                raise ConfigError(f"config key 'search_reranker': {exc}",
                                  data={"field": "search_reranker"}) from None
        if not 0.0 < self.search_rerank_budget_ms <= 10000.0:
            raise _range_error("search_rerank_budget_ms", "above 0 and at most 10000 (10 s)",
                               self.search_rerank_budget_ms)
        if not 1 <= self.search_rerank_candidates <= 200:
            raise _range_error("search_rerank_candidates", "from 1 to 200", self.search_rerank_candidates)

    def as_dict(self) -> dict[str, Any]:
        """Every key and its value, as plain data (what ``memoryd config --json`` prints)."""
        return asdict(self)


def _range_error(name: str, rule: str, value: Any) -> ConfigError:
    return ConfigError(f"config key {name!r} must be {rule} (got {_shown(value)})", data={"field": name})


ENV_KEYS = {
    "MEMORYD_DATA_DIR": "data_dir",
    "MEMORYD_DB_URL": "db_url",
    "MEMORYD_SOCKET": "socket",
    "MEMORYD_ADMIN_SOCKET": "admin_socket_path",
    "MEMORYD_EMBEDDER": "embedder",
    "MEMORYD_LLM": "llm",
}

#: Config key -> the `memoryd run` option that sets it (tests check cli.py declares each).
RUN_FLAGS = {
    "data_dir": "--data-dir",
    "db_url": "--db-url",
    "socket": "--socket",
    "admin_socket_path": "--admin-socket",
    "embedder": "--embedder",
    "llm": "--llm",
    "log_level": "--log-level",
    "log_format": "--log-format",
}


def default_config_path() -> Path:
    """``<platform config dir>/config.toml``."""
    return Path(platformdirs.user_config_dir(APP)) / "config.toml"


def load_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Config:
    """Build the effective configuration, checking every value's type strictly.

    Precedence, lowest first: defaults, the TOML file (``path``, else
    ``$MEMORYD_CONFIG``, else the platform config dir when it exists), the
    ``MEMORYD_*`` environment, then ``overrides`` (the command-line options)
    whose value is not None. An unknown key, a value of the wrong type or
    one out of range raises :class:`ConfigError` naming the key, what it
    takes, the value given and where it came from (file, variable or option).
    """
    schema = key_types()
    given: dict[str, tuple[Any, str]] = {}
    explicit = path or os.environ.get("MEMORYD_CONFIG")
    file_path = Path(explicit).expanduser() if explicit else default_config_path()
    if explicit and not file_path.exists():
        raise ConfigError(f"config file {file_path} does not exist; create it or drop --config")
    if file_path.exists():
        try:
            data = tomllib.loads(file_path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {file_path} is not valid TOML: {exc}") from exc
        source = f"config file {file_path}"
        data = _flatten_tables(data)
        _refuse_unknown(data, schema, source)
        for name, value in data.items():
            given[name] = (_typed(name, schema[name], value, source), source)
    for env, name in ENV_KEYS.items():
        text = os.environ.get(env)
        if text:  # an empty variable counts as unset
            source = f"environment variable {env}"
            given[name] = (_from_text(name, schema[name], text, source), source)
    chosen = {name: value for name, value in overrides.items() if value is not None}
    _refuse_unknown(chosen, schema, "the options")
    for name, value in chosen.items():
        source = f"option {RUN_FLAGS.get(name, name)}"
        given[name] = (_typed(name, schema[name], value, source), source)
    cfg = Config(**{name: value for name, (value, _) in given.items()})
    try:
        cfg.validate()
    except ConfigError as exc:
        field_name = exc.data.get("field")
        if field_name in given:
            raise ConfigError(f"{exc.message}, set by {given[field_name][1]}", data=exc.data) from None
        raise
    return cfg


# -- strict types ----------------------------------------------------------
#
# TOML has real integers, floats, booleans, strings and arrays, so a value of
# another type is refused rather than converted: int(1.9) would silently give
# 1 and bool(2) True. The one widening is an integer for a float key (30 for
# 30.0). Environment variables are text: they are parsed by the same rules
# (a bool only from true, false, 1 or 0).

_TYPE_WORDS: dict[Any, str] = {
    str: "a string", int: "an integer", float: "a number", bool: "true or false",
    list: "a list of strings",
}
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
_BOOL_TEXT = {"true": True, "1": True, "false": False, "0": False}


def key_types() -> dict[str, type]:
    """Config key -> the Python type its value must have (``list`` for ``list[str]``)."""
    hints = typing.get_type_hints(Config)
    out: dict[str, type] = {}
    for f in fields(Config):
        hint = hints[f.name]
        out[f.name] = typing.get_origin(hint) or hint
    return out


#: TOML tables whose keys are config keys with the table's name as prefix:
#: ``[search] reranker = ...`` is ``search_reranker = ...``.
TABLES = ("search",)


def _flatten_tables(data: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in data.items():
        if name in TABLES and isinstance(value, dict):
            out.update({f"{name}_{key}": item for key, item in value.items()})
        else:
            out[name] = value
    return out


def _refuse_unknown(values: dict[str, Any], schema: dict[str, type], source: str) -> None:
    unknown = sorted(set(values) - set(schema))
    if not unknown:
        return
    import difflib  # only on this error path: it costs more to import than the rest of the module

    named = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(schema), n=1)
        named.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    raise ConfigError(
        f"unknown config key(s) {', '.join(named)} in {source}; "
        "run `memoryd config` to list the valid keys", data={"field": unknown[0]})


def _typed(name: str, expected: type, value: Any, source: str) -> Any:
    """``value`` if it has the key's type (an integer widened for a float key), else ConfigError."""
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif expected is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if ok:
            value = float(value)
    elif expected is list:
        ok = isinstance(value, list) and all(isinstance(item, str) for item in value)
        if ok:
            value = list(value)
    else:
        ok = isinstance(value, expected)
    if not ok:
        raise _type_error(name, expected, value, source)
    return value


def _from_text(name: str, expected: type, text: str, source: str) -> Any:
    """An environment variable's text parsed by the key's type, or ConfigError."""
    if expected is str:
        return text
    stripped = text.strip()
    if expected is bool and stripped.lower() in _BOOL_TEXT:
        return _BOOL_TEXT[stripped.lower()]
    if expected is int and _INT_TEXT.fullmatch(stripped):
        return int(stripped)
    if expected is float and _FLOAT_TEXT.fullmatch(stripped):
        return float(stripped)
    raise _type_error(name, expected, text, source)


def _type_error(name: str, expected: type, value: Any, source: str) -> ConfigError:
    default = fields_by_name()[name]
    if expected is float:
        takes = "a finite number (an integer or a float)"
    elif expected is bool and source.startswith("environment"):
        takes = "true, false, 1 or 0"
    else:
        takes = _TYPE_WORDS[expected]
    return ConfigError(
        f"config key {name!r} takes {takes}, but {source} gives {_shown(value)} ({_kind(value)}); "
        f"write it like the default: {name} = {_toml_value(default_of(default))}",
        data={"field": name})


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list" if all(isinstance(v, str) for v in value) else "a list with non-strings"
    if isinstance(value, dict):
        return "a table"
    return f"a TOML {type(value).__name__}"


def _shown(value: Any) -> str:
    """A value as TOML would spell it, cut to a readable length."""
    text = _toml_value(value)
    return text if len(text) <= 80 else text[:77] + "..."


def fields_by_name() -> dict[str, Field[Any]]:
    """Config key -> its dataclass field (default, help text)."""
    return {f.name: f for f in fields(Config)}


def default_of(f: Field[Any]) -> Any:
    """A field's default value."""
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[operator]


# -- rendering ---------------------------------------------------------------


def render_defaults() -> str:
    """The whole configuration as a commented TOML file with every default."""
    lines = ["# memoryd configuration; every key with its default.", ""]
    for f in fields(Config):
        lines.append(f"# {f.metadata['help']}")
        lines.append(f"{f.name} = {_toml_value(default_of(f))}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if not isinstance(value, str):
        return str(value)
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


DOCS_TABLE_START = ("<!-- config-table:start (generated by `python -m memoryd.config --docs-table`; "
                    "do not edit) -->")
DOCS_TABLE_END = "<!-- config-table:end -->"


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell (no stray HTML tags, no column breaks)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def docs_table() -> str:
    """docs/operations.md's table of every key, markers included, in ``memoryd config`` order."""
    envs = {name: env for env, name in ENV_KEYS.items()}
    lines = [DOCS_TABLE_START, "| key | default | flag, environment | meaning |", "|---|---|---|---|"]
    for f in fields(Config):
        also = ", ".join(f"`{x}`" for x in (RUN_FLAGS.get(f.name), envs.get(f.name)) if x) or "-"
        default = _toml_value(default_of(f))
        lines.append(f"| `{f.name}` | `{default}` | {also} | {_cell(f.metadata['help'])} |")
    lines.append(DOCS_TABLE_END)
    return "\n".join(lines)


def with_docs_table(text: str) -> str:
    """``text`` (a markdown page) with its config-table region replaced by :func:`docs_table`."""
    # Found by the start marker's prefix, so a page with an older marker line is rewritten too.
    start = text.find(DOCS_TABLE_START.split(" (", 1)[0])
    end = text.find(DOCS_TABLE_END, max(start, 0))
    if start < 0 or end < 0:
        raise ValueError("the page has no config-table:start/end markers")
    return text[:start] + docs_table() + text[end + len(DOCS_TABLE_END):]


def main(argv: list[str] | None = None) -> int:
    """``python -m memoryd.config --docs-table [--write FILE]``: print or rewrite the docs table."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m memoryd.config",
                                     description="Generate the configuration table of docs/operations.md.")
    parser.add_argument("--docs-table", action="store_true", required=True,
                        help="print the table (with its markers) to stdout")
    parser.add_argument("--write", metavar="FILE", type=Path,
                        help="replace the marked region of FILE instead of printing")
    args = parser.parse_args(argv)
    if args.write:
        args.write.write_text(with_docs_table(args.write.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        sys.stdout.write(docs_table() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
