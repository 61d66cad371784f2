"""structlog set-up: JSON lines in the service, a readable console on a terminal."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    """Route structlog (and stdlib logging) to stderr in the chosen format."""
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    numeric = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(message)s")
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
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
