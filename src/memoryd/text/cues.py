"""Surface cues of a memory's kind (its speech act), which sentence embeddings capture poorly.

An embedding places "Restart the worker" and "The worker restarted at 3am"
side by side (same topic); the kind lives in a few surface marks: an
instruction's opening verb, a "TODO:", "we decided", "Bob said", a hedge
("seems"), a date with a past tense. Each :class:`Cue` is one such mark with
the kind it speaks for and a weight; the classify pass adds the weights of the
cues a note carries to that kind's embedding score (passes/classify.py), so a
cue outweighs a topical resemblance; a kind that is a marked speech act (an
instruction, a wish, a report ...) loses a little when the note carries none
of its marks. The weights were chosen on tests/data/kinds_tune.jsonl (never on
kinds_holdout.jsonl): about 0.1 is the spread between the best and the
third-best kind's embedding score on a typical note.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from memoryd.text import speech


@dataclass(frozen=True, slots=True)
class Cue:
    """A surface mark of one kind: ``test(text)`` is true when the note carries it."""

    name: str
    kind: str
    weight: float
    test: Callable[[str], bool]


def _rx(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern, re.I)
    return lambda text: compiled.search(text) is not None


_HEDGE = re.compile(
    r"\b(seems?|seemed|looks?( like)?|appears?|apparently|feels?|noticed|tends? to|usually|often|"
    r"rarely|almost (always|every|never|all)|maybe|probably|possibly|might|could be|roughly|lately|"
    r"noticeably|trending|creeps?|spikes?|climbs?|much (faster|slower)|a lot (faster|slower)|"
    r"(faster|slower) than|more often|less often)\b"
    r"|~\s?\d|\b(about|around|roughly|nearly) (\d|a (third|quarter|half|dozen))|\b\d+(\.\d+)?x\b",
    re.I)
_SPEECH_VERB = re.compile(
    r"\b(said|says|asked|told|replied|mentioned|wrote|suggested|complained|pinged|emailed|relayed|"
    r"forwarded|argued|explained|pointed (out|him|her|them)|went back and forth|confirmed that)\b", re.I)
_SPEAKER = re.compile(
    r"(^|[.?!]\s+)(user|me|assistant|q|a|b|[A-Z][a-z]+)\s*:\s*"
    r"([\"'“‘]|(i|i'm|i'll|i've|we|you|can|could|let's|no|yes|is|are|does|do|did|why|what|how|want|"
    r"sure|ok|okay|thanks)\b)", re.I)
_DECISION = re.compile(
    r"\b(decided|decision|decide|outcome|chose|chosen|picked|opted|agreed|settled on|going with|ruled out|"
    r"rejected|resolved|final call|voted|approved|accepted|adopt(ing)?|not adopting|won'?t|will not|"
    r"we'?ll|we will|will be|dropped the idea|going forward|from now on|standardi[sz]ing on|"
    r"sticking with|switching to|moving (from|to)|retiring)\b", re.I)
_PREFERENCE = re.compile(
    r"\b(prefers?|preferred|preference|likes|dislikes?|hates?|loves?|would rather|'d rather|"
    r"favou?rite|fine with|can'?t stand|go-to|annoy(ed|ing|s)|finds? (it|them|\w+ing)|wants?)\b"
    r"|\b(i|we|they|user|he|she) (really )?like\b|\bplease\b|\b(always|never) (use|give|add|write|run)\b",
    re.I)
_TASK_MARK = re.compile(
    r"^\s*([-*]\s*)?\[ ?\]|^\s*(todo|fixme|xxx|action item|next( up| step)?)\b|\btodo\(", re.I)
_TASK_NEED = re.compile(
    r"^\s*(we |i |you )?(still )?(need to|needs to|have to|has to|must|should|remember to|"
    r"don'?t forget|follow up|ask|remind|chase|check w/?)\b"
    r"|\b(someone|somebody|we) (still )?(should|needs? to|has to|must|need)\b|\bstill (have|has|need)s? to\b",
    re.I)
_DEADLINE = re.compile(
    r"\bby (tomorrow|today|tonight|monday|tuesday|wednesday|thursday|friday|the end|end of|eod|eow|next)\b"
    r"|\bbefore (the|it|he|she|they|we|\w+ (goes|ships|reaches|flips|lapses|leaves|lands))\b"
    r"|\bthis week\b|\bonce (all|the|it|we)\b|\bblocked on\b", re.I)
_STEPS = re.compile(r"\bthen\b|\bfirst\b|\bin order\b|\bsteps?\b|->|=>|→|\bafterwards?\b", re.I)
_INCIDENT = re.compile(
    r"\b(outage|incident|inc-\d+|was paged|went down|rolled back|happened|took place|kicked off|"
    r"released|launched|merged|shipped|joined|left the)\b", re.I)
_STATE = re.compile(
    r"\b(is|are|has|have|lives?|runs?|uses?|sits?|listens?|expires?|targets?|defaults?|owns?|holds?|"
    r"points?|comes? from|stores?|keeps?|goes|go through|needs?|reads?|talks?|handles?|lasts?|consumes?)\b",
    re.I)


def _instruction(text: str) -> bool:
    return speech.instruction_after_lead(text) or (speech.imperative_start(text) and speech.has_command(text))


def _todo_instruction(text: str) -> bool:
    return speech.imperative_start(text) and not speech.has_command(text) and not _STEPS.search(text)


def _report(text: str) -> bool:
    return speech.past_tense(text) and speech.time_reference(text)


def _statement(text: str) -> bool:
    """A present-tense statement about a thing: no instruction, report, hedge or first person."""
    return (bool(_STATE.search(text)) and not speech.imperative_start(text)
            and not speech.instruction_after_lead(text) and not speech.past_tense(text)
            and not _HEDGE.search(text) and not re.search(r"\b(i|we|you|me)\b", text, re.I))


CUES: tuple[Cue, ...] = (
    Cue("todo marker", "task", 0.25, lambda t: _TASK_MARK.search(t) is not None),
    Cue("need to / should", "task", 0.15, lambda t: _TASK_NEED.search(t) is not None),
    Cue("instruction without a command", "task", 0.12, _todo_instruction),
    Cue("deadline", "task", 0.06, lambda t: _DEADLINE.search(t) is not None),
    Cue("lead-in then instruction, or instruction with a command", "procedure", 0.2, _instruction),
    Cue("ordered steps", "procedure", 0.08, lambda t: _STEPS.search(t) is not None),
    Cue("command", "procedure", 0.04, speech.has_command),
    Cue("past tense with a time", "event", 0.2, _report),
    Cue("time reference", "event", 0.05, speech.time_reference),
    Cue("past tense", "event", 0.04, speech.past_tense),
    Cue("incident or release", "event", 0.08, lambda t: _INCIDENT.search(t) is not None),
    Cue("decision words", "decision", 0.15, lambda t: _DECISION.search(t) is not None),
    Cue("liking or wish", "preference", 0.15, lambda t: _PREFERENCE.search(t) is not None),
    Cue("hedge or measurement", "observation", 0.12, lambda t: _HEDGE.search(t) is not None),
    Cue("reported speech", "conversation", 0.15, lambda t: _SPEECH_VERB.search(t) is not None),
    Cue("speaker label", "conversation", 0.2, lambda t: _SPEAKER.search(t) is not None),
    Cue("meeting or channel", "conversation", 0.06,
        _rx(r"\b(in|during|on) (the |a |their |our )?(standup|meeting|call|chat|thread|retro|1:1|dm|"
            r"planning|sync|slack|sprint review|design review)\b|\bin #[\w-]+")),
    Cue("statement of a state", "fact", 0.08, _statement),
)


#: Kinds that are speech acts with marks of their own (an instruction, a wish, a report ...).
#: A note that carries none of a kind's marks is seldom of that kind: on kinds_tune.jsonl every
#: note of these kinds carries one, while 6 of 35 facts and 2 of 25 observations carry none.
#: Such a kind loses MISSING_CUE, so a topical resemblance alone ("The staging database is
#: Postgres 15 on db1:5432" looks like the procedures about staging databases) does not make
#: a statement a procedure. Facts and observations are what a note is without a mark.
MARKED_KINDS = frozenset({"decision", "preference", "procedure", "event", "task", "conversation"})
MISSING_CUE = 0.05


def cue_hits(text: str) -> list[Cue]:
    """The cues ``text`` carries."""
    return [cue for cue in CUES if cue.test(text)]


def cue_kinds(text: str) -> set[str]:
    """The kinds for which ``text`` carries at least one cue."""
    return {cue.kind for cue in cue_hits(text)}


def cue_scores(text: str) -> dict[str, float]:
    """kind -> what the cues add to that kind's score: the summed weights of the cues ``text``
    carries for it, or ``-MISSING_CUE`` for a kind of MARKED_KINDS it carries none of (other
    kinds absent: they add nothing)."""
    scores: dict[str, float] = {kind: -MISSING_CUE for kind in MARKED_KINDS}
    for cue in cue_hits(text):
        scores[cue.kind] = max(scores.get(cue.kind, 0.0), 0.0) + cue.weight
    return scores
