"""memoryd.masking: credentials in URLs, masked in whatever text holds them.

Expected values are written out by hand; every negative case has a positive
control (the same text's harmless parts are kept).
"""

from __future__ import annotations

import json
import logging
from collections import namedtuple
from io import StringIO
from pathlib import Path

import pytest
import structlog

from memoryd.log import MaskFilter, configure_logging
from memoryd.masking import mask_tree, mask_url
from memoryd.models.llm import LLMError, LLMUnavailable, OpenAICompatLLM, split_credentials
from memoryd.store.failures import describe


@pytest.mark.parametrize(("text", "shown"), [
    # user:password — the user stays, the password goes
    ("http://user:TOKEN@127.0.0.1:9/v1", "http://user:***@127.0.0.1:9/v1"),
    ("postgresql+psycopg://memoryd:s3cr%40t@db.local:5432/mem",
     "postgresql+psycopg://memoryd:***@db.local:5432/mem"),
    # an @ left unescaped in the password: the userinfo runs to the last @ of the authority
    ("http://u:p@ss@host/v1", "http://u:***@host/v1"),
    # SQLAlchemy takes a / in the password unescaped; so does the mask, for a database URL
    ("postgresql://u:pa/ss@h/db", "postgresql://u:***@h/db"),
    ("http://:KEY@host", "http://:***@host"),
    # a web URL's bare user name is a token; a database's is a role name
    ("https://ghp_TOKEN@git.example/x", "https://***@git.example/x"),
    ("postgresql://memoryd@localhost/mem", "postgresql://memoryd@localhost/mem"),
    # secret query parameters, libpq's password= among them
    ("postgresql:///mem?host=/run/pg&password=PW", "postgresql:///mem?host=/run/pg&password=***"),
    ("http://h/v1?api_key=K&model=m#f", "http://h/v1?api_key=***&model=m#f"),
    ("http://h/v1?Access_Token=K;x=1", "http://h/v1?Access_Token=***;x=1"),
    ("http://h/v1?sig=S&q=1", "http://h/v1?sig=***&q=1"),
    # nothing secret: unchanged
    ("http://h:8080/x?e=a@b", "http://h:8080/x?e=a@b"),
    ("sqlite:////tmp/data/memoryd.db", "sqlite:////tmp/data/memoryd.db"),
    ("no URL at all: user:pass@host", "no URL at all: user:pass@host"),
])
def test_mask_url(text: str, shown: str) -> None:
    assert mask_url(text) == shown


def test_every_url_inside_a_message_is_masked_and_the_rest_kept() -> None:
    message = ('LLMUnavailable: the LLM server at http://u:T1@127.0.0.1:5/v1 does not answer; '
               'store "postgresql://m:T2@db/mem?password=T3", mail me at a@b.example')
    assert mask_url(message) == (
        'LLMUnavailable: the LLM server at http://u:***@127.0.0.1:5/v1 does not answer; '
        'store "postgresql://m:***@db/mem?password=***", mail me at a@b.example')


def test_mask_tree_masks_strings_at_any_depth_and_keeps_other_values() -> None:
    pair = namedtuple("pair", "url n")
    tree = {"a": ["http://u:T@h", 3, None, True], "b": {"c": ("https://T@h",), "d": 1.5},
            "e": pair("http://x:T@h", 2), "f": Path("/tmp/x")}
    assert mask_tree(tree) == {"a": ["http://u:***@h", 3, None, True],
                               "b": {"c": ("https://***@h",), "d": 1.5},
                               "e": pair("http://x:***@h", 2), "f": Path("/tmp/x")}


def test_an_error_description_is_masked_before_it_is_cut() -> None:
    # The URL sits past the 300-character cut: masked first, the cut can never leave "u:TOK…".
    exc = LLMError("x" * 270 + " http://u:TOKEN-TOKEN-TOKEN@127.0.0.1:5/v1 failed")
    shown = describe(exc)
    assert "TOKEN" not in shown
    assert shown.startswith("LLMError: xxx")
    plain = describe(LLMError("POST /v1/completions failed: upstream http://u:TOKEN@10.0.0.1/v1 said 500"))
    assert plain == "LLMError: POST /v1/completions failed: upstream http://u:***@10.0.0.1/v1 said 500"


def test_every_log_event_is_masked_by_the_daemons_own_logging_set_up(
        capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    try:
        log = structlog.get_logger("memoryd.test.masking")
        try:
            raise RuntimeError("connect to http://u:TOKEN@h/v1 failed")
        except RuntimeError:
            log.exception("llm.failed", url="http://u:TOKEN@h/v1", nested={"x": ["https://TOKEN@h"]})
        log.info("llm.plain", path="/tmp/x", n=3)
    finally:
        structlog.reset_defaults()
    err = capsys.readouterr().err
    assert "TOKEN" not in err
    failed, plain = (json.loads(line) for line in err.splitlines())
    assert failed["url"] == "http://u:***@h/v1" and failed["nested"] == {"x": ["https://***@h"]}
    assert "connect to http://u:***@h/v1 failed" in failed["exception"]
    # Positive control: what is not a credential passes untouched.
    assert plain["event"] == "llm.plain" and plain["path"] == "/tmp/x" and plain["n"] == 3


def test_the_stdlib_filter_masks_a_records_message() -> None:
    out = StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(MaskFilter())
    logger = logging.getLogger("memoryd.test.masking")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("retrying %s", "http://u:TOKEN@h/v1")
    finally:
        logger.removeHandler(handler)
    assert out.getvalue() == "retrying http://u:***@h/v1\n"


def test_openai_compat_llm_sends_its_credentials_as_basic_auth_and_shows_them_masked() -> None:
    bare, auth = split_credentials("http://user:to%3Aken@127.0.0.1:8080/base")
    assert bare == "http://127.0.0.1:8080/base"
    assert auth == "Basic dXNlcjp0bzprZW4="  # base64 of "user:to:ken"
    assert split_credentials("http://127.0.0.1:8080") == ("http://127.0.0.1:8080", None)
    llm = OpenAICompatLLM("http://user:TOKEN@127.0.0.1:1/")
    assert llm.base_url == "http://127.0.0.1:1"
    assert llm.name == "default@http://user:***@127.0.0.1:1"
    with pytest.raises(LLMUnavailable) as refused:
        llm.load()  # nothing listens on port 1
    assert "TOKEN" not in str(refused.value)
    assert "http://user:***@127.0.0.1:1" in str(refused.value)


def test_every_place_that_shows_a_store_url_masks_it_alike() -> None:
    from sqlalchemy import create_engine

    from memoryd.daemon.status import db_info
    from memoryd.osservice.units import hide_password
    from memoryd.store.copy.guard import shown
    from memoryd.store.postgres.notify import JobListener

    url = "postgresql+psycopg://memoryd:PW1@db.local:5432/mem?sslmode=require&password=PW2"
    expected = "postgresql+psycopg://memoryd:***@db.local:5432/mem?password=***&sslmode=require"
    engine = create_engine(url)  # never connects here
    try:
        # SQLAlchemy renders the query's keys sorted; the text as given keeps their order.
        assert db_info(engine)["url"] == expected
        assert JobListener(engine, lambda: None).shown == expected
    finally:
        engine.dispose()
    as_given = "postgresql+psycopg://memoryd:***@db.local:5432/mem?sslmode=require&password=***"
    assert hide_password(url) == as_given
    assert shown(url) == as_given
    # An URL SQLAlchemy cannot parse is masked too (copy_guard showed it as given).
    assert shown("postgresql://u:PW3@[bad") == "postgresql://u:***@[bad"
