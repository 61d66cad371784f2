"""FTS5 forgets words for real: its ``secure-delete`` option is on in a migrated store.

Without it, deleting a row from an FTS5 index only adds a delete marker, and
the row's words stay in the older segment's page until a merge. The check is
on the file's bytes, after one erasure that no merge follows.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, text

from memoryd.store import lifecycle
from memoryd.store.engine import checkpoint_wal
from memoryd.store.memories import write_memory
from tests.lifecycle.helpers import STORE_CTX, new_memory


def test_migrated_store_has_fts5_secure_delete_on(engine: Engine) -> None:
    with engine.connect() as conn:
        value = conn.execute(text("SELECT v FROM memories_fts_config WHERE k = 'secure-delete'")).scalar()
    assert value == 1


def test_an_erased_rows_words_leave_the_fts_pages_of_the_file(engine: Engine, db_path: Path) -> None:
    word, control = f"zqw{secrets.token_hex(8)}", f"zqk{secrets.token_hex(8)}"
    now = datetime.now(UTC)
    with engine.begin() as conn:  # one transaction: one FTS segment holds every word
        first = new_memory(f"note zero mentions {word} and {control}")
        doomed = write_memory(conn, first, now, STORE_CTX)["id"]
        for i in range(300):
            write_memory(conn, new_memory(f"note {i} mentions {control} and more words"), now, STORE_CTX)
    with engine.begin() as conn:
        assert lifecycle.erase(conn, doomed, now, "test") == 1
    checkpoint_wal(engine)
    engine.dispose()
    data = db_path.read_bytes()
    # A word is stored after the prefix it shares with the word before it ("zq"): its tail is unique.
    assert word[-12:].encode() not in data
    assert control[-12:].encode() in data  # positive control
