"""redis-py, imported before any engine module needs it, without the OpenTelemetry metrics SDK it imports for
one type annotation (:mod:`jqcore.imports`): every process that stands on the engine imports it here first."""

from jqcore.imports import REDIS_UNUSED, preload

preload("redis", *REDIS_UNUSED)
