"""A real ``memoryd run`` subprocess on a short temp dir, and the helpers tests use with it.

The fixtures in tests/conftest.py build :class:`DaemonHandle` objects; the
integration tests speak to them only over the daemon's real Unix sockets (and
read the store directly, its SQLite file or its PostgreSQL database, where the
test is about what was stored).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import memoryd
from memoryd.service.client import AccessDenied, Client, ClientError, NotRunning
from memoryd.store.driver import connect

T = TypeVar("T")

#: Startup imports SQLAlchemy and alembic and migrates a fresh file; generous for a loaded CI box.
START_TIMEOUT_S = 60.0
#: PROTOCOL.md: SIGTERM → exit 0 within 30 s.
STOP_TIMEOUT_S = 30.0
STDERR_TAIL_CHARS = 20000

SRC_DIR = Path(memoryd.__file__).resolve().parents[1]
SITE_PACKAGES = sysconfig.get_paths()["purelib"]


class DaemonExited(AssertionError):
    """The daemon exited while a test expected it to be serving."""


def wait_until(predicate: Callable[[], T], *, timeout_s: float = 20.0, interval_s: float = 0.05,
               message: str = "condition") -> T:
    """Poll ``predicate`` until it returns a truthy value; return that value.

    Used to observe asynchronous effects (access-count flushes, queues
    draining); the timeout is a hang guard, never an assertion about speed.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {message}")
        time.sleep(interval_s)


def hermetic_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a daemon or CLI: no MEMORYD_* settings, no user config file.

    HOME and the XDG dirs point into the test's temp dir, so a developer's
    ``~/.config/memoryd/config.toml`` or ``$MEMORYD_SOCKET`` never leaks in.
    PYTHONPATH is the source tree the tests imported memoryd from, so a daemon
    runs the code under test even when the venv's editable install points at
    another checkout (a git worktree sharing one venv).
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MEMORYD_") and k not in ("XDG_RUNTIME_DIR", "PYTHONPATH")}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        XDG_CACHE_HOME=str(home / ".cache"),
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=str(SRC_DIR),
    )
    env.update(extra or {})
    return env


def render_toml(values: Mapping[str, Any]) -> str:
    """A flat TOML document for the daemon's --config (the keys of memoryd.config.Config)."""
    lines = []
    for key, value in values.items():
        lines.append(f"{key} = {json.dumps(value)}")  # JSON scalars and lists are valid TOML here
    return "\n".join(lines) + "\n"


def run_cli(args: list[str], env: Mapping[str, str], *, python: str | None = None,
            timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``python -m memoryd ARGS`` with captured output."""
    return subprocess.run(
        [python or sys.executable, "-m", "memoryd", *args], env=dict(env), capture_output=True,
        text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, check=False,
    )


@dataclass
class DaemonHandle:
    """One ``memoryd run`` process and everything a test needs to reach it."""

    name: str
    home: Path
    data_dir: Path
    socket: Path
    embedder: str = "none"
    #: ``--llm``: none (the default here), bundled, a GGUF path or an http:// URL; None passes no
    #: ``--llm`` (the config file or MEMORYD_LLM decides, keeping the value off the command line).
    llm: str | None = "none"
    config_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    python: str = sys.executable
    user: int | None = None
    group: int | None = None
    #: More ``memoryd run`` options, after the defaults (click keeps the last of a repeated one).
    extra_args: list[str] = field(default_factory=list)
    #: ``--db-url`` (a PostgreSQL database); None keeps the SQLite file in the data dir.
    db_url: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    #: Set for daemons the fixture must stop at teardown (and expect exit 0 from).
    expect_clean_exit: bool = True
    _clients: list[Client] = field(default_factory=list)

    # -- paths -------------------------------------------------------------
    @property
    def admin_socket(self) -> Path:
        # PROTOCOL.md 1.1: its own directory in the parent of the agent socket's directory.
        return self.socket.parent.parent / "memoryd-admin" / "memoryd-admin.sock"

    @property
    def db_path(self) -> Path:
        return self.data_dir / "memoryd.db"

    @property
    def store_url(self) -> str:
        """The SQLAlchemy URL of the daemon's store, whichever the backend."""
        return self.db_url or f"sqlite:///{self.db_path}"

    @property
    def stderr_path(self) -> Path:
        return self.home / f"{self.name}.stderr"

    @property
    def argv(self) -> list[str]:
        args = [self.python, "-m", "memoryd", "run", "--data-dir", str(self.data_dir),
                "--socket", str(self.socket), "--embedder", self.embedder, "--log-format", "json"]
        if self.llm is not None:
            args += ["--llm", self.llm]
        if self.config_path is not None:
            args += ["--config", str(self.config_path)]
        if self.db_url is not None:
            args += ["--db-url", self.db_url]
        return args + self.extra_args

    # -- process -------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self) -> None:
        """Start the process without waiting for it (see :meth:`start`)."""
        assert not self.running, f"{self.name} is already running"
        extra: dict[str, Any] = {}
        if self.user is not None:
            extra.update(user=self.user, group=self.group, extra_groups=[])
        with open(self.stderr_path, "ab") as err:
            err.write(f"--- spawn {' '.join(self.argv)}\n".encode())
            err.flush()
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                cwd="/", **extra,
            )

    def start(self, timeout_s: float = START_TIMEOUT_S) -> DaemonHandle:
        """Start the daemon and return once it answers daemon.ping with its own pid."""
        self.spawn()
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                raise DaemonExited(
                    f"memoryd {self.name} exited with code {rc} during start:\n{self.stderr_tail()}")
            try:
                with Client(self.socket, timeout_s=5.0) as c:
                    pong = c.call("daemon.ping")
                if pong.get("pid") == self.proc.pid:
                    return self
                last_error = AssertionError(f"another daemon (pid {pong.get('pid')}) answered")
            except (NotRunning, AccessDenied, ClientError, OSError) as exc:
                last_error = exc
            time.sleep(0.05)
        self.kill()
        raise AssertionError(f"memoryd {self.name} did not answer daemon.ping within {timeout_s}s "
                             f"(last error: {last_error!r}):\n{self.stderr_tail()}")

    def run_to_exit(self, timeout_s: float = START_TIMEOUT_S) -> int:
        """Start a daemon that is expected to refuse to run; return its exit code."""
        self.expect_clean_exit = False
        self.spawn()
        assert self.proc is not None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"memoryd {self.name} kept running; expected it to exit:\n"
                                 f"{self.stderr_tail()}") from None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; return the exit code (the process is killed if it hangs)."""
        self.close_clients()
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"memoryd {self.name} did not exit within {timeout_s}s of SIGTERM:\n"
                                 f"{self.stderr_tail()}") from None

    def kill(self) -> None:
        """SIGKILL and reap (a crash: no shutdown code runs)."""
        self.close_clients()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stderr_tail(self) -> str:
        return self.stderr_text()[-STDERR_TAIL_CHARS:]

    # -- clients ---------------------------------------------------------------
    def client(self, *, admin: bool = False, timeout_s: float = 30.0) -> Client:
        """A new connection (closed by the fixture at teardown)."""
        c = Client(self.admin_socket if admin else self.socket, timeout_s=timeout_s)
        self._clients.append(c)
        return c

    def call(self, method: str, params: dict[str, Any] | None = None, *, admin: bool = False) -> Any:
        """One request on a fresh connection."""
        with Client(self.admin_socket if admin else self.socket) as c:
            return c.call(method, params or {})

    def write(self, content: str, **params: Any) -> dict[str, Any]:
        """memory.write; owner defaults to agent_id 'agent-a' unless a scope key is given."""
        if not any(k in params for k in ("agent_id", "user_id", "project", "session_id")) \
                and params.get("scope", "agent") == "agent":
            params["agent_id"] = "agent-a"
        result: dict[str, Any] = self.call("memory.write", {"content": content, **params})
        return result

    def assert_alive(self) -> None:
        """The daemon still answers daemon.ping on a new connection."""
        assert self.proc is not None
        pong = self.call("daemon.ping")
        assert pong["pid"] == self.proc.pid
        assert pong["protocol"] == 1

    def close_clients(self) -> None:
        for c in self._clients:
            with contextlib.suppress(OSError):
                c.close()
        self._clients.clear()

    # -- the store, read directly ------------------------------------------------
    @contextlib.contextmanager
    def db(self) -> Iterator[Any]:
        """A raw connection to the daemon's store (autocommit): its SQLite file, or its
        PostgreSQL database (``?`` placeholders work on both)."""
        if self.db_url is not None:
            with pg_connection(self.db_url) as pg:
                yield pg
            return
        conn = connect(str(self.db_path))
        conn.isolation_level = None
        try:
            yield conn
        finally:
            conn.close()

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self.db() as conn:
            return [tuple(r) for r in conn.execute(sql, params).fetchall()]

    def scalar(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    def count_content(self, content: str) -> int:
        """Memory rows holding exactly this content."""
        return int(self.scalar("SELECT count(*) FROM memories WHERE content = ?", (content,)))


def vector_bytes_sql(handle: DaemonHandle, column: str = "vector") -> str:
    """SQL for the float32 bytes of a stored vector in ``memory_vectors``: the blob's length on
    SQLite; on PostgreSQL pgvector's dimensions x 4 (a ``vector`` holds 4-byte floats)."""
    return f"vector_dims({column}) * 4" if handle.db_url is not None else f"length({column})"


class QmarkConnection:
    """A psycopg connection that takes SQLite's ``?`` placeholders, so a test's SQL about what
    was stored reads the same on both backends."""

    def __init__(self, conn: Any):
        self.conn = conn

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        if not params:
            return self.conn.execute(sql)
        return self.conn.execute(sql.replace("%", "%%").replace("?", "%s"), params)


@contextlib.contextmanager
def pg_connection(db_url: str) -> Iterator[QmarkConnection]:
    """An autocommit psycopg connection to a SQLAlchemy ``postgresql+psycopg://`` URL.

    JSON columns read as their text, as SQLite returns them, so a test's ``json.loads`` of
    ``metadata`` or ``detail`` reads the same on both backends."""
    import psycopg
    from psycopg.types.string import TextLoader

    conn = psycopg.connect(db_url.replace("postgresql+psycopg://", "postgresql://", 1), autocommit=True)
    for json_type in ("json", "jsonb"):
        conn.adapters.register_loader(json_type, TextLoader)
    try:
        yield QmarkConnection(conn)
    finally:
        conn.close()


@contextlib.contextmanager
def hold_memories_lock(handle: DaemonHandle) -> Iterator[None]:
    """Keep the daemon from writing a memory until the block ends, whichever the backend:
    SQLite's write lock on its file (:func:`hold_write_lock`), or on PostgreSQL an EXCLUSIVE
    lock on ``memories`` (reads go on; every INSERT waits)."""
    if handle.db_url is None:
        with hold_write_lock(handle.db_path):
            yield
        return
    with pg_connection(handle.db_url) as pg:
        pg.execute("BEGIN")
        pg.execute("LOCK TABLE memories IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            pg.execute("ROLLBACK")


@contextlib.contextmanager
def hold_write_lock(db_path: Path) -> Iterator[Any]:
    """Hold SQLite's write lock (BEGIN IMMEDIATE) on ``db_path`` until the block ends."""
    conn = connect(str(db_path), timeout_s=10.0)
    conn.isolation_level = None
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("ROLLBACK")
    finally:
        conn.close()


class RawConnection:
    """A bare socket speaking newline-delimited JSON, for frames the Client will not send."""

    def __init__(self, path: Path, timeout_s: float = 30.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self.sock.connect(str(path))
        self._buf = b""

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_json(self, obj: Any) -> None:
        self.send(json.dumps(obj).encode() + b"\n")

    def request(self, method: str, params: dict[str, Any] | None = None, req_id: Any = 1) -> None:
        self.send_json({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params or {}})

    def read(self) -> dict[str, Any]:
        """The next response line (raises ConnectionError when the daemon closed)."""
        while b"\n" not in self._buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        msg: dict[str, Any] = json.loads(line)
        return msg

    def nothing_more_within(self, seconds: float) -> bool:
        """True when no further byte arrives within ``seconds`` and the connection stays open.

        Used to show a non-answer. A connection the daemon closed is not a
        non-answer (a crash closes it too), so it gives False, as any byte does.
        """
        if self._buf:
            return False
        previous = self.sock.gettimeout()
        self.sock.settimeout(seconds)
        try:
            self.sock.recv(1)  # a byte is an answer; b"" means the daemon closed the connection
            return False
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(previous)
