"""The kernel: what every jobq process and tool agrees on — the envelope and its rules, errors, clocks,
lifecycle events, non-queue key names, backoff, rate buckets, graph specs, cron maths, routing, the topic
declaration, settings, logging, metric names, test signals, the extras table and small asyncio helpers.

No network client (no redis, Kafka, Consul, aiohttp or DuckDB import, direct or indirect) and no other
jobq package: the engine (:mod:`jqengine`) and the runtime (:mod:`jqruntime`) stand on it (import-linter
contracts in ``pyproject.toml``). One module here is the exception, for this release only: ``client``,
a deprecated re-export of :mod:`jqruntime.client` (the app-side client's old home).
"""
