"""Pass selection: a pure function of registry order, backlog, runnability and the cycle."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from memoryd.daemon.selection import Planned, plan_cycle, select_passes

ORDER = ["embed", "classify", "extract", "consolidate"]
ALL_RUNNABLE = dict.fromkeys(ORDER, True)


def test_nothing_to_do_selects_nothing() -> None:
    assert select_passes(ORDER, {}, ALL_RUNNABLE, cycle=0) == []
    assert select_passes(ORDER, dict.fromkeys(ORDER, 0), ALL_RUNNABLE, cycle=3) == []


def test_empty_and_unrunnable_passes_are_skipped() -> None:
    backlog = {"embed": 5, "classify": 0, "extract": 7, "consolidate": 2}
    runnable = {"embed": True, "classify": True, "extract": False, "consolidate": True}
    assert select_passes(ORDER, backlog, runnable, cycle=0) == ["embed", "consolidate"]
    # A pass missing from ``runnable`` is not runnable.
    assert select_passes(ORDER, backlog, {"embed": True}, cycle=0) == ["embed"]


def test_start_rotates_with_the_cycle() -> None:
    backlog = dict.fromkeys(ORDER[:3], 10)
    assert [select_passes(ORDER, backlog, ALL_RUNNABLE, c) for c in range(4)] == [
        ["embed", "classify", "extract"],
        ["classify", "extract", "embed"],
        ["extract", "embed", "classify"],
        ["embed", "classify", "extract"],
    ]


def test_always_backlogged_pass_cannot_starve_another_when_one_pass_runs_per_cycle() -> None:
    # Busy mode runs only the first selected pass. embed always has a huge backlog;
    # classify has a little. Over N cycles classify must still get its turns.
    backlog = {"embed": 10_000, "classify": 3}
    ran: Counter[str] = Counter()
    for cycle in range(12):
        chosen = select_passes(ORDER, backlog, ALL_RUNNABLE, cycle)
        if not chosen:
            break
        first = chosen[0]
        ran[first] += 1
        if first == "classify":
            backlog["classify"] -= 1
    assert backlog["classify"] == 0
    assert ran["classify"] == 3 and ran["embed"] >= 3


@given(
    backlog=st.dictionaries(st.sampled_from(ORDER), st.integers(min_value=0, max_value=50)),
    runnable=st.dictionaries(st.sampled_from(ORDER), st.booleans()),
    first_cycle=st.integers(min_value=0, max_value=10_000),
)
def test_every_candidate_leads_once_in_any_window_of_len_candidates_cycles(
        backlog: dict[str, int], runnable: dict[str, bool], first_cycle: int) -> None:
    candidates = [p for p in ORDER if runnable.get(p) and backlog.get(p, 0) > 0]
    leaders = []
    for cycle in range(first_cycle, first_cycle + len(candidates)):
        chosen = select_passes(ORDER, backlog, runnable, cycle)
        assert sorted(chosen) == sorted(candidates)
        leaders.append(chosen[0])
    assert sorted(leaders) == sorted(candidates)


def test_plan_cycle_idle_runs_every_selected_pass_with_full_batches() -> None:
    plan = plan_cycle(ORDER, {"embed": 5, "consolidate": 1}, ALL_RUNNABLE, 0, "idle",
                      {"embed": True, "consolidate": False}, {"embed": 64, "consolidate": 32}, 8)
    assert plan == [Planned("embed", 64), Planned("consolidate", 32)]


def test_plan_cycle_busy_runs_one_pass_with_a_small_batch_round_robin() -> None:
    args = ({"embed": 5, "consolidate": 1}, ALL_RUNNABLE)
    sizes = {"embed": 64, "consolidate": 4}
    models = {"embed": True, "consolidate": False}
    assert plan_cycle(ORDER, *args, 0, "busy", models, sizes, 8) == [Planned("embed", 8)]
    assert plan_cycle(ORDER, *args, 1, "busy", models, sizes, 8) == [Planned("consolidate", 4)]


def test_plan_cycle_paused_keeps_only_passes_without_a_model() -> None:
    plan = plan_cycle(ORDER, {"embed": 5, "consolidate": 1}, ALL_RUNNABLE, 0, "paused",
                      {"embed": True, "consolidate": False}, {"embed": 64, "consolidate": 32}, 8)
    assert plan == [Planned("consolidate", 32)]
