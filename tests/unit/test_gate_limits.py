"""The gateway's own limits as pure logic: a batch counted before its jobs are parsed, the body budget,
each token's share of the body budget and of the long-poll slots; and a Redis outage's answer, which names
no internals."""

from __future__ import annotations

import contextlib
from typing import Any, cast

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jqcore.errors import BackendUnavailable
from jqruntime.http import HttpError
from kafkagate.enqueue import parse_jobs
from kafkagate.limits import BodyBudget
from kafkagate.longpoll import LongPolls
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


def test_one_token_holds_at_most_its_share_of_the_body_budget() -> None:
    """Review M7: bodies of one token stop at its share; another token's still fit; the total still holds."""
    budget = BodyBudget(100, per_holder=50)
    held = budget.take(40, "greedy")
    with pytest.raises(HttpError) as busy:
        budget.take(20, "greedy")
    assert (busy.value.status, busy.value.code) == (429, "gateway_busy")
    assert "for one token" in busy.value.details["limit"]
    assert budget.take(50, "modest") == 50, "another token gets in"
    with pytest.raises(HttpError) as full:
        budget.take(20, "third")
    assert "for one token" not in full.value.details["limit"], "the process's own budget is full"
    with pytest.raises(HttpError) as never:
        budget.take(51, "fresh")
    assert (never.value.status, never.value.code) == (413, "body_too_large"), (
        "over a token's share: never fits"
    )
    budget.give(held, "greedy")
    budget.give(50, "modest")
    assert (budget.used, budget.held_by("greedy"), budget.held_by("modest")) == (0, 0, 0)
    assert budget.take(50, "greedy") == 50


def test_one_token_parks_at_most_its_share_of_the_long_polls() -> None:
    """Review M7: 1000 parked polls of one token took the process from every other team."""
    polls = LongPolls(cast(Any, None), cap=4, per_token=2)
    with contextlib.ExitStack() as stack:
        stack.enter_context(polls.slot("greedy"))
        stack.enter_context(polls.slot("greedy"))
        with pytest.raises(HttpError) as busy, polls.slot("greedy"):
            pass
        assert (busy.value.status, busy.value.code) == (429, "gateway_busy")
        assert "for one token" in busy.value.details["limit"]
        stack.enter_context(polls.slot("modest"))
        stack.enter_context(polls.slot("modest"))
        assert (polls.parked, polls.parked_by("greedy"), polls.parked_by("modest")) == (4, 2, 2)
        with pytest.raises(HttpError) as full, polls.slot("third"):
            pass
        assert "JOBQ_GATE_LONG_POLLS_MAX" in full.value.details["limit"]
    assert (polls.parked, polls.parked_by("greedy")) == (0, 0)
    with polls.slot("greedy"):
        assert polls.parked_by("greedy") == 1


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
