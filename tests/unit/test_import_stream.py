"""`memoryd import` streams: batches go out as the file is read, links find their other row
wherever it sits in the file, and what the importer holds does not grow with the file.

Scripted: ``call`` answers memory.write_many as a daemon does and records what was sent and
when (how many lines the reader had handed over by then). tests/integration/
test_import_stream.py runs the CLI against real daemons on both backends.
"""

from __future__ import annotations

import io
import json
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from memoryd.exchange import exportfile
from memoryd.exchange.importer import IdMap, Importer, prefetch

HEADER = {"record": "header", "format": "memoryd-export", "format_version": 1, "memoryd_version": "t",
          "exported_at": "2025-01-01T00:00:00.000000Z", "filters": {}, "with_vectors": False, "total": 0}


def _record(source_id: str, links: list[tuple[str, str]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {"record": "memory", "id": source_id, "content": f"text of {source_id}", "scope": "agent",
            "agent_id": "a1", "recorded_at": "2025-01-01T00:00:00Z",
            "links": [{"kind": kind, "to": to, "created_at": "2025-01-02T00:00:00Z"} for kind, to in links]}


def _reader(records: list[dict[str, Any]], end: bool = True) -> exportfile.Reader:
    lines = [json.dumps({**HEADER, "total": len(records)})] + [json.dumps(r) for r in records]
    if end:
        lines.append(json.dumps({"record": "end", "count": len(records)}))
    return exportfile.Reader(io.BytesIO(("\n".join(lines) + "\n").encode()))


class Daemon:
    """Answers memory.write_many with new ids and keeps every item sent, by exported id."""

    def __init__(self) -> None:
        self.sent: list[list[dict[str, Any]]] = []
        self.by_source: dict[str, dict[str, Any]] = {}
        self.new_of: dict[str, str] = {}

    def call(self, method: str, params: dict[str, Any]) -> Any:
        assert method == "memory.write_many"
        self.sent.append(params["items"])
        results = []
        for item in params["items"]:
            source = item["restore"]["source_id"]
            new_id = self.new_of.setdefault(source, f"new-{source}")
            for link in item["restore"].get("links", []):
                other = link.get("to") or link.get("from")
                assert other in self.new_of.values(), f"{source} links to {other}, not written yet"
            self.by_source[source] = item
            results.append({"id": new_id, "queued": []})
        return {"results": results}

    def links(self, source: str) -> list[tuple[str, str, str]]:
        return sorted((lk["kind"], "to" if "to" in lk else "from", lk.get("to") or lk["from"])
                      for lk in self.by_source[source]["restore"].get("links", []))


def test_a_link_to_a_row_further_down_the_file_is_sent_with_that_row() -> None:
    daemon = Daemon()
    records = [_record("a", [("cites", "c")]), _record("b"), _record("c")]
    with Importer(daemon.call) as importer:
        summary = importer.run(_reader(records))
    assert daemon.links("a") == [] and daemon.links("c") == [("cites", "from", "new-a")]
    assert (summary.written, summary.links_restored, summary.links_skipped) == (3, 1, 0)


def test_a_link_into_the_batch_being_filled_sends_that_batch_first() -> None:
    daemon = Daemon()
    records = [_record("a"), _record("b"), _record("c", [("supersedes", "b")]), _record("d")]
    with Importer(daemon.call, batch_size=100) as importer:
        summary = importer.run(_reader(records))
    # b's batch went out before c was added, so c could name b's new id.
    assert [[i["restore"]["source_id"] for i in batch] for batch in daemon.sent] == [["a", "b"], ["c", "d"]]
    assert daemon.links("c") == [("supersedes", "to", "new-b")]
    assert (summary.links_restored, summary.links_skipped) == (1, 0)


def test_links_to_rows_that_never_come_or_to_themselves_are_skipped() -> None:
    daemon = Daemon()
    records = [_record("a", [("cites", "nowhere"), ("cites", "a")]), _record("b", [("cites", "a")])]
    with Importer(daemon.call) as importer:
        summary = importer.run(_reader(records, end=False))
    assert daemon.links("a") == [] and daemon.links("b") == [("cites", "to", "new-a")]
    assert (summary.links_restored, summary.links_skipped, summary.complete) == (1, 2, False)


def test_batches_go_out_while_the_file_is_still_being_read() -> None:
    handed = []

    def entries() -> Iterator[exportfile.Entry]:
        for n, entry in enumerate(_reader([_record(f"m{i}") for i in range(50)])):
            handed.append(n)
            yield entry

    seen_at = []
    daemon = Daemon()

    def call(method: str, params: dict[str, Any]) -> Any:
        seen_at.append(len(handed))
        return daemon.call(method, params)

    with Importer(call, batch_size=10) as importer:
        summary = importer.run(entries())
    assert summary.written == 50 and len(seen_at) == 5
    assert seen_at[0] <= 11  # the first batch left after its tenth line (plus the one that closed it)


def test_the_id_map_lives_on_disk_so_memory_stays_flat_as_the_file_grows() -> None:
    def held(n: int) -> int:
        ids = IdMap()
        try:
            tracemalloc.start()
            for at in range(0, n, 1000):
                ids.add([(f"mem_source_{i:012d}", f"mem_target_{i:012d}") for i in range(at, at + 1000)])
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert ids.get(f"mem_source_{n - 1:012d}") == f"mem_target_{n - 1:012d}"
            assert ids.count == n and "mem_source_x" not in ids
        finally:
            ids.close()
        return peak

    small, large = held(2_000), held(100_000)
    # A dict of 100,000 such pairs holds ~20 MB; the map holds one batch's list at a time.
    assert large < 2 * small + (1 << 20), (small, large)


def test_the_id_map_keeps_the_first_row_written_under_an_exported_id() -> None:
    ids = IdMap()
    try:
        ids.add([("a", "first")])
        ids.add([("a", "second"), ("b", "other")])
        assert (ids.get("a"), ids.get("b"), ids.get("c")) == ("first", "other", None)
    finally:
        ids.close()


def test_prefetch_hands_over_every_item_in_order_and_raises_the_readers_error() -> None:
    assert list(prefetch(range(5000), depth=7)) == list(range(5000))

    def broken() -> Iterator[int]:
        yield 1
        raise OSError("disk went away")

    got = []
    with pytest.raises(OSError, match="disk went away"):
        for item in prefetch(broken()):
            got.append(item)
    assert got == [1]


def test_with_two_connections_batches_overlap_but_a_linked_batch_waits_for_those_before_it() -> None:
    import threading

    daemon = Daemon()
    lock = threading.Lock()
    spans: list[tuple[str, float, float]] = []  # (first exported id of the batch, start, end)
    clock = iter(range(1_000_000))

    def call(method: str, params: dict[str, Any]) -> Any:
        with lock:
            start = next(clock)
        threading.Event().wait(0.05)  # the daemon's commit
        with lock:
            answer = daemon.call(method, params)
            spans.append((params["items"][0]["restore"]["source_id"], start, next(clock)))
        return answer

    records = [_record(f"m{i}") for i in range(40)] + [_record("x", [("cites", "m35")])]
    records += [_record(f"n{i}") for i in range(20)]
    with Importer([call, call], batch_size=10) as importer:
        summary = importer.run(_reader(records))
    assert summary.written == 61 and (summary.links_restored, summary.links_skipped) == (1, 0)
    by_first = {first: (start, end) for first, start, end in spans}
    # Link-free batches overlapped: one started before the one before it ended.
    assert any(by_first[f"m{i + 10}"][0] < by_first[f"m{i}"][1] for i in (0, 10, 20))
    # The batch that carries x (which cites m35) started after every batch before it was answered.
    x_batch = next(first for first, _, _ in spans if first in ("x", "m40"))
    before = [end for first, _, end in spans if first.startswith("m") and first != x_batch]
    assert by_first[x_batch][0] > max(before)
    assert daemon.links("x") == [("cites", "to", "new-m35")]


def test_the_progress_line_gives_done_of_total_the_rate_and_the_time_left() -> None:
    from memoryd.cli.data import ImportProgress

    now = [100.0]
    meter = ImportProgress(1_000_000, None, lambda: 0, enabled=True, clock=lambda: now[0])
    now[0] += 50.0
    line = meter.text(150_000, 149_000)
    assert line == ("import: 150,000 of 1,000,000 memories (15%) · 3,000/s · 149,000 vectors kept · "
                    "~4m43s left · 50s so far")
    # No total in the header: the bytes read of the file's size stand in for it.
    read = [40_000_000]
    by_bytes = ImportProgress(None, 160_000_000, lambda: read[0], enabled=True, clock=lambda: now[0])
    now[0] += 10.0
    assert by_bytes.text(20_000, 0) == ("import: 20,000 memories (25%) · 40 of 160 MB · 2,000/s · "
                                        "0 vectors kept · ~30s left · 10s so far")
    # stdin without a total: no fraction, no estimate.
    assert ImportProgress(None, None, lambda: 0, enabled=True, clock=lambda: now[0]).text(5, 0).startswith(
        "import: 5 memories · ")


def test_the_importers_own_memory_does_not_grow_with_the_file() -> None:
    def answer(method: str, params: dict[str, Any]) -> Any:
        return {"results": [{"id": "new-" + item["restore"]["source_id"], "queued": []}
                            for item in params["items"]]}

    def peak(n: int) -> int:
        lines = (exportfile.MemoryLine(i + 2, _record(f"m{i}")) for i in range(n))  # made as read
        tracemalloc.start()
        with Importer([answer, answer], batch_size=50) as importer:
            summary = importer.run(lines)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert summary.written == n
        return top

    small, large = peak(2_000), peak(20_000)
    # Before, every id sent on the second connection stayed in a set: ~120 bytes a record.
    assert large < small + (1 << 20), (small, large)
