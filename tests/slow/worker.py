"""A worker process for the multi-process queue tests (run as a script, one per process).

Every mode opens its own engine on the shared SQLite file through
``create_store_engine``, does its work, and writes a JSON report to ``--out``
(stdout is left to the logs). Modes:

``hammer``          enqueue, claim, complete (with an effect row) and commit_units, in a loop
``enqueue-same``    enqueue one (pass, target) over and over, after a start barrier
``claim-and-hang``  claim one job, report it, then sleep until killed
``claim-and-complete``  poll until a job is claimable, write its effect and complete it
``embed``           run the real embed pass through PassRunner until its job is done
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, insert, select

from memoryd.queue import jobs as jobq
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.memories import NewMemory, WriteContext, request_hash
from memoryd.store.schema import jobs
from memoryd.store.writes import WriteUnit, commit_units

#: A test-only output table: an effect row written in the same transaction as
#: its job's completion. No unique key, so a duplicated effect would show.
effect_metadata = MetaData()
effects = Table(
    "test_effects",
    effect_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, nullable=False),
    Column("target", String(64), nullable=False),
    Column("worker", String(64), nullable=False),
)

SHARED_TARGETS = 5


def open_engine(db: str) -> Engine:
    return create_store_engine(f"sqlite:///{db}")


def report(path: str, data: dict[str, Any]) -> None:
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)


def barrier(ready_dir: str | None, name: str, timeout_s: float = 120.0) -> None:
    """Say we are ready, then wait for the parent's ``go`` file so all workers start together."""
    if not ready_dir:
        return
    Path(ready_dir, f"ready-{name}").touch()
    deadline = time.monotonic() + timeout_s
    while not Path(ready_dir, "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go signal from the parent")
        time.sleep(0.005)


def memory(content: str, scope: str, owner: str) -> NewMemory:
    key = "agent_id" if scope == "agent" else None
    params: dict[str, Any] = {"content": content, "scope": scope, "kind": "fact"}
    if key:
        params[key] = owner
    return NewMemory(content=content, kind="fact", scope=scope, owner=owner if key else "",
                     agent_id=owner if key else None, request_hash=request_hash(params))


def complete_with_effect(engine: Engine, job: jobq.Job, worker: str) -> bool:
    with engine.begin() as conn:
        conn.execute(insert(effects).values(job_id=job.id, target=job.target, worker=worker))
        jobq.complete(conn, job, now=time.time())
    return True


def hammer(args: argparse.Namespace) -> dict[str, Any]:
    engine = open_engine(args.db)
    ctx = WriteContext(actor=f"worker:{args.name}", passes=["embed"], max_attempts=5,
                       idempotency_ttl_s=86400.0)
    errors: list[str] = []
    counts = {"enqueued": 0, "claimed": 0, "completed": 0, "written": 0, "duplicates": 0}

    def guarded(label: str, fn: Any) -> Any:
        try:
            return fn()
        except Exception as exc:  # every error is a finding: report it, keep going
            errors.append(f"{label}: {type(exc).__name__}: {exc}")
            return None

    def enqueue_some(i: int) -> int:
        with engine.begin() as conn:
            added = jobq.enqueue(conn, "hammer", f"shared-{i % SHARED_TARGETS}", now=time.time())
            added += jobq.enqueue(conn, "hammer", f"{args.name}-{i}", now=time.time())
        return int(added)

    def claim_some() -> list[jobq.Job]:
        with engine.begin() as conn:
            return jobq.claim(conn, "hammer", owner=args.name, now=time.time(), lease_s=600, limit=3)

    barrier(args.ready_dir, args.name)
    for i in range(args.iterations):
        counts["enqueued"] += guarded("enqueue", lambda i=i: enqueue_some(i)) or 0
        batch = guarded("claim", claim_some) or []
        counts["claimed"] += len(batch)
        for job in batch:
            if guarded("complete", lambda job=job: complete_with_effect(engine, job, args.name)):
                counts["completed"] += 1
        units = [
            WriteUnit(items=[memory(f"{args.name} private note {i}", "agent", args.name)], actor=args.name),
            # Every worker writes the same org facts: duplicates must collapse to one row each.
            WriteUnit(items=[memory(f"shared org fact {i % SHARED_TARGETS}", "org", "")], actor=args.name),
        ]
        outcomes = guarded("commit_units", lambda units=units: commit_units(
            engine, units, ctx, datetime.now(UTC))) or []
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                errors.append(f"commit_units outcome: {type(outcome).__name__}: {outcome}")
            else:
                counts["written"] += sum(1 for r in outcome if "duplicate_of" not in r)
                counts["duplicates"] += sum(1 for r in outcome if "duplicate_of" in r)
    # Drain what is left so no job stays ready because of timing.
    while batch := guarded("claim", claim_some) or []:
        counts["claimed"] += len(batch)
        for job in batch:
            if guarded("complete", lambda job=job: complete_with_effect(engine, job, args.name)):
                counts["completed"] += 1
    engine.dispose()
    return {"errors": errors, **counts}


def enqueue_same(args: argparse.Namespace) -> dict[str, Any]:
    engine = open_engine(args.db)
    errors: list[str] = []
    added = own = 0
    barrier(args.ready_dir, args.name)
    for _ in range(args.iterations):
        try:
            with engine.begin() as conn:
                added += jobq.enqueue(conn, args.pass_name, args.target, now=time.time())
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    with engine.begin() as conn:  # positive control: a target of our own is always added
        own += jobq.enqueue(conn, args.pass_name, f"own-{args.name}", now=time.time())
    engine.dispose()
    return {"errors": errors, "added": added, "own_added": own}


def claim_until(engine: Engine, args: argparse.Namespace) -> tuple[jobq.Job, float, int]:
    """Poll until a job of ``--pass`` is claimable; return it, when, and how many polls came up empty."""
    deadline = time.monotonic() + args.timeout
    empty = 0
    while True:
        now = time.time()
        with engine.begin() as conn:
            batch = jobq.claim(conn, args.pass_name, owner=args.name, now=now, lease_s=args.lease,
                               limit=1)
        if batch:
            return batch[0], now, empty
        empty += 1
        if time.monotonic() > deadline:
            raise SystemExit(f"no claimable {args.pass_name} job within {args.timeout}s")
        time.sleep(0.05)


def claim_and_hang(args: argparse.Namespace) -> dict[str, Any]:
    engine = open_engine(args.db)
    job, claimed_at, _ = claim_until(engine, args)
    report(args.out, {"job_id": job.id, "attempts": job.attempts, "claimed_at": claimed_at,
                      "pid": os.getpid()})
    time.sleep(3600)  # "mid-job": the parent kills us with SIGKILL before we complete
    complete_with_effect(engine, job, args.name)
    return {"completed": True}


def claim_and_complete(args: argparse.Namespace) -> dict[str, Any]:
    engine = open_engine(args.db)
    job, claimed_at, empty = claim_until(engine, args)
    complete_with_effect(engine, job, args.name)
    engine.dispose()
    return {"job_id": job.id, "attempts": job.attempts, "claimed_at": claimed_at, "empty_polls": empty}


def embed(args: argparse.Namespace) -> dict[str, Any]:
    from memoryd.config import Config
    from memoryd.daemon.runner import PassRunner
    from memoryd.models.embedder import Embedder
    from memoryd.passes.base import PassContext
    from memoryd.passes.embed import EmbedPass

    engine = open_engine(args.db)
    ctx = PassContext(engine=engine, config=Config(), embedder=Embedder("bundled"), now=time.time)
    runner = PassRunner({"embed": EmbedPass()}, ctx, owner=args.name)
    deadline = time.monotonic() + args.timeout
    cycles = 0

    def state() -> str:
        with read_only(engine) as conn:
            return str(conn.execute(select(jobs.c.state).where(
                jobs.c["pass"] == "embed", jobs.c.target == args.target)).scalar_one())

    while state() != "done":
        if time.monotonic() > deadline:
            raise SystemExit(f"embed job for {args.target} not done within {args.timeout}s")
        if not runner.cycle():
            time.sleep(0.1)
        cycles += 1
    stats = runner.stats["embed"].as_dict()
    engine.dispose()
    return {"cycles": cycles, "stats": stats}


MODES = {
    "hammer": hammer,
    "enqueue-same": enqueue_same,
    "claim-and-hang": claim_and_hang,
    "claim-and-complete": claim_and_complete,
    "embed": embed,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--db", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--ready-dir", default=None)
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--pass-name", default="hammer")
    parser.add_argument("--target", default="t1")
    parser.add_argument("--lease", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    result = MODES[args.mode](args)
    if args.mode != "claim-and-hang":
        report(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
