"""Memory ids: time-ordered, unguessable (80 random bits), opaque to clients."""

from __future__ import annotations

import re
import secrets
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32
PREFIX = "mem_"
_ID_RE = re.compile(rf"^{PREFIX}[{_ALPHABET}]{{26}}$")
#: Every 10-bit value as its two Crockford digits.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_SHIFTS = tuple(range(120, -1, -10))
#: The largest integer a store's integer key holds (SQLite's INTEGER, PostgreSQL's bigint): the
#: bound of a seq or job id a client may name.
MAX_INTEGER = 2**63 - 1


def encode_ulid(value: int) -> str:
    """A 130-bit ``value`` (a ULID's 128) as 26 Crockford base32 digits, most significant first,
    two digits per step (a digit-by-digit loop cost twice as much; an import pays it per row)."""
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])


def new_memory_id(now_ms: int | None = None) -> str:
    """``mem_`` + a 26-character ULID: 48 bits of milliseconds, 80 random bits."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return PREFIX + encode_ulid((ms & ((1 << 48) - 1)) << 80 | secrets.randbits(80))


def new_id(prefix: str) -> str:
    """An id of another kind of object (``prp_``, ``fgt_``), same shape as memory ids."""
    return prefix + new_memory_id()[len(PREFIX):]


def is_memory_id(text: object) -> bool:
    """Whether ``text`` has the shape of a memory id (malformed ids answer 1002)."""
    return isinstance(text, str) and bool(_ID_RE.match(text))
