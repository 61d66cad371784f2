"""A daemon refuses a store whose ``memoryd store copy`` marker says unfinished or unverified,
and serves one whose copy finished and verified (both backends; the marker is the ``meta``
row ``store_copy`` the copy writes, docs/postgresql.md)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.integration.harness import DaemonHandle


def _set_marker(handle: DaemonHandle, marker: dict[str, object]) -> None:
    with handle.db() as conn:
        conn.execute("DELETE FROM meta WHERE key = 'store_copy'")
        conn.execute("INSERT INTO meta (key, value) VALUES ('store_copy', ?)", (json.dumps(marker),))


@pytest.mark.parametrize(("marker", "said"), [
    ({"source": "sqlite:/old/memoryd.db", "done": False, "tables": {}}, "interrupted"),
    ({"source": "sqlite:/old/memoryd.db", "done": True, "verified": False, "tables": {}}, "did not verify"),
])
def test_a_daemon_refuses_an_unfinished_or_unverified_copy(
        start_daemon: Callable[..., DaemonHandle], marker: dict[str, object], said: str) -> None:
    first = start_daemon("first")
    first.write("a row in the store")
    first.stop()
    _set_marker(first, marker)
    again = start_daemon("again", data_dir=first.data_dir, db_url=first.db_url, start=False)
    assert again.run_to_exit() == 2
    text = again.stderr_text()
    assert said in text and "memoryd store copy" in text and "sqlite:/old/memoryd.db" in text, text

    # Positive control: the same store with a finished, verified copy's marker is served.
    _set_marker(first, {**marker, "done": True, "verified": True})
    served = start_daemon("served", data_dir=first.data_dir, db_url=first.db_url)
    assert served.call("memory.list", {"agent_id": "x"}) is not None
    served.stop()
