"""Surface cues of a memory's kind (speech act), which sentence embeddings
capture poorly: "TODO", "we decided", "Bob said", "seems", "to release: ...".

Each kind has a pattern; a match adds a fixed bonus to that kind's embedding
score in the classify pass. Cues only nudge: the embedding and the margin
rule still decide.
"""

from __future__ import annotations

import re

_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
CUES: dict[str, re.Pattern[str]] = {
    "task": re.compile(
        r"^\s*(todo|fixme|need to|needs to|remember to|next step|don'?t forget|must|should|follow up)\b"
        r"|\b(todo|action item|before (the )?(release|deadline|[a-z]+ \d))\b", re.I),
    "decision": re.compile(
        r"\b(decided|decision|we chose|chose|opted|agreed (to|on)|settled on|going with|ruled out|"
        r"we will (use|go|move|switch)|switching to|we'?re moving to)\b", re.I),
    "preference": re.compile(
        r"\b(prefers?|preferred|likes?|dislikes?|would rather|i'?d rather|loves?|hates?|favou?rite|"
        r"please (always|never|don'?t)|wants? (the|to have|us to)|can'?t stand)\b", re.I),
    "procedure": re.compile(
        r"^\s*(to [a-z]+[^:]{0,40}:|run |steps?\b|first,? |install |use `|how to)"
        r"|\b(then run|and then|step \d|followed by)\b|(->|=>|→)", re.I),
    "conversation": re.compile(
        r"\b(said|says|asked|told|replied|mentioned|wrote|suggested|complained|"
        r"in (the )?(standup|meeting|call|chat|thread))\b|^\s*(user|assistant)\s*:", re.I),
    "event": re.compile(
        rf"\b(yesterday|today|tonight|last (night|week|month|sprint)|this (morning|afternoon|week)|"
        rf"(on|last) ({_DAYS})|at \d{{1,2}}(:\d{{2}})?\s*(am|pm)?|outage|incident|was paged|"
        rf"went down|shipped|rolled back|happened)\b", re.I),
    "observation": re.compile(
        r"\b(seems?|seemed|looks like|appears?|noticed|tends? to|more often|less often|usually|"
        r"rarely|noticeably|probably|maybe|might be|it looks)\b", re.I),
}
BONUS = 0.12  # measured on tests/data/kinds.jsonl: 0.52 → 0.67 accuracy with cues


def cue_kinds(text: str) -> set[str]:
    """The kinds whose cue occurs in ``text``."""
    return {kind for kind, pattern in CUES.items() if pattern.search(text)}
