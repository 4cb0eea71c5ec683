"""The one error hierarchy: stable codes, retriable flags, envelope field errors, handler control flow."""

from __future__ import annotations

import dataclasses

import pytest

from jqcore import errors
from jqcore.errors import (
    BackendUnavailable,
    Cancel,
    ConfigError,
    EnvelopeError,
    FieldError,
    HandlerControl,
    JobqError,
    Retry,
    Snooze,
)


@pytest.mark.parametrize(
    ("cls", "code", "retriable"),
    [
        (JobqError, "jobq_error", False),
        (ConfigError, "config_invalid", False),
        (BackendUnavailable, "backend_unavailable", True),
    ],
)
def test_codes_and_retriable_flags(cls: type[JobqError], code: str, retriable: bool) -> None:
    err = cls("boom")
    assert (err.code, err.retriable, err.message, str(err)) == (code, retriable, "boom", "boom")
    assert isinstance(err, JobqError)
    assert cls.__doc__
    assert cls().message == cls.__doc__, "the docstring is the default message"


def test_code_and_retriable_can_be_set_per_instance_only() -> None:
    err = BackendUnavailable("full", code="redis_oom", retriable=False)
    assert (err.code, err.retriable) == ("redis_oom", False)
    assert (BackendUnavailable.code, BackendUnavailable.retriable) == ("backend_unavailable", True)
    assert BackendUnavailable().retriable


def test_envelope_error_names_each_field() -> None:
    err = EnvelopeError([FieldError("id", "required"), FieldError("queue", "bad")])
    assert (err.code, err.retriable) == ("envelope_invalid", False)
    assert isinstance(err, JobqError)
    assert err.message == "id: required; queue: bad"
    assert [f.as_dict() for f in err.fields] == [
        {"field": "id", "problem": "required"},
        {"field": "queue", "problem": "bad"},
    ]
    single = EnvelopeError(FieldError("$", "not JSON"), code="envelope_not_json")
    assert (single.code, single.fields, single.message) == (
        "envelope_not_json",
        (FieldError("$", "not JSON"),),
        "$: not JSON",
    )
    assert EnvelopeError([]).message == "invalid envelope"
    with pytest.raises(dataclasses.FrozenInstanceError):
        single.fields[0].field = "x"  # type: ignore[misc]


def test_handler_control_is_not_an_error() -> None:
    for control in (Retry(), Cancel(), Snooze(1)):
        assert isinstance(control, HandlerControl)
        assert not isinstance(control, JobqError)
    retry = Retry(5, reason="rate limited")
    assert (retry.delay_s, retry.reason, str(retry)) == (5, "rate limited", "rate limited")
    assert (Retry().delay_s, Retry().reason) == (None, "retry requested")
    assert Cancel().reason == "canceled by handler"
    assert Cancel("gone").reason == "gone"
    snooze = Snooze(2.5)
    assert (snooze.delay_s, str(snooze)) == (2.5, "snoozed for 2.5s")


def test_public_surface() -> None:
    assert sorted(errors.__all__) == errors.__all__
    for name in errors.__all__:
        assert hasattr(errors, name)
