"""text.normalize.loose: the loose form duplicates and forget's copies are judged on."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.text.normalize import loose


def _by_regex(text: str) -> str:
    """The loose form as its definition states it: NFKC, case-folded, stripped, runs of
    whitespace made one space, trailing whitespace and . ! ; : , dropped."""
    folded = unicodedata.normalize("NFKC", text).casefold().strip()
    return re.sub(r"[\s.!;:,]+$", "", re.sub(r"\s+", " ", folded))


def test_loose_form_of_known_texts() -> None:
    assert loose("  The Key  is\t\nHERE!!! ...  ") == "the key is here"
    assert loose("ﬁle\u00a0NAME;:,") == "file name"  # NFKC ligature, a no-break space
    assert loose("a.b") == "a.b"  # inner punctuation stays
    assert loose("...") == ""


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(" \t\n\r\x0b\x0c\x1c\x1f\x85\u00a0\u2028\u3000.!;:,aBc\u00c5ﬁß"))
               | st.characters(), max_size=40))
def test_loose_matches_its_regex_definition(text: str) -> None:
    assert loose(text) == _by_regex(text)
