"""Credentials in URLs, masked wherever memoryd shows or logs text.

memoryd is configured with URLs that can carry a secret: the store
(``postgresql://user:password@host/db``, or a libpq ``?password=`` in its
query) and an OpenAI-compatible LLM (``http://user:token@host``, or a
``?api_key=`` style parameter). PROTOCOL.md 1.2 "Secrets": no answer, log line
or process command line carries such a secret. Everything memoryd shows
(daemon.status, errors stored in ``jobs.last_error``, printed store URLs) or
logs (the structlog processor in memoryd/log.py) goes through
:func:`mask_url`, so there is one rule, in one place:

* ``scheme://user:password@host`` keeps the user name and shows the password
  as ``***`` (as SQLAlchemy's ``hide_password`` does);
* ``http(s)://token@host`` (no password: the name is the token) shows
  ``***@host``; a database URL's bare user name is a role, not a secret, and
  is kept;
* a query parameter whose name says secret (``password``, ``token``,
  ``api_key``, ``secret``, ``auth``, ``sig``…) keeps its name and shows
  ``***`` for its value.

It masks every URL found inside a longer text (an error message, a log line),
not only a text that is a URL. It errs towards masking too much: a parameter
named ``authSource`` loses its value in what memoryd shows, never a password.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: What a masked secret reads as (SQLAlchemy's choice, kept for the store URL's sake).
MASK = "***"

#: Schemes whose bare user name (``https://TOKEN@host``) is taken for a token.
_TOKEN_USER_SCHEMES = frozenset({"http", "https", "ws", "wss"})
#: Words in a query parameter's name that make its value a secret.
_SECRET_WORDS = ("pass", "pwd", "token", "secret", "key", "auth", "credential", "signature", "session")
#: A URL from its scheme to where a URL cannot go on (whitespace, quotes, angle brackets).
_URL = re.compile(r"""(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://(?P<rest>[^\s"'<>`\\]*)""")
#: The authority's user information: everything up to the last ``@`` before the path.
_USERINFO = re.compile(r"^(?P<userinfo>[^/?#]*)@")
#: SQLAlchemy's laxer form, ``user:password@`` where the password may hold ``/?#`` unescaped
#: (``make_url`` accepts it); tried for a URL that is not a web one.
_LAX_USERINFO = re.compile(r"^(?P<userinfo>[^:/?#@]*:[^@]*)@")
#: One query parameter (``?`` or ``&`` or ``;`` before it).
_PARAM = re.compile(r"(?P<sep>[?&;])(?P<name>[^=&;#?]+)=(?P<value>[^&;#]*)")


def _secret_name(name: str) -> bool:
    lowered = name.lower()
    return lowered == "sig" or any(word in lowered for word in _SECRET_WORDS)


def _mask_one(match: re.Match[str]) -> str:
    scheme, rest = match.group("scheme"), match.group("rest")
    web = scheme.lower() in _TOKEN_USER_SCHEMES
    userinfo = _USERINFO.match(rest) or (None if web else _LAX_USERINFO.match(rest))
    if userinfo is not None:
        info = userinfo.group("userinfo")
        user, colon, _password = info.partition(":")
        if colon:
            shown = f"{user}:{MASK}"
        elif web and info:
            shown = MASK
        else:
            shown = info
        rest = f"{shown}@{rest[userinfo.end():]}"
    if "=" in rest:
        rest = _PARAM.sub(
            lambda p: f"{p.group('sep')}{p.group('name')}={MASK}" if _secret_name(p.group("name"))
            and p.group("value") else p.group(0),
            rest)
    return f"{scheme}://{rest}"


def mask_url(text: str) -> str:
    """``text`` with the credentials of every URL in it shown as ``***`` (see the module doc).

    ``text`` may be one URL or any message that holds URLs; text without a URL
    comes back unchanged (the same object).
    """
    if "://" not in text:
        return text
    return _URL.sub(_mask_one, text)


def mask_tree(value: Any) -> Any:
    """``value`` with :func:`mask_url` applied to every string in it (dicts, lists, tuples).

    Other values come back as they are, except one whose ``repr`` holds a URL
    with a credential: that comes back as its masked ``repr`` (it would be
    rendered by its ``repr`` in a log line anyway).
    """
    if isinstance(value, str):
        return mask_url(value)
    if isinstance(value, Mapping):
        return {k: mask_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [mask_tree(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if value is None or isinstance(value, bool | int | float):
        return value
    try:
        shown = repr(value)
    except Exception:  # a broken repr is the renderer's problem, not a secret
        return value
    masked = mask_url(shown)
    return value if masked == shown else masked
