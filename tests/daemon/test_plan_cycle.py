"""The governor-aware plan: idle drains all, busy runs one small batch, paused runs no model pass."""

from __future__ import annotations

from memoryd.daemon.selection import Planned, plan_cycle

ORDER = ["embed", "classify", "consolidate", "retention"]
RUNNABLE = dict.fromkeys(ORDER, True)
MODEL = {"embed": True, "classify": True, "consolidate": False, "retention": False}
SIZES = {"embed": 64, "classify": 16, "consolidate": 100, "retention": 500}
BACKLOG = dict.fromkeys(ORDER, 10)


def plan(state: str, cycle: int = 0, backlog: dict[str, int] | None = None) -> list[Planned]:
    return plan_cycle(ORDER, backlog or BACKLOG, RUNNABLE, cycle, state, MODEL, SIZES, busy_batch=8)


def test_idle_runs_every_backlogged_pass_with_full_batches() -> None:
    assert plan("idle") == [Planned(p, SIZES[p]) for p in ORDER]


def test_busy_runs_one_pass_with_a_small_batch() -> None:
    assert plan("busy") == [Planned("embed", 8)]
    assert plan("busy", cycle=2) == [Planned("consolidate", 8)]


def test_busy_never_exceeds_the_pass_batch() -> None:
    assert plan_cycle(["x"], {"x": 1}, {"x": True}, 0, "busy", {"x": True}, {"x": 4}, busy_batch=8) == [
        Planned("x", 4)]


def test_paused_runs_only_cheap_sql_passes() -> None:
    assert [p.name for p in plan("paused")] == ["consolidate", "retention"]


def test_busy_round_robin_reaches_every_pass_in_turn() -> None:
    seen = [plan("busy", cycle=c)[0].name for c in range(len(ORDER))]
    assert sorted(seen) == sorted(ORDER)


def test_empty_queues_are_skipped_in_every_state() -> None:
    backlog = {"embed": 0, "classify": 3, "consolidate": 0, "retention": 0}
    assert [p.name for p in plan("idle", backlog=backlog)] == ["classify"]
    assert plan("paused", backlog=backlog) == []
