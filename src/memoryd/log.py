"""structlog set-up: JSON lines in the service, a readable console on a terminal.

Every event passes :func:`mask_credentials` just before it is rendered, so a
password or token in a URL never reaches a log line whichever code logged it
(PROTOCOL.md 1.2 "Secrets"): the last line of defence behind the masking at
the source (memoryd/masking.py). Records from the standard library's logging
(httpx, urllib3, alembic…) pass the same mask through :class:`MaskFilter`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from memoryd.masking import mask_tree, mask_url


def mask_credentials(_logger: Any, _method: str,
                     event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: every value of the event, with credentials in URLs masked."""
    return {key: mask_tree(value) for key, value in event_dict.items()}


class MaskFilter(logging.Filter):
    """A stdlib logging filter that masks credentials in URLs in a record's message."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_url(message)
        if masked is not message:
            record.msg, record.args = masked, None
        return True


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    """Route structlog (and stdlib logging) to stderr in the chosen format."""
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    numeric = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(message)s")
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, MaskFilter) for f in handler.filters):
            handler.addFilter(MaskFilter())
    for noisy in ("apscheduler", "sentence_transformers", "httpx", "urllib3", "alembic"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            # After format_exc_info, so a traceback's text is masked too.
            mask_credentials,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
