"""Structured logging set-up (structlog over the standard library), called once by each main.

JSON lines in production (``JOBQ_LOG_FORMAT=json``), readable console lines otherwise. **Every** line a
process writes goes through the same renderer: structlog's own events, and the standard library's records
(aiohttp's access and server logs, asyncio, the Consul client, py4j/pyspark, librdkafka's log lines —
handed to the ``librdkafka`` logger by :func:`kafka_logging` in each Kafka client's configuration), which
the root handler formats with structlog's ``ProcessorFormatter``. Secrets never reach a log line:
settings hold them as ``SecretStr`` and loggers are given endpoints, never URLs with passwords.

Both kinds of lines carry what is bound in structlog's context variables (``structlog.contextvars``): a
worker binds each running job's ``job_id``, ``queue``, ``kind``, ``attempt`` and ``trace_id`` around its
handler (``worker/execute.py``), so a handler's ``logging.getLogger(__name__).info(...)`` has them as well.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

from jqcore.imports import STRUCTLOG_UNUSED, hidden
from jqcore.settings.observe import LogSettings

with hidden(*STRUCTLOG_UNUSED):  # rich's pretty exceptions: format_exc_info formats them (configure)
    import structlog

__all__ = ["KAFKA_LOGGER", "STDERR", "configure", "get_logger", "kafka_logging"]

KAFKA_LOGGER = logging.getLogger("librdkafka")
"""Where librdkafka's own log lines go (instead of its plain-text stderr)."""


def kafka_logging() -> dict[str, Any]:
    """The librdkafka setting that routes a Kafka client's log lines through :data:`KAFKA_LOGGER`
    (merged into every producer's, consumer's and admin client's configuration)."""
    return {"logger": KAFKA_LOGGER}


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


STDERR = _CurrentStderr()
"""The stderr of the moment of each write, as a file for loggers."""


class _JobqHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The root handler :func:`configure` installs (replaced, never doubled, by a second call)."""


def configure(settings: LogSettings | None = None) -> None:
    """Route structlog and stdlib logging to stderr in the configured format and level."""
    settings = settings or LogSettings()
    level = logging.getLevelName(settings.level.upper())
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if settings.format == "json"
        else structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    )
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            stamp,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=STDERR),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    # the standard library's records: the same renderer, with the logger's name as ``component``
    handler = _JobqHandler(STDERR)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.contextvars.merge_contextvars,  # a running job's fields (worker.execute) too
                structlog.stdlib.add_log_level,
                _component,
                stamp,
                structlog.stdlib.PositionalArgumentsFormatter(),
                structlog.stdlib.ExtraAdder(),
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _JobqHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)  # warnings.warn (pyspark's, aiohttp's) as records too


def _component(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    record = event.get("_record")
    if record is not None:
        event.setdefault("component", record.name)
    return event


def get_logger(name: str) -> Any:
    """A structlog logger bound to a component name."""
    return structlog.get_logger(component=name)
