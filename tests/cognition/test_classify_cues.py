"""The surface cues of a note's kind (text/speech.py, text/cues.py), on literal notes.

Each rule is checked on notes that carry it and on look-alikes that must not (a
statement about a command is not an instruction, a present passive is not a past
tense). The last tests show how the classifier combines the cues with the embedding,
with a stand-in embedder that gives every prototype the same similarity (so only the
cues can decide); tests/cognition/test_classify_holdout.py runs the real embedder.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from memoryd.config import DEFAULT_KINDS
from memoryd.models.embedder import DIM
from memoryd.passes.classify import PrototypeClassifier
from memoryd.text import speech
from memoryd.text.cues import cue_hits, cue_kinds, cue_scores


@pytest.mark.parametrize("text", [
    "Add retries with jitter to the S3 uploader.",
    "- [ ] write docs for the new export flags",
    "TODO: rotate the staging TLS cert before Dec 3.",
    "Find out why the arm64 wheel is missing from the release artifacts.",
    "Run the unit tests with make test; make test-slow runs the slow ones",
])
def test_imperative_start_finds_an_opening_instruction(text: str) -> None:
    assert speech.imperative_start(text)


@pytest.mark.parametrize("text", [
    "Test fixtures live in tests/fixtures/.",  # "Test" is a noun: a verb follows it
    "`make test` only runs unit tests.",  # opens with code, not an instruction
    "The worker restarted at 3am.",
    "List endpoints default to a page size of 50.",
    "The staging database is Postgres 15 on db1:5432",
])
def test_imperative_start_ignores_statements(text: str) -> None:
    assert not speech.imperative_start(text)


@pytest.mark.parametrize("text", [
    "To release: bump the version in pyproject.toml, tag it, push the tag.",
    "To bump a dependency, edit requirements.in, then run pip-compile.",
    "Docs deploy on merge. If the workflow fails, rerun it with gh workflow run docs.yml.",
    "Rotating the staging cert: run certbot on edge-stg, then restart the ingress.",
    "Local HTTPS for the web app: mkcert -install, then mkcert localhost.",
])
def test_instruction_after_lead_finds_how_tos(text: str) -> None:
    assert speech.instruction_after_lead(text)


@pytest.mark.parametrize("text", [
    "Staging Redis: redis-stg.internal:6380, no auth, db index 2 is used for sessions.",
    "Decision: drop Python 3.9 support in the 4.0 release.",
    "For i18n we're going with FormatJS because the design system uses it.",
])
def test_instruction_after_lead_ignores_labels_and_statements(text: str) -> None:
    assert not speech.instruction_after_lead(text)


def test_has_command_finds_commands_and_code_not_prose() -> None:
    assert speech.has_command("Tail prod logs with `stern -n core api`")
    assert speech.has_command("kubectl -n core get pods")
    assert speech.has_command("ruff format . && mypy src")
    assert not speech.has_command("The API gateway listens on port 8443.")
    assert not speech.has_command("Alice prefers tabs for indentation in Go and Makefiles.")


def test_past_tense_finds_reports_but_not_present_passives() -> None:
    assert speech.past_tense("The cert on api.acme.io expired at 00:00 UTC.")
    assert speech.past_tense("Tomas left the company at the end of October.")
    assert speech.past_tense("Prod database failed over on 2024-03-09.")
    assert not speech.past_tense("Images are pushed to ghcr.io/acme/api and tagged with the git sha.")
    assert not speech.past_tense("The worker image is based on python:3.12-slim.")
    assert not speech.past_tense("The staging database is Postgres 15 on db1:5432")


def test_time_reference_finds_dates_and_times_not_versions_or_ports() -> None:
    for text in ["On 2024-11-04 the Redis node died.", "Yesterday the disk filled up.",
                 "CI was red last Friday.", "The deploy failed at 14:02.", "Released on Mar 4."]:
        assert speech.time_reference(text), text
    for text in ["The staging database is Postgres 15 on db1:5432", "Node is pinned to 20.11.1.",
                 "Ports: api 8000, worker metrics 9102."]:
        assert not speech.time_reference(text), text


# One literal note per cue the brief names, and the kind its cue speaks for.
@pytest.mark.parametrize(("text", "kind", "cue"), [
    ("The staging database is Postgres 15 on db1:5432", "fact", "statement of a state"),
    ("Run `make migrate` and then `make seed` for a local database.", "procedure",
     "lead-in then instruction, or instruction with a command"),
    ("To rebuild the index, pause ingest, run the rebuild, then unpause.", "procedure",
     "lead-in then instruction, or instruction with a command"),
    ("We decided to use SQLite because users should not need a server.", "decision", "decision words"),
    ("We chose Argon2id over bcrypt for password hashing.", "decision", "decision words"),
    ("I prefer ripgrep over grep.", "preference", "liking or wish"),
    ("Always use absolute paths in shell snippets.", "preference", "liking or wish"),
    ("The SSO certificate was renewed on Aug 2.", "event", "past tense with a time"),
    ("TODO: add a timeout to the Stripe client.", "task", "todo marker"),
    ("Need to add an index on events(user_id).", "task", "need to / should"),
    ("Should add rate limiting to the reset endpoint.", "task", "need to / should"),
    ("Review Ana's PR on the billing export.", "task", "instruction without a command"),
    ("The test suite seems about 20% slower since the upgrade.", "observation", "hedge or measurement"),
    ("Bob said in standup that the migration is blocked.", "conversation", "reported speech"),
    ("Q: does the CLI work on Windows? A: only under WSL2.", "conversation", "speaker label"),
])
def test_cue_rule_fires_on_its_literal_example(text: str, kind: str, cue: str) -> None:
    hits = {(c.kind, c.name) for c in cue_hits(text)}
    assert (kind, cue) in hits, sorted(hits)


@pytest.mark.parametrize(("text", "not_kind"), [
    ("The staging database is Postgres 15 on db1:5432", "procedure"),  # no instruction, no command
    ("Run the unit tests with make test; make test-slow runs the slow ones", "fact"),  # an instruction
    ("We decided to use SQLite because users should not need a server.", "fact"),  # first person
    ("The user's laptop is an M2 MacBook Pro.", "event"),  # no past, no time
    ("Looks like most 502s line up with pod restarts.", "preference"),  # "like" is no liking here
    ("pgbouncer runs in transaction pooling mode.", "task"),
])
def test_cue_rule_stays_quiet_on_a_look_alike(text: str, not_kind: str) -> None:
    assert not_kind not in cue_kinds(text), [c.name for c in cue_hits(text)]


def test_cue_scores_add_the_weights_and_mark_missing_speech_acts() -> None:
    scores = cue_scores("TODO: rotate the staging TLS cert by Friday.")
    # todo marker 0.25 + an instruction without a command 0.12 + a deadline 0.06
    assert scores["task"] == pytest.approx(0.43)
    # A speech act the note carries no mark of loses 0.05; fact and observation, what a
    # note is without a mark, are never marked down.
    for kind in ("decision", "preference", "procedure", "event", "conversation"):
        assert scores[kind] == pytest.approx(-0.05), kind
    assert "fact" not in scores and "observation" not in scores


class FlatEmbedder:
    """Every text gets the same unit vector: every prototype is equally similar to every note."""

    def encode(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
        vec = np.zeros(DIM, dtype=np.float32)
        vec[0] = 1.0
        return np.tile(vec, (len(texts), 1))


@pytest.mark.parametrize(("text", "kind"), [
    ("TODO: rotate the staging TLS cert.", "task"),
    ("To rebuild the search index: pause ingest, run the rebuild, then unpause.", "procedure"),
    ("We decided to drop Python 3.9 support.", "decision"),
    ("Alice prefers tabs over spaces.", "preference"),
    ("The deploy failed at 14:02 on Tuesday.", "event"),
    ("The build seems slower since Monday's upgrade, maybe 20%.", "observation"),
    ("Kim said on the call that staging is down Thursday.", "conversation"),
    ("The API gateway listens on port 8443.", "fact"),
])
def test_with_equal_embedding_scores_the_cues_decide_the_kind(text: str, kind: str) -> None:
    clf = PrototypeClassifier(list(DEFAULT_KINDS))
    clf.ready(FlatEmbedder())
    vector = FlatEmbedder().encode([text])[0]
    ranked = clf.scores(vector, text)
    assert ranked[0][0] == kind, ranked[:3]
    # Without the text (no cues) every kind scores the same similarity, 1.0.
    assert {round(score, 6) for _, score in clf.scores(vector, "")} == {1.0}
