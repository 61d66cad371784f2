"""Several processes on one SQLite file: no lock errors, one live job per target, crash recovery.

Each worker is a separate Python process running tests/slow/worker.py with its
own engine, as several daemons (or a daemon and the CLI) would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, inspect, select, text

from memoryd.queue import jobs as jobq
from memoryd.store import audit
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.memories import WriteContext
from memoryd.store.migrate import upgrade
from memoryd.store.schema import audit_events, jobs, memories, memory_vectors
from memoryd.store.writes import WriteUnit, commit_units

from .worker import SHARED_TARGETS, effect_metadata, effects, memory

WORKER = Path(__file__).with_name("worker.py")
pytestmark = pytest.mark.slow


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[bytes]
    out: Path
    log: Path

    def wait(self, timeout_s: float) -> int:
        return self.proc.wait(timeout=timeout_s)

    def result(self) -> dict[str, Any]:
        assert self.out.exists(), f"worker {self.name} wrote no report; log:\n{self.log_tail()}"
        return dict(json.loads(self.out.read_text(encoding="utf-8")))

    def log_tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-4000:] if self.log.exists() else ""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Path, Engine]]:
    db = tmp_path / "shared.db"
    engine = create_store_engine(f"sqlite:///{db}")
    upgrade(engine)
    with engine.begin() as conn:
        effect_metadata.create_all(conn)
    yield db, engine
    engine.dispose()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start worker processes; any still alive at teardown is killed (by its own pid)."""
    started: list[Worker] = []

    def _spawn(mode: str, name: str, db: Path, **opts: Any) -> Worker:
        out = tmp_path / f"{name}.json"
        log = tmp_path / f"{name}.log"
        argv = [sys.executable, str(WORKER), mode, "--db", str(db), "--out", str(out), "--name", name]
        for key, value in opts.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        with log.open("wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path)
        worker = Worker(name, proc, out, log)
        started.append(worker)
        return worker

    yield _spawn
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(timeout=30)


def run_together(spawn: Callable[..., Worker], tmp_path: Path, mode: str, db: Path, n: int,
                 timeout_s: float = 240.0, **opts: Any) -> list[Worker]:
    """Start ``n`` workers, release them at once when all are ready, wait for all to exit 0."""
    ready = tmp_path / f"ready-{mode}"
    ready.mkdir()
    workers = [spawn(mode, f"w{i}", db, ready_dir=ready, **opts) for i in range(n)]
    deadline = time.monotonic() + 120
    while len(list(ready.glob("ready-*"))) < n:
        for w in workers:
            assert w.proc.poll() is None, f"worker {w.name} exited early:\n{w.log_tail()}"
        assert time.monotonic() < deadline, "workers did not get ready"
        time.sleep(0.02)
    (ready / "go").touch()
    for w in workers:
        rc = w.wait(timeout_s)
        assert rc == 0, f"worker {w.name} exited {rc}:\n{w.log_tail()}"
    return workers


def wait_for_file(worker: Worker, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while not worker.out.exists():
        assert worker.proc.poll() is None, f"worker {worker.name} died:\n{worker.log_tail()}"
        assert time.monotonic() < deadline, f"worker {worker.name} never reported:\n{worker.log_tail()}"
        time.sleep(0.02)
    return worker.result()


def job_row(engine: Engine, job_id: int) -> Any:
    with read_only(engine) as conn:
        return conn.execute(select(jobs).where(jobs.c.id == job_id)).one()


def test_four_writer_processes_hammering_one_file_never_see_database_is_locked(
        store: tuple[Path, Engine], spawn: Callable[..., Worker], tmp_path: Path) -> None:
    db, engine = store
    n, iterations = 4, 40
    workers = run_together(spawn, tmp_path, "hammer", db, n, iterations=iterations)
    results = [w.result() for w in workers]

    errors = [e for r in results for e in r["errors"]]
    locked = [e for e in errors if "locked" in e.lower() or "busy" in e.lower()]
    assert locked == [], f"{len(locked)} lock errors, e.g. {locked[:3]}"
    assert errors == []
    assert all(r["claimed"] == r["completed"] for r in results)

    with read_only(engine) as conn:
        agent_rows = conn.execute(select(func.count()).where(memories.c.scope == "agent")).scalar_one()
        org_rows = conn.execute(select(memories.c.content).where(memories.c.scope == "org")).scalars().all()
        job_states = Counter(conn.execute(select(jobs.c.state).where(jobs.c["pass"] == "hammer")).scalars())
        max_attempts = conn.execute(select(func.max(jobs.c.attempts)).where(jobs.c["pass"] == "hammer")
                                    ).scalar_one()
        effects_per_job = Counter(conn.execute(select(effects.c.job_id)).scalars())
        embed_jobs = conn.execute(select(func.count()).where(jobs.c["pass"] == "embed")).scalar_one()
        actions = Counter(conn.execute(select(audit_events.c.action)).scalars())
        chain = audit.verify(conn)

    # Every private note landed; the shared org facts collapsed to one row each.
    assert agent_rows == n * iterations
    assert sorted(org_rows) == [f"shared org fact {i}" for i in range(SHARED_TARGETS)]
    assert sum(r["written"] for r in results) == n * iterations + SHARED_TARGETS
    assert sum(r["duplicates"] for r in results) == n * iterations - SHARED_TARGETS
    # Every job ran exactly once, its effect committed with its completion.
    assert set(job_states) == {"done"}
    assert max_attempts == 1
    assert set(effects_per_job.values()) == {1}
    assert len(effects_per_job) == job_states["done"] == sum(r["completed"] for r in results)
    # One embed job and one memory.write event per row, one memory.corroborate event per
    # duplicate, all in one hash chain that concurrent writers kept linear.
    assert embed_jobs == actions["memory.write"] == n * iterations + SHARED_TARGETS
    assert actions["memory.corroborate"] == n * iterations - SHARED_TARGETS
    assert chain == (sum(actions.values()), None)


def test_concurrent_enqueue_from_several_processes_yields_exactly_one_live_job(
        store: tuple[Path, Engine], spawn: Callable[..., Worker], tmp_path: Path) -> None:
    db, engine = store
    workers = run_together(spawn, tmp_path, "enqueue-same", db, 4, iterations=25,
                           pass_name="embed", target="mem_contended")
    results = [w.result() for w in workers]
    assert [e for r in results for e in r["errors"]] == []
    assert sum(r["added"] for r in results) == 1
    assert [r["own_added"] for r in results] == [1, 1, 1, 1]  # positive control
    with read_only(engine) as conn:
        contended = conn.execute(select(jobs.c.state).where(jobs.c.target == "mem_contended")).scalars().all()
        own = conn.execute(select(func.count()).where(jobs.c.target.like("own-%"))).scalar_one()
    assert contended == ["ready"]
    assert own == 4


def test_killed_worker_job_is_reclaimed_after_lease_expiry_and_its_effect_exists_once(
        store: tuple[Path, Engine], spawn: Callable[..., Worker]) -> None:
    db, engine = store
    with engine.begin() as conn:
        jobq.enqueue(conn, "crashy", "t1", now=time.time(), max_attempts=5)

    doomed = spawn("claim-and-hang", "doomed", db, pass_name="crashy", lease=2)
    claimed = wait_for_file(doomed)
    held = job_row(engine, claimed["job_id"])
    assert (held.state, held.lease_owner, held.attempts) == ("leased", "doomed", 1)

    os.kill(doomed.proc.pid, signal.SIGKILL)
    assert doomed.wait(30) == -signal.SIGKILL

    rescuer = spawn("claim-and-complete", "rescuer", db, pass_name="crashy", lease=60, timeout=60)
    assert rescuer.wait(120) == 0, rescuer.log_tail()
    rescued = rescuer.result()
    assert rescued["job_id"] == claimed["job_id"]
    assert rescued["attempts"] == 2
    assert rescued["claimed_at"] > held.lease_until  # reclaimed only after the lease ran out

    done = job_row(engine, claimed["job_id"])
    assert (done.state, done.attempts, done.lease_owner) == ("done", 2, None)
    with read_only(engine) as conn:
        made = conn.execute(select(effects.c.target, effects.c.worker)).all()
    assert [tuple(r) for r in made] == [("t1", "rescuer")]


def test_killed_embed_worker_memory_is_embedded_once_by_the_next_worker(
        store: tuple[Path, Engine], spawn: Callable[..., Worker]) -> None:
    db, engine = store
    ctx = WriteContext(actor="test:slow", passes=["embed"], max_attempts=5, idempotency_ttl_s=86400.0)
    [[written]] = commit_units(
        engine, [WriteUnit(items=[memory("The staging database is Postgres 15 on db1", "agent", "a1")],
                           actor="test:slow")],
        ctx, datetime.now(UTC),
    )
    mid = written["id"]

    doomed = spawn("claim-and-hang", "doomed", db, pass_name="embed", lease=2)
    claimed = wait_for_file(doomed)
    os.kill(doomed.proc.pid, signal.SIGKILL)
    assert doomed.wait(30) == -signal.SIGKILL
    with read_only(engine) as conn:
        seq, chash = conn.execute(select(memories.c.seq, memories.c.content_hash)
                                  .where(memories.c.id == mid)).one()
        assert conn.execute(select(func.count()).select_from(memory_vectors)).scalar_one() == 0

    rescuer = spawn("embed", "rescuer", db, target=mid, timeout=300)
    assert rescuer.wait(360) == 0, rescuer.log_tail()

    done = job_row(engine, claimed["job_id"])
    assert (done.state, done.attempts) == ("done", 2)
    with read_only(engine) as conn:
        vecs = conn.execute(select(memory_vectors).where(memory_vectors.c.memory_seq == seq)).all()
        total = conn.execute(select(func.count()).select_from(memory_vectors)).scalar_one()
        # The nearest-neighbour index is part of the store (migration 0002 on): a missing
        # table is a broken store, not a variant, so it fails here rather than being skipped.
        assert "memory_vec" in inspect(conn).get_table_names(), "the vector index memory_vec is missing"
        indexed = conn.execute(text("SELECT count(*) FROM memory_vec WHERE memory_seq = :s"),
                               {"s": seq}).scalar_one()
    assert total == 1 and len(vecs) == 1
    [vec] = vecs
    assert (vec.dim, vec.content_hash, len(vec.vector)) == (384, chash, 384 * 4)
    assert indexed == 1  # indexed exactly once, by the rescuer
