"""The export file: JSON Lines, a header record, one record per memory, an end record.

docs/export-format.md describes every field; this module is the one place
that writes and reads them.
"""

from __future__ import annotations

import json
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


@dataclass
class ExportFile:
    """An export read back: its header, its memory records in file order, and what was odd."""

    header: dict[str, Any]
    memories: list[MemoryLine] = field(default_factory=list)
    #: (line number, reason) for lines that could not be read.
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    #: Memory records whose fields have the wrong shape (exchange/records.py).
    refused: list[RefusedLine] = field(default_factory=list)
    #: Whether the end record was found (an export cut short has none).
    complete: bool = False
    unknown_records: int = 0


def read(stream: IO[bytes]) -> ExportFile:
    """Read an export (bytes: each line is decoded alone, so one bad line is one refusal);
    raise FormatError when the first line is not a readable header. Nothing else raises:
    an unreadable line goes to ``bad_lines``, a memory record of the wrong shape to
    ``refused`` (exchange/records.py)."""
    lines = records.lines(stream)
    first = next(lines, None)
    if first is None:
        raise FormatError("the file is empty; expected a memoryd export (memoryd export > FILE)")
    head, why = records.decode(first)
    if why is not None:
        raise FormatError(f"line {first.number} is {why}; expected a memoryd export header")
    if not isinstance(head, dict) or head.get("record") != "header" or head.get("format") != FORMAT:
        raise FormatError("the first line is not a memoryd export header; "
                          "make the file with `memoryd export > FILE`")
    version = head.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise FormatError(f"export format_version {version!r} is not one this memoryd reads (it reads "
                          f"1..{FORMAT_VERSION}); import it with the memoryd that wrote it, or a newer one")
    out = ExportFile(header=head)
    for line in lines:
        record, why = records.decode(line)
        if why is not None:
            out.bad_lines.append((line.number, why))
            continue
        kind = record.get("record") if isinstance(record, dict) else None
        if kind == "memory":
            bad = records.check_memory(record)
            if bad is not None:
                out.refused.append(RefusedLine(line.number, records.readable_id(record), bad.field,
                                               f"{bad.field} {bad.reason}"))
                continue
            out.memories.append(MemoryLine(line.number, record))
        elif kind == "end":
            out.complete = True
        elif isinstance(record, dict):
            out.unknown_records += 1  # a later format's record: skipped, counted
        else:
            out.bad_lines.append((line.number, "not a JSON object"))
    return out
