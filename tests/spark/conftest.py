"""Spark tests: the run's one local Spark session is the ``spark`` fixture of ``tests/conftest.py`` (shared
with the history benchmark's smoke test). pyspark is part of the locked dependencies (the ``spark`` extra);
without it these tests fail at import, on purpose, rather than skip quietly."""

from __future__ import annotations

import pyspark  # noqa: F401  (fail at import without the spark extra)
