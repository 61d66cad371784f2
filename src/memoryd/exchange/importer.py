"""Import an export through ``memory.write_many`` on the operator socket, streaming.

The file is untrusted: exchange/exportfile.py's Reader refuses the lines it
cannot read and the records of the wrong shape (by line and field) as it goes,
so every record handed here has fields a write can be built from; what the
target store refuses is refused per record, and the rest is written.

The file is read line by line and written in batches as it is read: what the
importer holds is one batch, the lines read ahead of it (:func:`prefetch`),
the links still waiting for a row further down the file, and the refusals it
reports; the map from exported ids to new ids lives in a temporary SQLite file
(:class:`IdMap`). So memory stays flat whatever the file's size.

Each memory record becomes a write whose idempotency key is derived from the
record (its exported id and its content), so an import that is cut short (a
crash, Ctrl-C) and run again writes every row once. The write carries a
``restore`` block with the row's status, record times and counters, and its
links to rows already imported (by their new ids).

A link is sent with whichever of its two rows is written later, so its other
end already has a new id: a link to a row further down the file waits for that
row; a link to a row in the batch being filled sends that batch first.

Given several connections (``calls``), batches without links go out without
waiting for the answer to the one before (one in flight per connection): the
daemon validates the next batch while it commits this one, and its group
committer may commit both in one transaction. A batch with links waits until
every batch before it is answered (its links need their new ids).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import queue
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from memoryd.exchange.exportfile import (
    RESTORE_FIELDS,
    WRITE_FIELDS,
    BadLine,
    EndLine,
    Entry,
    MemoryLine,
    RefusedLine,
)

#: A function that sends one request to the operator socket and returns its result.
Call = Callable[[str, dict[str, Any]], Any]

#: Error codes that refuse one item of a batch (the error names it by index).
ITEM_CODES = (-32602, 1001, 1005)
#: Error codes of a refused batch that do not say which item: retry item by item.
UNNAMED_CODES = (1002, 1006, 1007)
#: Error codes worth retrying after a pause (nothing was written).
RETRY_CODES = (1003, 1004)
RETRY_DELAYS_S = (0.2, 0.5, 1.0, 2.0, 4.0)


#: About how many bytes of write params one memory.write_many call carries at most: under the
#: default max_frame_bytes (1 MiB), with room for the JSON-RPC envelope.
DEFAULT_BATCH_BYTES = 768 << 10
#: Lines read and checked ahead of the batch being written (a reader thread does it while
#: the daemon commits): a few batches' worth, so memory stays bounded.
READ_AHEAD = 2000

T = TypeVar("T")


def record_bytes(record: dict[str, Any]) -> int:
    """About what a record costs in a request (the CLI sizes batches by it; a close
    estimate is enough, the byte budget keeps a margin): its text, metadata and vector."""
    vector = record.get("vector")
    data = vector.get("data") if isinstance(vector, dict) else None
    metadata = record.get("metadata")
    return (600 + len(json.dumps(record["content"]))  # as the client sends it, escapes included
            + (len(data) if isinstance(data, str) else 0)
            + (len(json.dumps(metadata)) if metadata else 0)
            + 120 * len(record.get("links") or []))


def idempotency_key(source_id: str, content: str) -> str:
    """The key an export line is written with: the same line always gives the same key."""
    digest = hashlib.sha256(f"{source_id}\n{content}".encode()).hexdigest()
    return f"import:{digest[:48]}"


def prefetch(items: Iterable[T], depth: int = READ_AHEAD) -> Iterator[T]:
    """``items`` read on a thread of their own, at most ``depth`` ahead of the consumer: the
    file is parsed and checked while the daemon commits the batch before. An exception in
    the reader is raised in the consumer; a consumer that stops early stops the reader."""
    box: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def put(kind: str, value: Any) -> bool:
        while not stop.is_set():
            try:
                box.put((kind, value), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for item in items:
                if not put("item", item):
                    return
        except BaseException as exc:  # handed to the consumer, which raises it
            put("error", exc)
            return
        put("end", None)

    reader = threading.Thread(target=read, name="import-reader", daemon=True)
    reader.start()
    try:
        while True:
            kind, value = box.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        reader.join(timeout=1.0)


class IdMap:
    """Exported id -> id in this store, for every row written, in a temporary SQLite file
    (a million ids would take ~200 MB as a dict; here they take the page cache's 2 MB).
    The first row written under an exported id keeps it (a file may repeat an id)."""

    def __init__(self, directory: str | Path | None = None):
        self._dir = tempfile.TemporaryDirectory(prefix="memoryd-import-", dir=directory)
        self._db = sqlite3.connect(Path(self._dir.name) / "ids.db", check_same_thread=False)
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("CREATE TABLE ids (source_id TEXT PRIMARY KEY, new_id TEXT NOT NULL) WITHOUT ROWID")
        self.count = 0

    def add(self, pairs: list[tuple[str, str]]) -> None:
        """Record (exported id, new id) pairs."""
        if pairs:
            with self._db:
                self.count += self._db.executemany(
                    "INSERT OR IGNORE INTO ids (source_id, new_id) VALUES (?, ?)", pairs).rowcount

    def get(self, source_id: str) -> str | None:
        """The new id of ``source_id``, or None when no row was written under it."""
        row = self._db.execute("SELECT new_id FROM ids WHERE source_id = ?", (source_id,)).fetchone()
        return None if row is None else str(row[0])

    def __contains__(self, source_id: object) -> bool:
        return isinstance(source_id, str) and self.get(source_id) is not None

    def update(self, mapping: dict[str, str]) -> None:
        self.add(list(mapping.items()))

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        self._dir.cleanup()


@dataclass
class Planned:
    """One memory record, ready to write once the rows it links to have new ids."""

    line: int
    source_id: str
    record: dict[str, Any]
    #: (kind, "to" | "from", the other row's exported id, created_at)
    links: list[tuple[str, str, str, str | None]] = field(default_factory=list)


@dataclass
class Refusal:
    """A record not imported: its line, its exported id (None when unreadable), the field at
    fault (None when the daemon's refusal named none) and why."""

    line: int
    source_id: str | None
    reason: str
    field: str | None = None


@dataclass
class Summary:
    """What an import did, line by line where something went wrong."""

    records: int = 0
    written: int = 0
    duplicates: int = 0
    #: Records an earlier run of the same import already wrote (answered from their keys).
    already: int = 0
    refused: list[Refusal] = field(default_factory=list)
    links_restored: int = 0
    #: Rows written with the file's vector (no embed queued); the others are embedded again.
    vectors_kept: int = 0
    #: Links whose other row is not in this export or was refused.
    links_skipped: int = 0
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    complete: bool = False

    @property
    def done(self) -> int:
        """Memory records dealt with so far: written, duplicates, already imported and refused."""
        return self.written + self.duplicates + self.already + len(self.refused)

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records, "written": self.written, "duplicates": self.duplicates,
            "already_imported": self.already,
            "refused": [{"line": r.line, "id": r.source_id, "field": r.field, "reason": r.reason}
                        for r in self.refused],
            "links_restored": self.links_restored, "links_skipped": self.links_skipped,
            "vectors_kept": self.vectors_kept,
            "bad_lines": [{"line": n, "reason": why} for n, why in self.bad_lines],
            "complete": self.complete,
        }


class Importer:
    """Writes an export's entries in batches through ``call`` as they come, and keeps the summary.

    ``progress`` is called with the summary after each batch. Use it as a context manager
    (or call :meth:`close`) to remove the id map's temporary file.
    """

    def __init__(self, call: Call | Sequence[Call], *, batch_size: int = 500,
                 batch_bytes: int = DEFAULT_BATCH_BYTES, progress: Callable[[Summary], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep, keep_vectors: bool = True):
        calls = [call] if callable(call) else list(call)
        self.call = calls[0]
        #: Connections free to carry a batch (one batch in flight on each).
        self._free: queue.Queue[Call] = queue.Queue()
        for each in calls:
            self._free.put(each)
        self._connections = len(calls)
        #: Batches sent and not yet answered: their threads, errors and exported ids.
        self._inflight: list[tuple[threading.Thread, list[BaseException], set[str]]] = []
        #: Guards the summary and the id map, which the senders' threads update.
        self._lock = threading.Lock()
        #: False: the file's vectors are not sent, and the target embeds every record.
        self.keep_vectors = keep_vectors
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.progress = progress or (lambda summary: None)
        self.sleep = sleep
        #: exported id -> id in this store
        self.new_ids = IdMap()
        self.summary = Summary()
        #: The batch being filled, its exported ids and its size in bytes.
        self._batch: list[Planned] = []
        self._batch_ids: set[str] = set()
        self._batch_size = 0
        #: Links from a row already read to a row not read yet, by the later row's exported id:
        #: (kind, the earlier row's exported id, created_at). Sent with the later row.
        self._waiting: dict[str, list[tuple[str, str, str | None]]] = {}
        #: The line of the last record written or refused (every record before it is done too).
        self.last_line = 0

    def __enter__(self) -> Importer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.new_ids.close()

    def run(self, entries: Iterable[Entry]) -> Summary:
        """Import every entry, writing as it goes; raise the client's error when the daemon
        cannot take writes (what was sent before stays written)."""
        for entry in entries:
            if isinstance(entry, MemoryLine):
                self.summary.records += 1
                self._add(entry)
            elif isinstance(entry, RefusedLine):
                self.summary.records += 1
                self.summary.refused.append(Refusal(entry.line, entry.source_id, entry.reason, entry.field))
            elif isinstance(entry, BadLine):
                self.summary.bad_lines.append((entry.line, entry.reason))
            elif isinstance(entry, EndLine):
                self.summary.complete = True
        self._flush()
        self._drain()
        # Links to rows that never came (not in this export, or refused before they were read).
        self.summary.links_skipped += sum(len(links) for links in self._waiting.values())
        self._waiting.clear()
        return self.summary

    def _add(self, entry: MemoryLine) -> None:
        source_id = entry.record["id"]
        item = Planned(entry.line, source_id, entry.record)
        # Links from earlier rows that waited for this one.
        for kind, other, created_at in self._waiting.pop(source_id, ()):
            item.links.append((kind, "from", other, created_at))
        outgoing = []
        for link in entry.record.get("links") or []:
            kind, dst, created_at = link.get("kind"), link.get("to"), link.get("created_at")
            if dst == source_id:
                self.summary.links_skipped += 1
                continue
            outgoing.append((kind, dst, created_at))
        # A row this one links to that is still in the batch, or in flight, gets its new id first.
        others = {other for _, _, other, _ in item.links} | {dst for _, dst, _ in outgoing}
        if others & self._batch_ids:
            self._flush()
        if any(others & ids for _, _, ids in self._inflight):
            self._drain()
        for kind, dst, created_at in outgoing:
            if dst in self.new_ids:
                item.links.append((kind, "to", dst, created_at))
            else:  # further down the file (or never): sent with that row
                self._waiting.setdefault(dst, []).append((kind, source_id, created_at))
        cost = record_bytes(entry.record)
        full = len(self._batch) >= self.batch_size or self._batch_size + cost > self.batch_bytes
        if self._batch and full:
            self._flush()
        self._batch.append(item)
        self._batch_ids.add(source_id)
        self._batch_size += cost

    def _flush(self) -> None:
        if not self._batch:
            return
        batch, ids = self._batch, self._batch_ids
        self._batch, self._batch_ids, self._batch_size = [], set(), 0
        if self._connections == 1 or any(item.links for item in batch):
            self._drain()  # its links need every earlier row's new id
            self._write(batch, self.call)
        else:
            while len(self._inflight) >= self._connections:
                self._wait_oldest()
            self._send(batch, ids)
        self.last_line = batch[-1].line
        self.progress(self.summary)

    def _send(self, batch: list[Planned], ids: set[str]) -> None:
        """Write ``batch`` on a free connection, on a thread of its own."""
        errors: list[BaseException] = []
        call = self._free.get()

        def write() -> None:
            try:
                self._write(batch, call)
            except BaseException as exc:  # raised in the importer's thread by _wait_oldest
                errors.append(exc)
            finally:
                self._free.put(call)

        thread = threading.Thread(target=write, name="import-writer", daemon=True)
        self._inflight.append((thread, errors, ids))
        thread.start()

    def _wait_oldest(self) -> None:
        thread, errors, _ = self._inflight.pop(0)
        thread.join()
        if errors:
            raise errors[0]

    def _drain(self) -> None:
        """Wait for every batch in flight (raise the first error one of them met)."""
        while self._inflight:
            self._wait_oldest()

    def params(self, item: Planned) -> dict[str, Any]:
        """The write params of one record, its links resolved to new ids."""
        record = item.record
        params = {name: record[name] for name in WRITE_FIELDS if record.get(name) is not None}
        params["idempotency_key"] = idempotency_key(item.source_id, record["content"])
        restore = {name: record[name] for name in RESTORE_FIELDS if record.get(name) is not None}
        restore["source_id"] = item.source_id
        links = []
        for kind, direction, other, created_at in item.links:
            new_id = self.new_ids.get(other)
            if new_id is not None:
                link = {"kind": kind, direction: new_id}
                if created_at:
                    link["created_at"] = created_at
                links.append(link)
        if links:
            restore["links"] = links
        if self.keep_vectors and record.get("vector") is not None:
            # The daemon keeps it when it is its embedder's and was made from this content.
            restore["vector"] = record["vector"]
        params["restore"] = restore
        return params

    def _write(self, batch: list[Planned], call: Call) -> None:
        from memoryd.client import ClientError

        pending = list(batch)
        attempt = 0
        while pending:
            with self._lock:
                items = [self.params(p) for p in pending]
            try:
                results = call("memory.write_many", {"items": items})["results"]
            except ClientError as exc:
                index = exc.data.get("index")
                if exc.code in ITEM_CODES and isinstance(index, int) and 0 <= index < len(pending):
                    self._refuse(pending.pop(index), exc.message, exc.data.get("field"))
                    continue
                if len(pending) > 1 and (exc.code in UNNAMED_CODES or exc.code in ITEM_CODES):
                    for item in pending:  # the batch is all or nothing: find the refused rows alone
                        self._write([item], call)
                    return
                if exc.code in RETRY_CODES and attempt < len(RETRY_DELAYS_S):
                    self.sleep(RETRY_DELAYS_S[attempt])
                    attempt += 1
                    continue
                if exc.code in RETRY_CODES:
                    raise
                self._refuse(pending[0], f"{exc.message} (error {exc.code})", exc.data.get("field"))
                return
            with self._lock:
                # Links are counted before the batch's own ids join the map (as they were sent).
                for item in pending:
                    self._count_links(item)
                self.new_ids.add([(item.source_id, result["id"]) for item, result in
                                  zip(pending, results, strict=True)])
                for result in results:
                    self._record(result)
            return

    def _count_links(self, item: Planned) -> None:
        kept = sum(1 for _, _, other, _ in item.links if other in self.new_ids)
        self.summary.links_restored += kept
        self.summary.links_skipped += len(item.links) - kept

    def _record(self, result: dict[str, Any]) -> None:
        if result.get("replayed"):  # written (and counted) by an earlier run
            self.summary.already += 1
            return
        if result.get("duplicate_of"):
            self.summary.duplicates += 1
        else:
            self.summary.written += 1
        if result.get("vector_kept"):
            self.summary.vectors_kept += 1

    def _refuse(self, item: Planned, reason: str, field: Any = None) -> None:
        with self._lock:
            self.summary.refused.append(Refusal(item.line, item.source_id, reason, record_field(field)))


def record_field(field: Any) -> str | None:
    """The record field a daemon's refusal names: ``items[3].restore.status`` is the record's
    ``status``, ``restore.source_id`` its ``id``, ``restore.links[0].to`` its ``links``."""
    if not isinstance(field, str) or not field:
        return None
    if field.startswith("items["):
        field = field.partition("].")[2] or field
    if field.startswith("restore."):
        field = field[len("restore."):]
    if field == "source_id":
        return "id"
    if field.startswith("links"):
        return "links"  # the daemon numbers the resolved links, not the record's
    return field
