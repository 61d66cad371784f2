"""Small readers the end-to-end tests share: one request per call, or one SQL query on the file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from memoryd.service.client import ClientError
from tests.integration.harness import DaemonHandle, wait_until

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def load_jsonl(name: str) -> list[dict[str, Any]]:
    """The rows of one of tests/data's labelled files (see tests/data/README.md)."""
    with open(DATA_DIR / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def get(d: DaemonHandle, memory_id: str, **params: Any) -> dict[str, Any]:
    """memory.get over the agent socket."""
    result: dict[str, Any] = d.call("memory.get", {"id": memory_id, **params})
    return result


def error_of(d: DaemonHandle, method: str, params: dict[str, Any], *, admin: bool = False) -> ClientError:
    """Call ``method`` expecting an error answer; return it."""
    with pytest.raises(ClientError) as caught:
        d.call(method, params, admin=admin)
    return caught.value


def proposals(d: DaemonHandle, status: str = "open") -> list[dict[str, Any]]:
    """review.list on the operator socket (every proposal of that status)."""
    found: list[dict[str, Any]] = d.call("review.list", {"status": status, "limit": 1000},
                                         admin=True)["proposals"]
    return found


def all_proposals(d: DaemonHandle) -> list[dict[str, Any]]:
    """Every proposal ever raised, in any status, read from the database file (a proposal that
    was raised and then decided or withdrawn was still raised)."""
    rows = d.query("SELECT id, kind, memory_ids, status, created_by FROM proposals")
    return [{"id": r[0], "kind": r[1], "memory_ids": json.loads(r[2]), "status": r[3], "created_by": r[4]}
            for r in rows]


def jobs_settled(d: DaemonHandle, pass_name: str, targets: list[str]) -> bool:
    """Every job of ``pass_name`` on these targets is done (none waits, runs or died)."""
    marks = ",".join("?" * len(targets))
    rows = d.query(f"SELECT state FROM jobs WHERE pass = ? AND target IN ({marks})",
                   (pass_name, *targets))
    return len(rows) >= len(targets) and all(state == "done" for (state,) in rows)


def wait_jobs_done(d: DaemonHandle, pass_name: str, targets: list[str], *, timeout_s: float) -> None:
    """Wait until the pass has finished a job for each target (a hang guard, never a speed claim)."""
    wait_until(lambda: jobs_settled(d, pass_name, targets), timeout_s=timeout_s, interval_s=0.25,
               message=f"the {pass_name} jobs of {len(targets)} memories to finish")


def status_of_rows(d: DaemonHandle, ids: list[str]) -> dict[str, str]:
    """id → status, read from the database file."""
    marks = ",".join("?" * len(ids))
    return dict(d.query(f"SELECT id, status FROM memories WHERE id IN ({marks})", tuple(ids)))


def now() -> float:
    return time.time()
