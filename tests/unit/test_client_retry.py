"""Pure retry logic of the Python client, no server: Retry-After parsing, the full-jitter backoff window
and its Retry-After floor, error bodies that are not the API's JSON."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from tenacity import AsyncRetrying, RetryCallState

from jqruntime.client import ApiRefused, GatewayUnavailable, JobqClient, parse_retry_after

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("0", 0.0),
        ("7", 7.0),
        (" 120 ", 120.0),
        (format_datetime(NOW + timedelta(seconds=30), usegmt=True), 30.0),
        ("Sat, 01 Mar 2025 12:01:00 GMT", 60.0),
        (format_datetime(NOW - timedelta(hours=1), usegmt=True), 0.0),  # a date in the past: no wait
        (None, None),
        ("", None),
        ("-3", None),
        ("1.5", None),
        ("soon", None),
    ],
)
def test_retry_after_is_seconds_or_an_http_date(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header, now=NOW) == seconds


def _state(attempt: int, exc: BaseException | None = None) -> RetryCallState:
    state = RetryCallState(AsyncRetrying(), None, (), {})
    state.attempt_number = attempt
    if exc is not None:
        state.set_exception((type(exc), exc, None))
    return state


def test_backoff_is_full_jitter_within_an_exponential_window_capped() -> None:
    client = JobqClient(["http://127.0.0.1:1"], "t", backoff_s=0.25, backoff_max_s=2.0)
    for attempt, high in [(1, 0.25), (2, 0.5), (3, 1.0), (4, 2.0), (5, 2.0), (9, 2.0)]:
        waits = [client.wait_s(_state(attempt, GatewayUnavailable("503"))) for _ in range(400)]
        assert all(0.0 <= w <= high for w in waits), (attempt, min(waits), max(waits))
        # full jitter spreads over the whole window (400 draws all in one half: chance 2**-399)
        assert min(waits) < high / 2 < max(waits), (attempt, min(waits), max(waits))


def test_retry_after_is_the_minimum_wait() -> None:
    client = JobqClient(["http://127.0.0.1:1"], "t", backoff_s=0.25, backoff_max_s=2.0)
    told = GatewayUnavailable("503", status=503, retry_after_s=3.0)
    assert all(client.wait_s(_state(4, told)) == 3.0 for _ in range(100)), "floor above the window"
    short = GatewayUnavailable("503", status=503, retry_after_s=0.1)
    waits = [client.wait_s(_state(4, short)) for _ in range(400)]
    assert all(0.1 <= w <= 2.0 for w in waits)


def test_constructor_refuses_unbounded_or_empty_settings() -> None:
    with pytest.raises(ValueError, match="at least one gateway"):
        JobqClient([], "t")
    for bad in ({"attempts": 0}, {"deadline_s": 0}, {"timeout_s": -1}, {"connect_timeout_s": 0}):
        with pytest.raises(ValueError, match="attempts"):
            JobqClient(["http://127.0.0.1:1"], "t", **bad)


def test_an_error_body_that_is_not_json_keeps_status_and_snippet() -> None:
    exc = ApiRefused(400, "<html><body>400 Bad Request (proxy)</body></html>")
    assert (exc.status, exc.code) == (400, "http_400")
    assert "400 Bad Request (proxy)" in exc.message
    assert exc.snippet.startswith("<html>")
    api = ApiRefused(409, {"error": {"code": "lease_stale", "message": "stale", "fields": []}})
    assert (api.code, api.message, api.snippet) == ("lease_stale", "stale", "")
    odd = ApiRefused(418, {"error": "teapot"})
    assert (odd.code, odd.message) == ("http_418", "HTTP 418")
