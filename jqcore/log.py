"""Structured logging set-up (structlog over the standard library), called once by each main.

JSON lines in production (``JOBQ_LOG_FORMAT=json``), readable console lines otherwise. Secrets never
reach a log line: settings hold them as ``SecretStr`` and loggers are given endpoints, never URLs with
passwords.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from jqcore.settings import LogSettings

__all__ = ["configure", "get_logger"]


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the moment of writing, not when logging was set up: a
    stream captured at set-up (by a test runner, a ``CliRunner``) may be closed by the time a later log
    line comes, and writing to it would raise in the caller."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


_STDERR = _CurrentStderr()


def configure(settings: LogSettings | None = None) -> None:
    """Route structlog and stdlib logging to stderr in the configured format and level."""
    settings = settings or LogSettings()
    level = logging.getLevelName(settings.level.upper())
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if settings.format == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=_STDERR),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=level, stream=_STDERR, format="%(levelname)s %(name)s: %(message)s")


def get_logger(name: str) -> Any:
    """A structlog logger bound to a component name."""
    return structlog.get_logger(component=name)
