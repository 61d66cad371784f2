"""Normal forms for comparing memories."""

from __future__ import annotations

import re
import unicodedata

#: Dropped from the end of a loose form (after whitespace is collapsed to single spaces).
_TRAIL_CHARS = " .!;:,"
_TOKEN = re.compile(r"[\w./:@#-]+", re.UNICODE)
STOPWORDS = frozenset([
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "being", "of", "to", "in", "on",
    "at", "for", "by", "with", "and", "or", "but", "if", "then", "so", "as", "it", "its", "this",
    "that", "these", "those", "there", "here", "we", "our", "us", "i", "me", "my", "you", "your",
    "he", "she", "they", "them", "their", "do", "does", "did", "has", "have", "had", "will",
    "would", "should", "can", "could", "may", "might", "must", "not", "no", "yes", "also", "just",
    "from", "into", "about", "over", "under", "than", "too", "very",
])


def loose(text: str) -> str:
    """Case-folded, whitespace-collapsed, trailing punctuation dropped (normalised duplicates)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    # The same as re.sub(r"\s+", " ", ...) then re.sub(r"[\s.!;:,]+$", "", ...) (split()
    # splits on exactly the characters \s matches, and only single spaces are left for the
    # strip), at a fifth of the time: every write hashes its loose form (memories.loose_hash).
    return " ".join(folded.split()).rstrip(_TRAIL_CHARS)


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens, keeping dotted/colon'd tokens (versions, hosts) whole."""
    return [t.strip(".:,-").lower() for t in _TOKEN.findall(unicodedata.normalize("NFKC", text))
            if t.strip(".:,-")]


def content_words(text: str) -> set[str]:
    """Tokens that carry meaning (stop-words dropped)."""
    return {t for t in tokens(text) if t not in STOPWORDS}


def jaccard(a: str, b: str) -> float:
    """Overlap of the content words of two texts (0..1)."""
    wa, wb = content_words(a), content_words(b)
    if not wa and not wb:
        return 1.0
    return len(wa & wb) / len(wa | wb)
