"""What a failed pass attempt means, and the words it leaves behind.

Three kinds of failure, decided here once for every pass:

* ``unavailable``: the pass cannot run now (a model is off, loading or marked
  broken). The jobs go back uncounted and the pass rests.
* ``transient``: the store was busy or locked past its timeout, a
  serialization conflict or a dropped connection on PostgreSQL, or the disk
  is full. Not the job's fault either: the jobs go back uncounted and the
  pass rests; the next cycle tries again.
* ``permanent``: anything else. The job that raised it is charged an attempt,
  and after ``job_max_attempts`` it is ``dead`` and visible in status. A
  fault that no retry can fix ("no such module: vec0", a vector of the
  wrong dimension) therefore ends instead of looping every two seconds.

Error strings are stored in ``jobs.last_error``, shown in status and logged,
so they must never carry memory text, nor a credential from a configured URL
(an LLM server's ``http://user:token@host``). :func:`describe` builds them
from the exception's class and a message whose URLs are masked
(memoryd/masking.py) and whose quoted literals are cut out; the engine is
created with ``hide_parameters=True`` so SQLAlchemy's messages carry no bound
values either.
"""

from __future__ import annotations

import re
from typing import Literal

from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError

from memoryd.errors import PassUnavailable
from memoryd.masking import mask_url

Kind = Literal["unavailable", "transient", "permanent"]

#: SQLite primary result codes that say "try again": BUSY, LOCKED, FULL.
_SQLITE_TRANSIENT = {5, 6, 13}
#: PostgreSQL SQLSTATEs that say "try again": serialization failure, deadlock,
#: lock not available, admin/crash shutdown, cannot connect now.
_PG_TRANSIENT = {"40001", "40P01", "55P03", "57P01", "57P02", "57P03"}
_TRANSIENT_WORDS = ("database is locked", "database table is locked", "database or disk is full",
                    "database is busy")
#: Longest message kept from an exception (the class name is always kept).
MAX_MESSAGE = 300
_QUOTED = re.compile(r"""(['"])(?:(?!\1).){12,}?\1""", re.DOTALL)


def kind_of(exc: BaseException) -> Kind:
    """How the runner treats ``exc`` raised by a pass (see the module docstring)."""
    if isinstance(exc, PassUnavailable):
        return "unavailable"
    if isinstance(exc, DisconnectionError):
        return "transient"
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return "transient"
        orig = exc.orig
        code = getattr(orig, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF in _SQLITE_TRANSIENT:
            return "transient"
        state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
        if isinstance(state, str) and (state in _PG_TRANSIENT or state.startswith("08")):
            return "transient"
        if isinstance(exc, OperationalError) and any(w in str(orig).lower() for w in _TRANSIENT_WORDS):
            return "transient"
    return "permanent"


def error_class(exc: BaseException) -> str:
    """The short class shown in status: the driver's exception for store errors."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        return f"{type(exc).__name__}({type(exc.orig).__name__})"
    return type(exc).__name__


def describe(exc: BaseException) -> str:
    """A content-free one-line description of ``exc`` for ``last_error``, status and logs.

    For store errors only the driver's own message is kept (never the SQL's
    parameters); for any message, credentials in URLs are masked (before the
    message is cut, so a cut never leaves half a URL unmasked), and quoted
    literals of 12 characters or more (where an answer or a memory's words
    would be) are replaced by ``'…'``.
    """
    message = str(exc.orig) if isinstance(exc, DBAPIError) and exc.orig is not None else str(exc)
    message = mask_url(message)
    message = _QUOTED.sub(lambda m: f"{m.group(1)}…{m.group(1)}", message)
    message = " ".join(message.split())
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE - 1] + "…"
    return f"{error_class(exc)}: {message}" if message else error_class(exc)
