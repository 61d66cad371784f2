"""Memory ids: ``mem_`` + ULID, unique, ordered by time."""

from __future__ import annotations

import random

from memoryd.store.ids import encode_ulid, is_memory_id, new_memory_id

BASE_MS = 1_772_366_400_000


def test_id_has_the_mem_ulid_shape() -> None:
    mid = new_memory_id()
    assert mid.startswith("mem_") and len(mid) == 30
    assert is_memory_id(mid)
    assert set(mid[4:]) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")


def test_malformed_ids_are_rejected() -> None:
    good = new_memory_id()
    for bad in (good[:-1], good + "A", good.lower(), "mem_" + "I" * 26, "xyz_" + good[4:], 42, None):
        assert not is_memory_id(bad), bad


def test_ids_within_one_millisecond_are_unique() -> None:
    ids = {new_memory_id(BASE_MS) for _ in range(10_000)}
    assert len(ids) == 10_000


def test_ids_sort_in_time_order() -> None:
    times = [BASE_MS + delta for delta in (0, 1, 2, 999, 1000, 86_400_000, 10**10)]
    ids = [new_memory_id(ms) for ms in times]
    assert sorted(ids) == ids
    # The first ten characters after the prefix are the timestamp.
    assert len({mid[4:14] for mid in (new_memory_id(BASE_MS) for _ in range(50))}) == 1


def _digit_by_digit(value: int) -> str:
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    return "".join(alphabet[(value >> (5 * i)) & 31] for i in reversed(range(26)))


def test_the_fast_encoding_is_crockford_base32_digit_for_digit() -> None:
    rng = random.Random(5)
    values = [0, 1, 31, 32, (1 << 128) - 1, (1 << 130) - 1] + [rng.getrandbits(128) for _ in range(2000)]
    for value in values:
        assert encode_ulid(value) == _digit_by_digit(value), hex(value)
