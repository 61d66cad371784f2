"""The export file: JSON Lines, a header record, one record per memory, an end record.

docs/export-format.md describes every field; this module is the one place
that writes and reads them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from memoryd.exchange import records

FORMAT = "memoryd-export"
FORMAT_VERSION = 1

#: Fields of a memory record that the importer sends back as write params.
WRITE_FIELDS = ("content", "kind", "scope", "agent_id", "user_id", "project", "session_id",
                "importance", "valid_from", "valid_to", "occurred_at", "metadata")
#: Fields of a memory record that the importer restores through ``restore``.
RESTORE_FIELDS = ("status", "recorded_at", "retired_at", "expires_at", "derived", "importance_raw",
                  "corroboration", "access_count", "last_accessed_at", "kind_method", "kind_confidence")


def header(*, exported_at: str, memoryd_version: str, filters: dict[str, Any], with_vectors: bool,
           total: int) -> dict[str, Any]:
    """The first line of an export."""
    return {"record": "header", "format": FORMAT, "format_version": FORMAT_VERSION,
            "memoryd_version": memoryd_version, "exported_at": exported_at, "filters": filters,
            "with_vectors": with_vectors, "total": total}


def memory_record(memory: dict[str, Any]) -> dict[str, Any]:
    """A memory.export row as a record line."""
    return {"record": "memory", **memory}


def end(count: int) -> dict[str, Any]:
    """The last line: its presence shows the export was not cut short."""
    return {"record": "end", "count": count}


def dump(record: dict[str, Any], out: IO[str]) -> None:
    """One record as one line."""
    out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")


class FormatError(ValueError):
    """The file is not a memoryd export this version can read."""


@dataclass(frozen=True)
class MemoryLine:
    """One memory record and the line it came from."""

    line: int
    record: dict[str, Any]


@dataclass(frozen=True)
class RefusedLine:
    """A memory record refused before any write: its line, its id when it has a readable one,
    the field at fault and why."""

    line: int
    source_id: str | None
    field: str
    reason: str


@dataclass(frozen=True)
class BadLine:
    """A line that could not be read: its number and why."""

    line: int
    reason: str


@dataclass(frozen=True)
class EndLine:
    """The end record (its presence shows the export was not cut short)."""

    line: int


#: What reading an export yields after its header, one per line that is not blank.
Entry = MemoryLine | RefusedLine | BadLine | EndLine


@dataclass
class ExportFile:
    """An export read back whole: its header, its memory records in file order, and what was odd.
    (``memoryd import`` streams the file through :class:`Reader` instead; this is for callers
    that want it all at once.)"""

    header: dict[str, Any]
    memories: list[MemoryLine] = field(default_factory=list)
    #: (line number, reason) for lines that could not be read.
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    #: Memory records whose fields have the wrong shape (exchange/records.py).
    refused: list[RefusedLine] = field(default_factory=list)
    #: Whether the end record was found (an export cut short has none).
    complete: bool = False
    unknown_records: int = 0


class _Counting:
    """A byte stream that counts what has been read from it (for progress by bytes)."""

    def __init__(self, stream: IO[bytes]):
        self.stream = stream
        self.read_bytes = 0

    def readline(self, limit: int = -1) -> bytes:
        data = self.stream.readline(limit)
        self.read_bytes += len(data)
        return data


class Reader:
    """An export read line by line: the header at once (FormatError when the first line is
    not a readable header of a version this memoryd reads), then each later line as an
    :data:`Entry` when iterated. Memory held is one line at a time, whatever the file's size.
    Nothing raises after the header: an unreadable line is a :class:`BadLine`, a memory
    record of the wrong shape a :class:`RefusedLine` (exchange/records.py), a record of a
    kind this version does not know is skipped and counted in ``unknown_records``."""

    def __init__(self, stream: IO[bytes]):
        self._source = _Counting(stream)
        self._lines = records.lines(self._source)  # type: ignore[arg-type]
        self.unknown_records = 0
        first = next(self._lines, None)
        if first is None:
            raise FormatError("the file is empty; expected a memoryd export (memoryd export > FILE)")
        head, why = records.decode(first)
        if why is not None:
            raise FormatError(f"line {first.number} is {why}; expected a memoryd export header")
        if not isinstance(head, dict) or head.get("record") != "header" or head.get("format") != FORMAT:
            raise FormatError("the first line is not a memoryd export header; "
                              "make the file with `memoryd export > FILE`")
        version = head.get("format_version")
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
            raise FormatError(f"export format_version {version!r} is not one this memoryd reads (it "
                              f"reads 1..{FORMAT_VERSION}); import it with the memoryd that wrote it, "
                              "or a newer one")
        self.header: dict[str, Any] = head

    @property
    def total(self) -> int | None:
        """How many memories the header says the export holds (None when it does not say)."""
        total = self.header.get("total")
        return total if isinstance(total, int) and not isinstance(total, bool) and total >= 0 else None

    @property
    def bytes_read(self) -> int:
        """Bytes of the file read so far, header included."""
        return self._source.read_bytes

    def __iter__(self) -> Iterator[Entry]:
        for line in self._lines:
            record, why = records.decode(line)
            if why is not None:
                yield BadLine(line.number, why)
                continue
            kind = record.get("record") if isinstance(record, dict) else None
            if kind == "memory":
                bad = records.check_memory(record)
                if bad is not None:
                    yield RefusedLine(line.number, records.readable_id(record), bad.field,
                                      f"{bad.field} {bad.reason}")
                    continue
                yield MemoryLine(line.number, record)
            elif kind == "end":
                yield EndLine(line.number)
            elif isinstance(record, dict):
                self.unknown_records += 1  # a later format's record: skipped, counted
            else:
                yield BadLine(line.number, "not a JSON object")


def read(stream: IO[bytes]) -> ExportFile:
    """Read a whole export (bytes: each line is decoded alone, so one bad line is one
    refusal); raise FormatError when the first line is not a readable header. Nothing else
    raises: see :class:`Reader`."""
    reader = Reader(stream)
    out = ExportFile(header=reader.header)
    for entry in reader:
        if isinstance(entry, MemoryLine):
            out.memories.append(entry)
        elif isinstance(entry, RefusedLine):
            out.refused.append(entry)
        elif isinstance(entry, BadLine):
            out.bad_lines.append((entry.line, entry.reason))
        else:
            out.complete = True
    out.unknown_records = reader.unknown_records
    return out
