"""The grammatical shape of a short note: is it an instruction, a report of the past, a command?

Sentence embeddings place a note by its topic (Postgres, CI, a deploy), while
its kind is a speech act: "Restart the worker" (an instruction) and "The
worker restarted at 3am" (a report) share nearly every content word. These
helpers look at the few surface features that carry the act, with small word
lists instead of a parser (nothing is downloaded, and a note is 5-50 words):

* ``imperative_start``: the first clause opens with a verb in its base form
  ("Add retries ...", "- [ ] write docs", "TODO: rotate ...");
* ``instruction_after_lead``: a lead-in then an instruction ("To release: bump ...",
  "If Gradle gets weird, clear ...", "Rotating the cert: run ...");
* ``has_command``: a shell command or code span (backticks, flags, pipes, ``&&``);
* ``past_tense`` and ``time_reference``: the marks of a report of what happened.
"""

from __future__ import annotations

import re


def _wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


#: Verbs that open instructions in developers' notes ("Run ...", "Rotate ...").
#: Words that are more often nouns at the start of a note ("test", "build", "load",
#: "release", "cache") are left out: "Build cache hit rate seems low" is no instruction.
IMPERATIVE_VERBS = _wordset("""
add answer apply ask attach audit backfill benchmark bisect branch bump call cancel change check
chase clean clear clone close commit compile configure confirm convert copy create cut debug delete
disable document double-check download drain drop edit email enable ensure escalate exec expect
export fetch file find finish fix flush follow get give go grab grant hand have install investigate
invite keep kill label leave link list look make merge migrate mount move open paste patch pause
pin ping point port-forward post print profile promote prune publish pull purge push put read
rebase rebuild reboot redeploy refactor regenerate reindex reload remind remove rename renew reopen
replace reply reproduce request rerun reset resize restart restore retry revert review revoke
rewrite roll rotate run scale schedule seed send set share ship shell sign snapshot split start
stop submit swap switch sync tag tail take talk tell trim try turn uninstall unpause unpin update
upgrade upload use verify wait watch wipe wire write
""")

#: Openers that may come before an instruction's verb: list markers, "TODO:", "Next:" ...
_LEAD = re.compile(
    r"^\s*(?:[-*•]\s*(?:\[[ xX]?\]\s*)?|\d+[.)]\s+|\[[ xX]?\]\s*)?"
    r"(?:(?:todo|fixme|next(?: up| step)?|action item|then|first|please|also|now)\b[^:\s]*\s*:?\s*)*",
    re.I)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
#: A finite verb right after the first word means it was a noun ("Test fixtures live in").
_FINITE = _wordset("""
is are was were has have had does do did seems seem looks look appears live lives sits sit runs
takes uses goes went got gets stays needs keeps means holds lists starts returns fails works
default defaults come comes
""")
_CLAUSE_END = re.compile(r"[;:.!?—–(]|,\s|\s-\s")

#: A lead-in, then the instruction: "To X: do", "If X, do", "Before pushing, run", "X steps:".
_INSTRUCTION_LEAD = re.compile(
    r"^\s*(?:(?:to|for|when|if|before|after|once|whenever|on)\b[^:,—–]{2,80}[:,—–]"
    r"|[A-Za-z][\w'-]*ing\b[^:—–]{0,60}[:—–]"
    r"|[^:—–]{0,60}\b(?:steps?|flow|in order|how-?to|recipe|runbook|locally)\s*[:—–])\s*",
    re.I)

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_TITLE = re.compile(r"^[^:`]{3,60}:\s+")
_COMMAND = re.compile(
    r"`[^`]+`|\s--?[a-z][\w-]*|&&|\|\s*\w|\$\(|\$[A-Z_]{2,}|(?:^|\s)\./[\w.-]+"
    r"|\b(?:sudo|kubectl|docker|git|npm|npx|pnpm|yarn|pip|uv|make|pytest|helm|terraform|psql|"
    r"redis-cli|curl|ssh|scp|systemctl|brew|apt(?:-get)?|cargo|go|gradle|\.?/?gradlew|alembic|"
    r"certbot|aws|gh|buf|twine|openssl|lsof|stern|fastlane|k6|mkcert|ngrok|memoryd|jq|rm|cd)"
    r"\s+[\w$.{<\"'/-]")

_IRREGULAR_PAST = _wordset("""
was were had did got went ran took broke came left hit lost began fell won sent made found saw
became brought caught drove forgot froze gave grew held kept knew led lit met paid put quit rose
set shut slept spent split spoke stood stuck swore threw told understood woke wore wrote
""")
#: Words in -ed that are not verbs in the past: passive participles of a present state
#: ("is used for", "are pushed to ghcr.io and tagged with the sha") and a few adjectives.
_PRESENT_PASSIVE = re.compile(r"\b(?:is|are|be|been|being|am|get|gets|stays?|remains?)\b|'s\s|'re\s", re.I)
#: The last clause break before a word (punctuation then a space: "ghcr.io/api" is no break).
_CLAUSE_START = re.compile(r"[;:.!?,—–(]\s+(?!.*[;:.!?,—–(]\s)", re.S)
_NOT_PAST = _wordset("""
need needed speed feed seed embed embedded bed red shed based used hundred indeed united limited
detailed advanced dedicated
""")

_MONTHS = (r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|jun(?:e)?|jul(?:y)?|aug(?:ust)?|"
           r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?")
_DAYS = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_TIME = re.compile(
    rf"\b(?:yesterday|today|tonight|this (?:morning|afternoon|evening)|last (?:night|week|month|sprint|year)"
    rf"|over the weekend|the other day|earlier today|(?:on|last|this|since|until) (?:{_DAYS})"
    rf"|(?:{_DAYS})'s|\d{{4}}-\d{{2}}-\d{{2}}|(?:{_MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?\b"
    rf"|\d{{1,2}}(?:st|nd|rd|th)? (?:{_MONTHS})\b|at \d{{1,2}}[:.]\d{{2}}|at \d{{1,2}}\s?(?:am|pm)"
    rf"|\d{{1,2}}:\d{{2}} utc|overnight|in (?:{_MONTHS})\b)",
    re.I)


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def first_clause(text: str) -> str:
    """The note up to its first clause break, without list markers or a "TODO:" lead."""
    body = _LEAD.sub("", text, count=1)
    return _CLAUSE_END.split(body, maxsplit=1)[0]


def _opens_with_verb(clause: str) -> bool:
    if not re.match(r"\s*[A-Za-z]", clause):  # "`make test` runs ..." opens with code, not a verb
        return False
    words = _words(clause)
    return bool(words) and words[0] in IMPERATIVE_VERBS and not _FINITE.intersection(words[1:3])


def imperative_start(text: str) -> bool:
    """True when the note's first clause is an instruction: "Add retries to the uploader"."""
    return _opens_with_verb(first_clause(text))


def instruction_after_lead(text: str) -> bool:
    """True when a sentence of the note is a lead-in and an instruction: "To release: bump ...",
    "If the workflow fails, rerun it ...", or a title and a command: "Local HTTPS: mkcert -install"."""
    for sentence in _SENTENCE.split(text):
        m = _INSTRUCTION_LEAD.match(sentence)
        if m and _opens_with_verb(sentence[m.end():]):
            return True
        m = _TITLE.match(sentence)
        if m and _COMMAND.search(" " + sentence[m.end():][:30]):
            return True
    return False


def has_command(text: str) -> bool:
    """True when the note quotes a command or code: backticks, flags, pipes, a known CLI."""
    return bool(_COMMAND.search(text))


def past_tense(text: str) -> bool:
    """True when a verb of the note is in the past: "was revoked", "rolled back", "died"."""
    for m in _WORD.finditer(text):
        word = m.group().lower()
        if word in _IRREGULAR_PAST:
            return True
        if word.endswith("ed") and len(word) > 4 and word not in _NOT_PAST:
            before = text[:m.start()]
            clause = before[c.end():] if (c := _CLAUSE_START.search(before)) else before
            if not _PRESENT_PASSIVE.search(clause):
                return True
    return False


def time_reference(text: str) -> bool:
    """True when the note names a point in time: a date, a weekday, "yesterday", "at 14:02"."""
    return bool(_TIME.search(text))
