"""Import an export through ``memory.write_many`` on the operator socket.

The file is untrusted: exchange/records.py has already refused the lines it
cannot read and the records of the wrong shape (by line and field), so every
record planned here has fields a write can be built from; what the target
store refuses is refused per record, and the rest is written.

Each memory record becomes a write whose idempotency key is derived from the
record (its exported id and its content), so an import that is cut short and
run again writes every row once. The write carries a ``restore`` block with
the row's status, record times and counters, and its links to rows already
imported (by their new ids).

A link is sent with whichever of its two rows is written later, so its other
end already has a new id. Rows are written in layers: first every row that
needs no other row, then the rows that link only to those, and so on; within
a layer, in file order, in batches.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from memoryd.exchange.exportfile import RESTORE_FIELDS, WRITE_FIELDS, ExportFile

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


@dataclass
class Planned:
    """One memory record, ready to write once the rows it links to have new ids."""

    line: int
    source_id: str
    record: dict[str, Any]
    #: (kind, "to" | "from", the other row's exported id, created_at)
    links: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    depth: int = 0


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
    refused: list[Refusal] = field(default_factory=list)
    links_restored: int = 0
    #: Rows written with the file's vector (no embed queued); the others are embedded again.
    vectors_kept: int = 0
    #: Links whose other row is not in this export or was refused.
    links_skipped: int = 0
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    complete: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records, "written": self.written, "duplicates": self.duplicates,
            "refused": [{"line": r.line, "id": r.source_id, "field": r.field, "reason": r.reason}
                        for r in self.refused],
            "links_restored": self.links_restored, "links_skipped": self.links_skipped,
            "vectors_kept": self.vectors_kept,
            "bad_lines": [{"line": n, "reason": why} for n, why in self.bad_lines],
            "complete": self.complete,
        }


def plan(export: ExportFile) -> tuple[list[Planned], int]:
    """Order the records for writing; return them and the count of links that cannot be kept."""
    planned: list[Planned] = []
    position: dict[str, int] = {}
    for entry in export.memories:
        source_id = entry.record["id"]
        position.setdefault(source_id, len(planned))
        planned.append(Planned(entry.line, source_id, entry.record))
    skipped = 0
    for i, item in enumerate(planned):
        for link in item.record.get("links") or []:
            if not isinstance(link, dict):
                skipped += 1
                continue
            kind, dst, created_at = link.get("kind"), link.get("to"), link.get("created_at")
            j = position.get(dst) if isinstance(dst, str) else None
            if j is None or j == i or not isinstance(kind, str):
                skipped += 1
                continue
            if j < i:
                item.links.append((kind, "to", planned[j].source_id, created_at))
            else:
                planned[j].links.append((kind, "from", item.source_id, created_at))
    for i, item in enumerate(planned):
        # Every link of an item points at an earlier item, so one pass in file order suffices.
        item.depth = max((planned[position[other]].depth + 1 for _, _, other, _ in item.links), default=0)
        assert all(position[other] < i for _, _, other, _ in item.links)
    order = sorted(planned, key=lambda p: p.depth)  # stable: file order within a layer
    return order, skipped


class Importer:
    """Writes a planned export in batches through ``call`` and keeps the summary."""

    def __init__(self, call: Call, *, batch_size: int = 500, batch_bytes: int = DEFAULT_BATCH_BYTES,
                 progress: Callable[[int], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep, keep_vectors: bool = True):
        self.call = call
        #: False: the file's vectors are not sent, and the target embeds every record.
        self.keep_vectors = keep_vectors
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.progress = progress or (lambda n: None)
        self.sleep = sleep
        #: exported id -> id in this store
        self.new_ids: dict[str, str] = {}
        self.summary = Summary()

    def run(self, export: ExportFile) -> Summary:
        """Import every record; raise the client's error when the daemon cannot take writes."""
        order, skipped = plan(export)
        self.summary.records = len(order) + len(export.refused)
        self.summary.links_skipped = skipped
        self.summary.bad_lines = list(export.bad_lines)
        self.summary.refused = [Refusal(r.line, r.source_id, r.reason, r.field) for r in export.refused]
        self.summary.complete = export.complete
        layer_start = 0
        while layer_start < len(order):
            depth = order[layer_start].depth
            layer_end = layer_start
            while layer_end < len(order) and order[layer_end].depth == depth:
                layer_end += 1
            for batch in self._batches(order[layer_start:layer_end]):
                self._write(batch)
                self.progress(len(batch))
            layer_start = layer_end
        return self.summary

    def _batches(self, layer: list[Planned]) -> Iterator[list[Planned]]:
        """The layer in batches of at most ``batch_size`` records and about ``batch_bytes`` of
        request: a record with a vector is ~3 KB, and 500 of them would pass the daemon's
        max_frame_bytes (1 MiB by default), which refuses the whole call."""
        batch: list[Planned] = []
        size = 0
        for item in layer:
            cost = record_bytes(item.record)
            if batch and (len(batch) >= self.batch_size or size + cost > self.batch_bytes):
                yield batch
                batch, size = [], 0
            batch.append(item)
            size += cost
        if batch:
            yield batch

    def params(self, item: Planned) -> dict[str, Any]:
        """The write params of one record, its links resolved to new ids."""
        record = item.record
        params = {name: record[name] for name in WRITE_FIELDS if record.get(name) is not None}
        params["idempotency_key"] = idempotency_key(item.source_id, record["content"])
        restore = {name: record[name] for name in RESTORE_FIELDS if record.get(name) is not None}
        restore["source_id"] = item.source_id
        links = []
        for kind, direction, other, created_at in item.links:
            if other in self.new_ids:
                link = {"kind": kind, direction: self.new_ids[other]}
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

    def _write(self, batch: list[Planned]) -> None:
        from memoryd.client import ClientError

        pending = list(batch)
        attempt = 0
        while pending:
            items = [self.params(p) for p in pending]
            try:
                results = self.call("memory.write_many", {"items": items})["results"]
            except ClientError as exc:
                index = exc.data.get("index")
                if exc.code in ITEM_CODES and isinstance(index, int) and 0 <= index < len(pending):
                    self._refuse(pending.pop(index), exc.message, exc.data.get("field"))
                    continue
                if len(pending) > 1 and (exc.code in UNNAMED_CODES or exc.code in ITEM_CODES):
                    for item in pending:  # the batch is all or nothing: find the refused rows alone
                        self._write([item])
                    return
                if exc.code in RETRY_CODES and attempt < len(RETRY_DELAYS_S):
                    self.sleep(RETRY_DELAYS_S[attempt])
                    attempt += 1
                    continue
                if exc.code in RETRY_CODES:
                    raise
                self._refuse(pending[0], f"{exc.message} (error {exc.code})", exc.data.get("field"))
                return
            for item, result in zip(pending, results, strict=True):
                self._record(item, result)
            return

    def _record(self, item: Planned, result: dict[str, Any]) -> None:
        self.new_ids[item.source_id] = result["id"]
        if result.get("duplicate_of"):
            self.summary.duplicates += 1
        else:
            self.summary.written += 1
        if result.get("vector_kept"):
            self.summary.vectors_kept += 1
        kept = sum(1 for _, _, other, _ in item.links if other in self.new_ids)
        self.summary.links_restored += kept
        self.summary.links_skipped += len(item.links) - kept

    def _refuse(self, item: Planned, reason: str, field: Any = None) -> None:
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
