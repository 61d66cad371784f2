"""The export file: JSON Lines, a header record, one record per memory, an end record.

docs/export-format.md describes every field; this module is the one place
that writes and reads them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

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


@dataclass
class ExportFile:
    """An export read back: its header, its memory records in file order, and what was odd."""

    header: dict[str, Any]
    memories: list[MemoryLine] = field(default_factory=list)
    #: (line number, reason) for lines that could not be read.
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    #: Whether the end record was found (an export cut short has none).
    complete: bool = False
    unknown_records: int = 0


def _lines(stream: IO[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(stream, start=1):
        if line.strip():
            yield number, line


def read(stream: IO[str]) -> ExportFile:
    """Read an export; raise FormatError when the first line is not a readable header."""
    lines = _lines(stream)
    first = next(lines, None)
    if first is None:
        raise FormatError("the file is empty; expected a memoryd export (memoryd export > FILE)")
    try:
        head = json.loads(first[1])
    except json.JSONDecodeError as exc:
        raise FormatError(f"line {first[0]} is not JSON ({exc}); expected a memoryd export header") from exc
    if not isinstance(head, dict) or head.get("record") != "header" or head.get("format") != FORMAT:
        raise FormatError("the first line is not a memoryd export header; "
                          "make the file with `memoryd export > FILE`")
    version = head.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise FormatError(f"export format_version {version!r} is not one this memoryd reads (it reads "
                          f"1..{FORMAT_VERSION}); import it with the memoryd that wrote it, or a newer one")
    out = ExportFile(header=head)
    for number, line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            out.bad_lines.append((number, f"not JSON ({exc.msg})"))
            continue
        kind = record.get("record") if isinstance(record, dict) else None
        if kind == "memory":
            if not isinstance(record.get("id"), str) or not isinstance(record.get("content"), str):
                out.bad_lines.append((number, "a memory record needs a string id and content"))
                continue
            out.memories.append(MemoryLine(number, record))
        elif kind == "end":
            out.complete = True
        else:
            out.unknown_records += 1  # a later format's record: skipped, counted
    return out
