"""Imports kept out of a process that never uses them: a library that imports an optional one at import time
only to offer a feature jobq does not use is imported with that one hidden.

Every service process paid for two such imports at start (~0.15 s of CPU of its ~0.8 s; the fault suite
starts ~200 service processes): structlog imports rich (and pygments through ``rich.traceback``) to pretty-
print exceptions, which jobq's log set-up formats itself (``format_exc_info`` comes before every renderer);
redis-py 8 imports OpenTelemetry's metrics SDK and API for type annotations (``redis.observability``: its
metrics collector, which jobq never turns on, then says OpenTelemetry is not installed).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["REDIS_UNUSED", "STRUCTLOG_UNUSED", "hidden", "preload"]

STRUCTLOG_UNUSED = ("rich", "rich.traceback", "rich.pretty")
"""What structlog imports to pretty-print exceptions and locals (``structlog.dev``, ``.tracebacks``)."""
REDIS_UNUSED = ("opentelemetry.sdk.metrics", "opentelemetry.metrics")
"""What redis-py's ``observability`` imports for type annotations (``providers``: the SDK's; ``metrics``:
the API's, for its metrics collector, which jobq never makes)."""


@contextmanager
def hidden(*names: str) -> Iterator[None]:
    """Within the block, importing any of ``names`` that is not imported yet fails (ImportError), as if it
    were not installed: the library imported in the block takes its fallback. Afterwards they import
    normally again (a module already imported is left alone)."""
    hide = [name for name in names if name not in sys.modules]
    for name in hide:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hide:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def preload(module: str, *unused: str) -> None:
    """Import ``module`` (if nobody did yet) with ``unused`` hidden: the first import decides."""
    with hidden(*unused):
        importlib.import_module(module)
