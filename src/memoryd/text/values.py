"""Deterministic extractors for values a regex finds better than a model:
URLs, file paths, host:port, versions, issue numbers, code identifiers,
dates, e-mail addresses and plain numbers.

Each returns the values as they appear in the text (so grounding holds by
construction). ``value_slots`` reduces a text to (subject, values): the text
with its values masked, and the values found; two texts with the same subject
and different values are update/contradiction candidates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

URL = re.compile(r"\bhttps?://[^\s<>\"')\]]+", re.I)
EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
HOST_PORT = re.compile(rf"\b(?:{_LABEL}\.)*{_LABEL}:\d{{2,5}}\b", re.I)
PATH = re.compile(r"(?<![\w/])(?:~|\.{1,2})?/(?:[\w.@+-]+/)*[\w.@+-]+/?|\b[\w-]+(?:/[\w.-]+)+\.\w{1,8}\b")
VERSION = re.compile(r"\b[vV]?\d+(?:\.\d+){1,3}(?:[-+][\w.]+)?\b|\b[vV]\d+\b")
ISSUE = re.compile(r"(?<![\w&])#\d{1,7}\b|\b[A-Z][A-Z0-9]{1,9}-\d{1,7}\b")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b|\b\d{1,2}:\d{2}\b")
IDENT = re.compile(r"`([^`\n]{1,80})`|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b|\b[a-z0-9]+(?:_[a-z0-9]+)+\b")
# A number may end a sentence ("Node 18."), but not run into a word or a longer dotted value.
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?%?(?!\w|\.\w)")

KINDS = {
    "url": URL, "email": EMAIL, "host_port": HOST_PORT, "path": PATH, "version": VERSION,
    "issue": ISSUE, "date": DATE, "identifier": IDENT, "number": NUMBER,
}
#: Kinds that make a "value" for contradiction slots (identifiers are part of the subject).
SLOT_KINDS = ("url", "email", "host_port", "path", "version", "issue", "date", "number")


@dataclass(frozen=True)
class Value:
    kind: str
    text: str
    start: int
    end: int


def extract(text: str) -> list[Value]:
    """Every value found, earlier kinds in KINDS winning overlaps (a URL is not also a path)."""
    taken: list[tuple[int, int]] = []
    found: list[Value] = []
    for kind, pattern in KINDS.items():
        for m in pattern.finditer(text):
            start, end = m.span(1) if kind == "identifier" and m.group(1) else m.span()
            if kind in ("url", "path"):
                # Sentence punctuation after a URL or path is not part of it.
                while end > start and text[end - 1] in ".,;:!?":
                    end -= 1
            if any(start < e and s < end for s, e in taken):
                continue
            taken.append((start, end))
            found.append(Value(kind, text[start:end], start, end))
    return sorted(found, key=lambda v: v.start)


def value_slots(text: str) -> tuple[str, tuple[str, ...]]:
    """(subject, values): the text lower-cased with slot values masked, and those values."""
    values = [v for v in extract(text) if v.kind in SLOT_KINDS]
    out, last = [], 0
    for v in values:
        out.append(text[last:v.start])
        out.append(f"<{v.kind}>")
        last = v.end
    out.append(text[last:])
    subject = re.sub(r"\s+", " ", "".join(out)).strip().lower().rstrip(".!")
    return subject, tuple(v.text.lower() for v in values)
