"""Which passes run this cycle: a pure function, so it is tested without a daemon."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def select_passes(order: Sequence[str], backlog: Mapping[str, int], runnable: Mapping[str, bool],
                  cycle: int) -> list[str]:
    """Passes to run this cycle, in order.

    ``order`` is the registry order; ``backlog`` the claimable jobs per pass;
    ``runnable`` whether each pass can run now (model loaded or loadable,
    implemented). Empty and unrunnable passes are skipped; the start point
    rotates with ``cycle`` so an always-backlogged pass cannot starve the rest.
    """
    candidates = [p for p in order if runnable.get(p, False) and backlog.get(p, 0) > 0]
    if not candidates:
        return []
    start = cycle % len(candidates)
    return candidates[start:] + candidates[:start]


@dataclass(frozen=True)
class Planned:
    """One pass to run this cycle and the batch size to claim."""

    name: str
    batch: int


def plan_cycle(order: Sequence[str], backlog: Mapping[str, int], runnable: Mapping[str, bool],
               cycle: int, state: str, model_backed: Mapping[str, bool],
               batch_sizes: Mapping[str, int], busy_batch: int) -> list[Planned]:
    """The governor-aware plan for one cycle.

    * ``idle``: every selected pass, each with its full batch size;
    * ``busy``: only the first selected pass (round-robin), with a small batch;
    * ``paused``: no model-backed pass; cheap SQL passes still run.
    """
    selected = select_passes(order, backlog, runnable, cycle)
    if state == "paused":
        return [Planned(p, batch_sizes[p]) for p in selected if not model_backed.get(p, True)]
    if state == "busy":
        return [Planned(p, min(busy_batch, batch_sizes[p])) for p in selected[:1]]
    return [Planned(p, batch_sizes[p]) for p in selected]
