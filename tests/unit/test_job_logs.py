"""A running job's fields in every log line its handler writes, and its failed attempts logged with their
tracebacks (``worker/execute.py``, ``jqcore/log.py``; no servers — ``tests/worker/test_failure_logs.py``
reads a real worker process's output)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

import orjson
import pytest

from jobq import Registry
from jqcore.envelope import new_envelope
from jqcore.errors import Retry
from jqcore.log import configure, get_logger
from jqcore.settings.observe import LogSettings
from jqengine import ClaimedJob
from worker.execute import run_handler

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
_threads = ThreadPoolExecutor(2)


def _executor(mode: str) -> Executor:
    assert mode == "thread", mode
    return _threads


@pytest.fixture(autouse=True)
def _json_logs() -> Iterator[None]:
    configure(LogSettings(format="json"))
    try:
        yield
    finally:
        configure(LogSettings())


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]


def _job(kind: str, attempt: int = 1, **fields: Any) -> ClaimedJob:
    return ClaimedJob(new_envelope("orders", kind, None, at_ms=1, **fields), attempt, "tok", 0)


FIELDS = ("job_id", "queue", "kind", "attempt")


async def test_every_line_a_handler_logs_carries_the_jobs_fields(capsys: pytest.CaptureFixture[str]) -> None:
    """structlog and the standard library, from an async handler and from a thread handler; and none
    once the job is over."""
    registry = Registry()

    @registry.job("order.async")
    async def in_loop() -> None:
        get_logger("myapp").info("structlog line")
        logging.getLogger("myapp").warning("stdlib line")

    @registry.job("order.thread")
    def in_thread() -> None:
        logging.getLogger("myapp.thread").info("thread line")

    first = _job("order.async", trace=TRACE)
    second = _job("order.thread", attempt=3)
    assert (await run_handler(registry, first, _executor)).kind == "success"
    assert (await run_handler(registry, second, _executor)).kind == "success"
    logging.getLogger("myapp").warning("after the jobs")
    by_event = {line["event"]: line for line in _lines(capsys)}
    expected = {"job_id": first.id, "queue": "orders", "kind": "order.async", "attempt": 1}
    for event in ("structlog line", "stdlib line"):
        line = by_event[event]
        assert {k: line[k] for k in FIELDS} == expected, line
        assert line["trace_id"] == "0af7651916cd43dd8448eb211c80319c"  # the job's trace (tracing off)
    thread = by_event["thread line"]
    assert {k: thread[k] for k in FIELDS} == {
        "job_id": second.id,
        "queue": "orders",
        "kind": "order.thread",
        "attempt": 3,
    }
    assert "trace_id" not in thread  # a job without a trace
    assert not set(FIELDS) & set(by_event["after the jobs"])


async def test_a_failed_attempt_is_logged_with_its_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    registry = Registry()

    @registry.job("order.pay", max_attempts=3)
    async def pay() -> None:
        raise ValueError("card declined")

    retried = await run_handler(registry, _job("order.pay", attempt=1), _executor)
    last = await run_handler(registry, _job("order.pay", attempt=3), _executor)
    assert (retried.label, last.label) == ("failed", "failed")
    lines = [line for line in _lines(capsys) if line["event"] == "job attempt failed"]
    assert [(line["level"], line["attempt"], line["final"]) for line in lines] == [
        ("warning", 1, False),  # attempts remain: retried with the kind's backoff
        ("error", 3, True),  # the job's last
    ]
    for line in lines:
        assert (line["queue"], line["kind"], line["error"]) == (
            "orders",
            "order.pay",
            "ValueError: card declined",
        )
        assert line["max_attempts"] == 3
        assert "Traceback (most recent call last)" in line["exception"]
        assert 'in pay\n    raise ValueError("card declined")' in line["exception"]
    assert lines[0]["retry_in_ms"] == retried.delay_ms
    assert "retry_in_ms" not in lines[1]


async def test_timeouts_and_retries_are_failed_attempts_too(capsys: pytest.CaptureFixture[str]) -> None:
    registry = Registry()

    @registry.job("order.slow", timeout=0.05)
    async def slow() -> None:
        await asyncio.sleep(5)

    @registry.job("order.later")
    def later() -> None:
        raise Retry(30, "the bank is closed")

    await run_handler(registry, _job("order.slow"), _executor)
    await run_handler(registry, _job("order.later"), _executor)
    lines = {line["kind"]: line for line in _lines(capsys) if line["event"].startswith("job attempt")}
    slow_line, later_line = lines["order.slow"], lines["order.later"]
    assert (slow_line["event"], slow_line["outcome"], slow_line["level"]) == (
        "job attempt timed out",
        "timeout",
        "warning",  # no max_attempts known here: the queue's default decides
    )
    assert "TimeoutError" in slow_line["exception"]
    assert (later_line["event"], later_line["retry_in_ms"]) == ("job attempt failed (Retry)", 30_000)
    assert "Retry: the bank is closed" in later_line["exception"]


async def test_successful_and_steered_jobs_log_no_failure(capsys: pytest.CaptureFixture[str]) -> None:
    from jqcore.errors import Cancel, Snooze

    registry = Registry()

    @registry.job("ok")
    async def ok() -> int:
        return 1

    @registry.job("cancel")
    async def cancel() -> None:
        raise Cancel("not wanted")

    @registry.job("snooze")
    async def snooze() -> None:
        raise Snooze(1)

    for kind in ("ok", "cancel", "snooze"):
        await run_handler(registry, _job(kind), _executor)
    assert [line for line in _lines(capsys) if line.get("level") in {"warning", "error"}] == []
