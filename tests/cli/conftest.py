"""Fixtures for the CLI suite: the venv's real ``memoryd`` command against a real daemon.

Every command runs as a subprocess of the console script installed beside
the test interpreter (``.venv/bin/memoryd`` in a checkout), with a hermetic
environment (no MEMORYD_* settings or config file from the developer) whose
``MEMORYD_SOCKET`` names the test daemon's socket. ``COLUMNS`` is wide so
that rich never folds an id or a notice across lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.harness import DaemonHandle, hermetic_env

#: The console script of the environment running the tests.
MEMORYD = Path(sys.executable).with_name("memoryd")
WIDE = {"COLUMNS": "200", "LINES": "60"}


@dataclass
class Cli:
    """Runs ``memoryd ARGS`` as a subprocess with a fixed environment."""

    env: dict[str, str]
    daemon: DaemonHandle | None = None
    calls: list[list[str]] = field(default_factory=list)

    def __call__(self, *args: str, env: Mapping[str, str] | None = None, input: str | None = None,
                 timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(args))
        return subprocess.run(
            [str(MEMORYD), *args], env={**self.env, **(env or {})}, input=input, capture_output=True,
            text=True, timeout=timeout_s, check=False,
            stdin=None if input is not None else subprocess.DEVNULL,
        )

    def shell(self, line: str, *, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """One shell command line, run by ``sh -c`` exactly as written."""
        self.calls.append(["sh", "-c", line])
        return subprocess.run(["sh", "-c", line], env=self.env, capture_output=True, text=True,
                              timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)


def cli_env(daemon: DaemonHandle, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The hermetic environment of a client of ``daemon`` (its socket in MEMORYD_SOCKET)."""
    return hermetic_env(daemon.home, {"MEMORYD_SOCKET": str(daemon.socket), **WIDE, **(extra or {})})


@pytest.fixture(scope="session")
def memoryd_script() -> Path:
    """The ``memoryd`` console script of this environment (the suite is about it, so it must exist)."""
    assert MEMORYD.exists() and os.access(MEMORYD, os.X_OK), (
        f"no memoryd console script at {MEMORYD}; install the package into this environment "
        "(make install-dev)")
    return MEMORYD


@pytest.fixture
def cli_for(memoryd_script: Path) -> Callable[[DaemonHandle], Cli]:
    """Factory: the CLI pointed at a running daemon."""

    def make(daemon: DaemonHandle) -> Cli:
        return Cli(env=cli_env(daemon), daemon=daemon)

    return make


@pytest.fixture
def cli(daemon: DaemonHandle, cli_for: Callable[[DaemonHandle], Cli]) -> Cli:
    """The CLI pointed at the test's default daemon (``--embedder none``)."""
    return cli_for(daemon)
