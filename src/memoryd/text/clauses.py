"""Atomic facts by construction: the self-contained clauses of a note.

A note such as "Staging runs Redis 7 on cache1:6379; prod still runs Redis 6."
holds two facts. Splitting at sentence ends, semicolons and clause-joining
"and"/"but" gives candidates that are grounded by construction (they are the
source's own words); a clause is kept only when it can stand alone: enough
content words, a value or a capitalised name in it, and no leading pronoun
that points outside it.
"""

from __future__ import annotations

import re

from memoryd.text import values
from memoryd.text.normalize import content_words

_SPLIT = re.compile(
    r"(?<=[.!?])\s+(?=[A-Z0-9`\"'])"  # sentence ends
    r"|;\s*"  # semicolons
    r"|,?\s+(?:and|but|while|whereas)\s+(?=[a-z]*\s*[A-Z0-9`])"  # joined clauses with a new subject
)
_PRONOUN = re.compile(r"^(it|its|they|them|this|that|these|those|he|she|his|her|there|which|also)\b", re.I)
_NAME = re.compile(r"\b[A-Z][\w.+-]*[a-z0-9]")
MIN_WORDS = 3


def clauses(text: str) -> list[str]:
    """The self-contained clauses of ``text`` (empty for a one-clause note)."""
    parts = [p.strip(" ,.;:!?") for p in _SPLIT.split(" ".join(text.split()))]
    parts = [p for p in parts if p]
    if len(parts) < 2:
        return []
    out = []
    for part in parts:
        if _PRONOUN.match(part) or len(content_words(part)) < MIN_WORDS:
            continue
        if not (values.extract(part) or _NAME.search(part)):
            continue
        out.append(part[0].upper() + part[1:])
    return out
