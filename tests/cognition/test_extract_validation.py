"""extract: what the LLM says is kept only when the vocabulary allows it and the source grounds it;
deterministic extractors find the values a regex finds better than a model."""

from __future__ import annotations

import pytest

from memoryd.config import DEFAULT_ENTITY_TYPES
from memoryd.passes.extract import schema, validate
from memoryd.text.entities import Found, find_deterministic

TYPES = list(DEFAULT_ENTITY_TYPES)
SOURCE = "Staging runs Postgres 15 on db1.internal:5432; prod is still on 14."


def test_invented_entity_type_is_discarded_and_counted() -> None:
    answer = {"entities": [{"name": "Postgres", "type": "database"},
                           {"name": "Postgres", "type": "dbms"},
                           {"name": "staging", "type": "environment"}],
              "facts": []}
    ex = validate(SOURCE, answer, TYPES, [])
    assert ex.dropped_vocabulary == 2
    assert ex.entities == [Found("Postgres", "database")]  # positive control: the valid one stays
    assert ex.dropped_ungrounded == 0


def test_schema_offers_only_the_configured_types() -> None:
    enum = schema(["person", "tool"])["properties"]["entities"]["items"]["properties"]["type"]["enum"]
    assert enum == ["person", "tool"]


def test_ungrounded_fact_is_dropped_and_counted() -> None:
    answer = {"entities": [], "facts": ["Staging runs Postgres 15",
                                        "Staging runs MySQL 8",            # a word the source never says
                                        "Prod runs Postgres 16",           # a value the source never says
                                        "Staging Postgres is on db1.internal:5432"]}
    ex = validate(SOURCE, answer, TYPES, [])
    assert "Staging runs MySQL 8" not in ex.facts and "Prod runs Postgres 16" not in ex.facts
    assert ex.dropped_ungrounded == 2
    # Positive control: the grounded ones stay (beside any clause validate takes from the source itself).
    assert {"Staging runs Postgres 15", "Staging Postgres is on db1.internal:5432"} <= set(ex.facts)


def test_ungrounded_entity_name_is_dropped_and_counted() -> None:
    answer = {"entities": [{"name": "MySQL", "type": "database"},
                           {"name": "db1.internal:5432", "type": "host"}], "facts": []}
    ex = validate(SOURCE, answer, TYPES, [])
    assert ex.entities == [Found("db1.internal:5432", "host")]
    assert ex.dropped_ungrounded == 1


def test_answer_outside_the_schema_is_an_error_not_a_default() -> None:
    with pytest.raises(ValueError):
        validate(SOURCE, {"entities": "Postgres"}, TYPES, [])
    with pytest.raises(ValueError):
        validate(SOURCE, {"entities": [{"type": "database"}], "facts": []}, TYPES, [])


@pytest.mark.parametrize(("text", "expected"), [
    ("Docs live at https://docs.acme.dev/guide/setup.", Found("https://docs.acme.dev/guide/setup", "url")),
    ("Edit src/memoryd/passes/extract.py to change it.", Found("src/memoryd/passes/extract.py", "file")),
    ("Config is in ~/.config/memoryd/config.toml now.", Found("~/.config/memoryd/config.toml", "file")),
    ("The cache is at cache-01.prod:6379 for sessions.", Found("cache-01.prod:6379", "host")),
    ("Pinned requests to 2.31.0 for the CVE fix.", Found("2.31.0", "version")),
    ("Deployed ingest v3.3.0 to prod.", Found("v3.3.0", "version")),
    ("Fixed in #4812 after the review.", Found("#4812", "issue")),
    ("INC-221 was the expired certificate.", Found("INC-221", "issue")),
    ("Run `pytest -x tests/unit` before pushing.", Found("pytest -x tests/unit", "command")),
    ("Staging runs Postgres with pgbouncer.", Found("Postgres", "database")),
])
def test_deterministic_extractors_find_values(text: str, expected: Found) -> None:
    found = find_deterministic(text)
    assert expected in found, found


def test_deterministic_extractors_find_nothing_in_plain_prose() -> None:
    assert find_deterministic("The user prefers short answers in the morning.") == []
