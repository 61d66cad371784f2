"""Shared fixtures: real ``memoryd run`` subprocesses on short temp dirs.

``start_daemon(...)`` starts a daemon (``--embedder none`` unless asked) and
returns once it answers daemon.ping; at teardown every daemon still running is
stopped with SIGTERM and must exit 0. Each daemon's stderr goes to a file that
is attached to the report of a failing test.

Unix socket paths must stay under 108 bytes, so the temp dirs live directly
under /tmp with short names rather than under pytest's tmp_path.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import DaemonHandle, hermetic_env, render_toml

DAEMONS = pytest.StashKey[list[DaemonHandle]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the stderr of every daemon the test started to its failure report."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        handles = list(item.stash.get(DAEMONS, []))
        handles += [v for v in getattr(item, "funcargs", {}).values()
                    if isinstance(v, DaemonHandle) and all(v is not h for h in handles)]
        for handle in handles:
            report.sections.append((f"memoryd stderr ({handle.name})", handle.stderr_tail()))


def _short_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="md-", dir="/tmp"))


def _new_handle(root: Path, name: str, *, embedder: str = "none", config: dict[str, Any] | None = None,
                data_dir: Path | None = None, socket: Path | None = None, user: int | None = None,
                group: int | None = None, python: str | None = None,
                env: dict[str, str] | None = None, db_url: str | None = None) -> DaemonHandle:
    home = root / name
    home.mkdir(mode=0o700)
    handle = DaemonHandle(
        name=name, home=home, data_dir=data_dir or home / "data",
        socket=socket or home / "s" / "memoryd.sock", embedder=embedder, env=hermetic_env(home, env),
        db_url=db_url,
    )
    if python:
        handle.python = python
    if config:
        handle.config_path = home / "config.toml"
        handle.config_path.write_text(render_toml(config), encoding="utf-8")
    if user is not None:
        handle.user, handle.group = user, group if group is not None else user
        root.chmod(0o711)  # let the other user reach its own dir, and nothing else
        for path in (home, handle.config_path):
            if path is not None:
                os.chown(path, handle.user, handle.group)
    return handle


def _stop_all(handles: list[DaemonHandle]) -> None:
    """SIGTERM every daemon still running; fail unless each exits 0."""
    problems = []
    for handle in handles:
        handle.close_clients()
        if handle.running:
            rc = handle.stop()
            if rc != 0 and handle.expect_clean_exit:
                problems.append(f"memoryd {handle.name} exited with {rc} on SIGTERM, expected 0")
    if problems:
        pytest.fail("\n".join(problems))


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A private temp dir with a short path (/tmp/md-XXXXXXXX), removed afterwards."""
    path = _short_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_daemon(request: pytest.FixtureRequest, short_tmp: Path,
                 new_db_url: Callable[[], str | None]) -> Iterator[Callable[..., DaemonHandle]]:
    """Factory: ``start_daemon(embedder="none", config=None, ...)`` → a running DaemonHandle.

    Keyword arguments:
      name        label for the daemon (its files live in <tmp>/<name>/)
      embedder    "none" (default, fast) or "bundled"
      config      dict of memoryd.config.Config keys, written as a TOML --config file
      data_dir    a data dir (default <tmp>/<name>/data); share one to test the data-dir lock
      socket      the agent socket path (default <tmp>/<name>/s/memoryd.sock)
      user, group run the daemon as this uid/gid (root only)
      python      interpreter to run ``-m memoryd`` with
      env         extra environment variables
      db_url      the store URL (default: the test's backend: SQLite in the data dir, or a
                  fresh PostgreSQL database per daemon)
      start       False returns the handle unstarted (call .start() or .run_to_exit())
    """
    handles: list[DaemonHandle] = []
    request.node.stash[DAEMONS] = handles

    def make(name: str | None = None, *, start: bool = True, **options: Any) -> DaemonHandle:
        options.setdefault("db_url", new_db_url())
        handle = _new_handle(short_tmp, name or f"d{len(handles) + 1}", **options)
        handles.append(handle)
        if start:
            handle.start()
        return handle

    yield make
    _stop_all(handles)


@pytest.fixture
def daemon(start_daemon: Callable[..., DaemonHandle]) -> DaemonHandle:
    """One running daemon with the default configuration and ``--embedder none``."""
    return start_daemon()


@pytest.fixture(scope="module")
def module_daemon(module_new_db_url: Callable[[], str | None]) -> Iterator[DaemonHandle]:
    """One daemon (defaults, ``--embedder none``) shared by a whole test module.

    For tests that only send bad input and check the daemon shrugs it off: one
    daemon surviving all of them is the stronger claim, and it saves a start per
    test. Such tests must judge what they wrote by content or by before/after
    counts, since the store is shared.
    """
    root = _short_dir()
    handle = _new_handle(root, "shared", db_url=module_new_db_url())
    try:
        handle.start()
        yield handle
        _stop_all([handle])
    finally:
        handle.kill()
        shutil.rmtree(root, ignore_errors=True)


# -- PostgreSQL (tests/postgres.py) ------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One embedded PostgreSQL 18 + pgvector server for the whole session (started on first use)."""
    from tests.postgres import start_server, stop_server

    server = start_server()
    yield server
    stop_server(server)


@pytest.fixture
def pg_url(pg_server: Any) -> Iterator[str]:
    """The SQLAlchemy URL of a fresh, empty PostgreSQL database for one test (dropped after it)."""
    with pg_server.database() as url:
        yield url


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that reaches a daemon (its fixtures include ``backend``) once per store
    backend: SQLite, then PostgreSQL (its parameter carries the ``postgres`` marker, so
    ``-m "not postgres"`` leaves it out). Left on SQLite alone, without a parameter in the id:
    a test marked ``sqlite_only(reason)`` (it is about the SQLite file itself), and a test that
    is PostgreSQL's already (marked ``postgres``, or given its database by ``pg_url``)."""
    if "backend" not in metafunc.fixturenames:
        return
    only = metafunc.definition.get_closest_marker("sqlite_only")
    if only is not None:
        reason = only.kwargs.get("reason", only.args[0] if only.args else "")
        if not isinstance(reason, str) or not reason.strip():
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: sqlite_only needs a reason")
        return
    if metafunc.definition.get_closest_marker("postgres") or "pg_url" in metafunc.fixturenames:
        return
    metafunc.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True, scope="module")


@pytest.fixture(scope="module")
def backend(request: pytest.FixtureRequest) -> str:
    """The store backend daemons of this test use: ``sqlite`` (a file in the data dir) or
    ``postgres`` (a fresh database on the session's embedded server, per daemon)."""
    return str(getattr(request, "param", "sqlite"))


def _db_urls(request: pytest.FixtureRequest, backend: str) -> Iterator[Callable[[], str | None]]:
    made: list[str] = []
    server: Any = None

    def new() -> str | None:
        nonlocal server
        if backend != "postgres":
            return None
        if server is None:
            server = request.getfixturevalue("pg_server")
        name = server.create_database()
        made.append(name)
        return str(server.url(name))

    yield new
    for name in made:
        server.drop_database(name)


@pytest.fixture
def new_db_url(request: pytest.FixtureRequest, backend: str) -> Iterator[Callable[[], str | None]]:
    """Factory: a fresh store URL for a daemon (None on SQLite: the daemon's data dir holds it)."""
    yield from _db_urls(request, backend)


@pytest.fixture(scope="module")
def module_new_db_url(request: pytest.FixtureRequest, backend: str) -> Iterator[Callable[[], str | None]]:
    """:func:`new_db_url` for module-scoped daemons."""
    yield from _db_urls(request, backend)
