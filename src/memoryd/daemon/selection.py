"""Which passes run this cycle: a pure function, so it is tested without a daemon."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


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
