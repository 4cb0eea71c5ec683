"""Errors carry their meaning: the gateway's status for a jobq error comes from the error's own
``http_status`` and ``retriable`` attributes, and a 503 (with Retry-After) only ever goes to an error that
retrying can fix."""

from __future__ import annotations

import pytest

from jqcore.errors import BackendUnavailable, ConfigError, EnvelopeError, FieldError, JobqError
from jqcore.routing import QueueUnrouted
from jqengine.codes import (
    FenceRejected,
    FilterInvalid,
    JobNotFound,
    QueueConfigInvalid,
    RedisMemoryFull,
    StaleLease,
)
from jqruntime.http import HttpError, error_body, error_status
from jqruntime.kafka import PartitionInvalid, ProduceFailed, RecordTooLarge, TopicMissing

RETRY = {"Retry-After": "1"}


@pytest.mark.parametrize(
    ("exc", "status", "headers"),
    [
        (JobqError("x"), 500, {}),
        (ConfigError("x"), 500, {}),
        (EnvelopeError(FieldError("kind", "required")), 400, {}),
        (BackendUnavailable("x"), 503, RETRY),
        (ProduceFailed("x"), 503, RETRY),
        (RedisMemoryFull("x"), 503, RETRY),
        (TopicMissing("x"), 503, RETRY),
        (RecordTooLarge("x"), 413, {}),
        (PartitionInvalid("x"), 400, {}),
        (QueueUnrouted("x"), 404, {}),
        (JobNotFound("x"), 404, {}),
        (StaleLease("x"), 409, {}),
        (FenceRejected("q", 1, 2), 409, {}),
        (QueueConfigInvalid("x"), 400, {}),
        (FilterInvalid("x"), 400, {}),
        (HttpError(415, "content_type_unsupported", "x"), 415, {}),
        (BackendUnavailable("x", retriable=False), 500, {}),  # not retriable: never told to retry
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else None,
)
def test_status_comes_from_the_error(exc: JobqError, status: int, headers: dict[str, str]) -> None:
    assert error_status(exc) == (status, headers)


def test_a_503_is_only_for_retriable_errors() -> None:
    class Odd(JobqError):
        """declares 503 but retrying cannot help"""

        http_status = 503

    class Flaky(JobqError):
        """retriable, no status of its own"""

        retriable = True

    assert error_status(Odd()) == (500, {})
    assert error_status(Flaky()) == (503, RETRY)
    assert error_status(TopicMissing()) == (503, RETRY), "a missing topic succeeds unchanged once it exists"
    assert TopicMissing.retriable


def test_error_body_carries_fields_and_details() -> None:
    exc = HttpError(413, "job_too_large", "big", [FieldError("jobs[1]", "2 MB")], details={"limit_bytes": 9})
    assert error_body(exc) == {
        "error": {
            "code": "job_too_large",
            "message": "big",
            "fields": [{"field": "jobs[1]", "problem": "2 MB"}],
            "limit_bytes": 9,
        }
    }
