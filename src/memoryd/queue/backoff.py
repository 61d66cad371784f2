"""Retry delays: capped exponential backoff with jitter."""

from __future__ import annotations

import random


def backoff_s(attempts: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Delay before the next try after ``attempts`` failed attempts.

    ``base * 2**(attempts-1)`` capped at ``cap``, then scaled by a random factor
    in [0.5, 1.0] so jobs that failed together do not retry together.
    """
    exp = min(cap_s, base_s * (2 ** max(0, attempts - 1)))
    return exp * (0.5 + 0.5 * (rng or random).random())
