"""The gateway's own limits as pure logic: a batch counted before its jobs are parsed, the body budget;
and a Redis outage's answer, which names no internals."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jqcore.errors import BackendUnavailable
from jqruntime.http import HttpError
from kafkagate.enqueue import parse_jobs
from kafkagate.limits import BodyBudget
from kafkagate.requests import REDIS_UNREACHABLE, engine_call


def test_an_ndjson_batch_is_counted_before_any_line_is_parsed() -> None:
    body = b"not json\n" * 11  # had the lines been parsed first, this would be a 400 body_not_json
    with pytest.raises(HttpError) as caught:
        parse_jobs("q", body, "application/x-ndjson", max_batch=10, idempotency=None, now=0)
    assert (caught.value.status, caught.value.code) == (413, "batch_too_large")


def test_a_json_batch_is_counted_before_any_job_is_built() -> None:
    body = b'{"jobs": [' + b",".join([b'"not a job"'] * 11) + b"]}"
    with pytest.raises(HttpError) as caught:
        parse_jobs("q", body, "application/json", max_batch=10, idempotency=None, now=0)
    assert (caught.value.status, caught.value.code) == (413, "batch_too_large")


def test_the_body_budget_refuses_busy_with_retry_after_and_never_fitting_with_413() -> None:
    budget = BodyBudget(100)
    held = budget.take(60)
    with pytest.raises(HttpError) as busy:
        budget.take(50)
    assert (busy.value.status, busy.value.code) == (429, "gateway_busy")
    assert busy.value.headers == {"Retry-After": "1"}
    with pytest.raises(HttpError) as never:
        budget.take(101)
    assert (never.value.status, never.value.code) == (413, "body_too_large")
    assert never.value.headers == {}
    budget.give(held)
    assert budget.take(100) == 100


@pytest.mark.parametrize(
    "error",
    [
        RedisConnectionError("Error 111 connecting to redis-internal.corp:6379. Connection refused."),
        RedisTimeoutError("Timeout reading from redis-internal.corp:6379"),
        OSError("[Errno 113] No route to host: 10.1.2.3"),
    ],
)
async def test_a_redis_outage_answers_a_fixed_message(error: Exception) -> None:
    """What redis-py said (addresses, the server's words) is logged, never answered (security review
    L4): the client gets the code, Retry-After and a fixed message."""

    async def fails() -> None:
        raise error

    with pytest.raises(BackendUnavailable) as caught:
        await engine_call(fails())
    assert caught.value.code == "backend_unavailable"
    assert caught.value.retriable
    assert caught.value.message == REDIS_UNREACHABLE
    assert str(error) not in caught.value.message
