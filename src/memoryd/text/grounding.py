"""Grounding: a derived statement may only say what its source says.

A fact is grounded in a source when every content word of the fact occurs in
the source (case-insensitively, allowing a plural 's') and every value in it
(numbers, versions, hosts, paths, URLs, issue ids, dates) occurs verbatim.
"""

from __future__ import annotations

from memoryd.text import values
from memoryd.text.normalize import content_words, tokens


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def ungrounded_words(fact: str, source: str) -> list[str]:
    """The fact's content words and values that do not occur in the source (empty: grounded)."""
    src_tokens = set(tokens(source))
    src_stems = {_stem(t) for t in src_tokens}
    missing = [w for w in sorted(content_words(fact)) if w not in src_tokens and _stem(w) not in src_stems]
    lowered = source.lower()
    missing += [v.text for v in values.extract(fact)
                if v.kind in values.SLOT_KINDS and v.text.lower() not in lowered]
    return missing


def grounded(fact: str, source: str) -> bool:
    """Whether every content word and value of ``fact`` occurs in ``source``."""
    return bool(content_words(fact)) and not ungrounded_words(fact, source)
