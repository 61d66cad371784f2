"""Owner identifiers kept only as keyed hashes (HMAC-SHA256 under a per-store secret).

An owner value (an agent id, a user id such as an e-mail address, a project,
a session) must outlive a forget in two places: a tombstone, which refuses a
rewrite of the same text by the same owner, and the audit chain, whose events
can never be rewritten without breaking it. Both keep the keyed hash of the
value, never the value: the tombstone still matches (the write path hashes
the writer's owner the same way) and the audit event still tells one owner
from another, while the identifier itself is nowhere in the store once its
rows are erased.

The secret is 32 random bytes in the ``meta`` table, made by the first write
that needs it (not by a migration: a freshly migrated store must stay empty
for ``memoryd store copy``, which carries the source's secret over with its
``meta`` rows, so copied tombstones keep matching).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, select

from memoryd.store.backends import backend_for
from memoryd.store.schema import meta

#: The ``meta`` row that holds the secret (hex).
SECRET_KEY = "owner_key"
#: Marks a keyed value, so a reader tells it from a clear one.
PREFIX = "k:"

#: Secrets read back from committed rows, per engine. One made in a transaction that may
#: still roll back is never cached: the next call reads the table again.
_secrets: WeakKeyDictionary[Engine, bytes] = WeakKeyDictionary()


def secret(conn: Connection) -> bytes:
    """The store's secret, made (in the caller's transaction) when there is none yet."""
    found = _secrets.get(conn.engine)
    if found is not None:
        return found
    stored = _read(conn)
    if stored is not None:
        _secrets[conn.engine] = stored
        return stored
    # Two daemons on one PostgreSQL database may both get here: the second insert waits for
    # the first's commit, then does nothing, and both read the first one's secret.
    conn.execute(backend_for(conn).insert(meta).values(key=SECRET_KEY, value=secrets.token_hex(32))
                 .on_conflict_do_nothing())
    made = _read(conn)
    assert made is not None
    return made


def _read(conn: Connection) -> bytes | None:
    value = conn.execute(select(meta.c.value).where(meta.c.key == SECRET_KEY)).scalar()
    return None if value is None else bytes.fromhex(value)


@functools.lru_cache(maxsize=4096)
def keyed_with(key: bytes, value: str) -> str:
    """``value``'s keyed hash under ``key`` (``k:`` and 64 hex digits). Cached: a write hashes
    its owner twice (the tombstone lookup, the audit event), and owners repeat."""
    return PREFIX + hmac.new(key, value.encode("utf-8"), hashlib.sha256).hexdigest()


def keyed(conn: Connection, value: str) -> str:
    """``value``'s keyed hash under this store's secret."""
    return keyed_with(secret(conn), value)
