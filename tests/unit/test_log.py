"""Logging writes to the stderr of the moment, so a stream closed after set-up never breaks a caller; in
the JSON format every record, whoever logged it, is one JSON line."""

from __future__ import annotations

import io
import logging
import sys
import time

import orjson
import pytest
from confluent_kafka import Producer

from jqcore.log import configure, get_logger, kafka_logging
from jqcore.settings.observe import LogSettings
from jqstack.procs import free_port


def test_log_lines_follow_stderr_after_the_setup_stream_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure()
    first.close()  # what a test runner does with its capture stream
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    get_logger("t").warning("still written", n=1)
    assert "still written" in second.getvalue()


def test_json_format_renders_every_record_as_one_json_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """structlog's events, standard-library records (aiohttp's, asyncio's...: any logger) and librdkafka's
    own log lines (a real client refused by a closed loopback port) all come out as JSON objects."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    configure(LogSettings(format="json"))
    try:
        get_logger("t").info("from structlog", n=1)
        logging.getLogger("aiohttp.access").info('%s "%s" %d', "127.0.0.1", "GET /x", 200)
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("consul").exception("with a traceback")
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", **kafka_logging()})
        deadline = time.monotonic() + 30
        while '"librdkafka"' not in out.getvalue():
            assert time.monotonic() < deadline, "librdkafka logged nothing about the refused connection"
            producer.poll(0.1)  # librdkafka's log lines are served by poll
        del producer
    finally:
        configure(LogSettings())
    lines = [orjson.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    by = {line["component"]: line for line in lines}
    assert by["t"]["event"] == "from structlog"
    assert by["aiohttp.access"]["event"] == '127.0.0.1 "GET /x" 200'
    assert by["aiohttp.access"]["level"] == "info"
    assert "ValueError: boom" in by["consul"]["exception"]
    assert by["librdkafka"]["level"] in {"error", "warning"}
    assert all("timestamp" in line for line in lines)
