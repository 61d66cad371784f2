"""Memory ids: time-ordered, unguessable (80 random bits), opaque to clients."""

from __future__ import annotations

import re
import secrets
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32
PREFIX = "mem_"
_ID_RE = re.compile(rf"^{PREFIX}[{_ALPHABET}]{{26}}$")


def new_memory_id(now_ms: int | None = None) -> str:
    """``mem_`` + a 26-character ULID: 48 bits of milliseconds, 80 random bits."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms & ((1 << 48) - 1)) << 80 | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return PREFIX + "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """An id of another kind of object (``prp_``, ``fgt_``), same shape as memory ids."""
    return prefix + new_memory_id()[len(PREFIX):]


def is_memory_id(text: object) -> bool:
    """Whether ``text`` has the shape of a memory id (malformed ids answer 1002)."""
    return isinstance(text, str) and bool(_ID_RE.match(text))
