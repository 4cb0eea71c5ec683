"""The job registry and the pure helpers of handler execution (no servers)."""

from __future__ import annotations

import contextvars
from typing import Any

import pytest
from pydantic import BaseModel

from jqcore.envelope import new_envelope
from jqcore.errors import EnvelopeError
from jqengine import ClaimedJob
from worker.execute import _backoff
from worker.registry import (
    Backoff,
    JobContext,
    JobSpec,
    PayloadInvalid,
    Registry,
    current_job,
    set_current_job,
)


class Resize(BaseModel):
    url: str
    width: int


def _noop(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return args, kwargs


@pytest.mark.parametrize("kind", ["", "has space", ".leading-dot", "mod.<locals>.fn", "x" * 129, "ünï"])
def test_bad_kind_name_is_rejected_clearly(kind: str) -> None:
    jobs = Registry()
    with pytest.raises(EnvelopeError, match=r"^kind: must be 1-128 characters") as info:
        jobs.job(kind)
    assert [f.field for f in info.value.fields] == ["kind"]
    assert jobs.kinds() == []


@pytest.mark.parametrize("kind", ["email.send", "A", "ns:job@v2", "a-b_c.d", "x" * 128])
def test_stable_kind_names_are_accepted(kind: str) -> None:
    jobs = Registry()
    spec = jobs.job(kind)(_noop)
    assert spec.kind == kind
    assert jobs.get(kind) is spec


def test_bad_queue_name_is_rejected() -> None:
    with pytest.raises(EnvelopeError, match=r"^queue: "):
        Registry().job("ok", queue="Upper")


def test_duplicate_kind_raises_and_keeps_the_first_handler() -> None:
    jobs = Registry()
    first = jobs.job("dup")(_noop)
    with pytest.raises(ValueError, match=r"kind 'dup' is already registered to"):
        jobs.job("dup", queue="other")
    assert jobs.get("dup") is first
    assert len(jobs.kinds()) == 1


def test_reapplying_one_decorator_does_not_replace_the_handler() -> None:
    jobs = Registry()
    register = jobs.job("dup")
    first = register(_noop)
    with pytest.raises(ValueError, match="already registered"):
        register(lambda: None)
    assert jobs.get("dup") is first


def test_per_kind_options_are_stored_on_the_spec() -> None:
    jobs = Registry()
    backoff = Backoff(base_s=0.5, factor=3.0, cap_s=60.0, jitter=False)
    spec = jobs.job(
        "report.render",
        queue="reports",
        timeout=30,
        max_attempts=5,
        backoff=backoff,
        delivery="at_most_once",
        concurrency=4,
        mode="process",
        payload=Resize,
    )(_noop)
    expected = ("report.render", _noop, "reports", 30, 5, backoff, "at_most_once", 4, "process", Resize)
    assert spec.backoff is backoff
    assert (
        *(spec.kind, spec.fn, spec.queue, spec.timeout_s, spec.max_attempts, spec.backoff),
        *(spec.delivery, spec.concurrency, spec.mode, spec.payload),
    ) == expected


def test_defaults_and_mode_follows_the_function() -> None:
    jobs = Registry()

    async def coro() -> None:
        return None

    sync = jobs.job("sync")(_noop)
    asy = jobs.job("asy")(coro)
    defaults = (sync.queue, sync.timeout_s, sync.max_attempts, sync.delivery, sync.concurrency, sync.payload)
    assert defaults == ("default", None, None, "at_least_once", None, None)
    assert sync.backoff == Backoff()
    assert (sync.mode, asy.mode) == ("thread", "async")
    with pytest.raises(ValueError, match=r"mode 'process' does not fit an async function"):
        jobs.job("bad1", mode="process")(coro)
    with pytest.raises(ValueError, match=r"mode 'async' does not fit a sync function"):
        jobs.job("bad2", mode="async")(_noop)
    assert jobs.get("bad1") is None
    assert jobs.get("bad2") is None


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"to": "a@b", "n": 2}, ((), {"to": "a@b", "n": 2})),
        ({}, ((), {})),
        ([1, "two", None], ((1, "two", None), {})),
        ([], ((), {})),
        ([[1, 2]], (([1, 2],), {})),
        (7, ((7,), {})),
        ("s", (("s",), {})),
        (False, ((False,), {})),
        (0, ((0,), {})),
        (None, ((), {})),
    ],
)
def test_bind_maps_json_args_onto_the_call(
    args: Any, expected: tuple[tuple[Any, ...], dict[str, Any]]
) -> None:
    spec = Registry().job("k")(_noop)
    assert spec.bind(args) == expected


def test_bind_copies_the_object() -> None:
    args = {"a": 1}
    _, kwargs = Registry().job("k")(_noop).bind(args)
    kwargs["b"] = 2
    assert args == {"a": 1}


def test_bind_validates_the_payload_model() -> None:
    spec = Registry().job("image.resize", payload=Resize)(_noop)
    (model,), kwargs = spec.bind({"url": "http://x", "width": "640"})
    assert model == Resize(url="http://x", width=640)
    assert kwargs == {}


@pytest.mark.parametrize(
    ("args", "needle"),
    [({"url": "x", "width": "wide"}, "\nwidth\n"), ({"width": 3}, "\nurl\n"), ([1], "valid dictionary")],
)
def test_bind_payload_failure_is_payload_invalid(args: Any, needle: str) -> None:
    spec = Registry().job("image.resize", payload=Resize)(_noop)
    with pytest.raises(PayloadInvalid) as info:
        spec.bind(args)
    assert info.value.code == "payload_invalid"
    assert not info.value.retriable
    assert info.value.message.startswith("image.resize: args do not match Resize: ")
    assert needle in info.value.message  # pydantic names the offending field on its own line
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_calling_a_spec_runs_the_function() -> None:
    jobs = Registry()

    @jobs.job("add")
    def add(a: int, b: int = 10) -> int:
        return a + b

    assert isinstance(add, JobSpec)
    assert add(1, 2) == 3
    assert add(a=5) == 15


def test_current_job_outside_a_handler_raises_lookup_error() -> None:
    def probe() -> None:
        with pytest.raises(LookupError):
            current_job()
        ctx = JobContext("j1", "q", "k", 2, 5, {"m": "v"}, 123)
        set_current_job(ctx)
        assert current_job() is ctx

    contextvars.Context().run(probe)  # an empty context: nothing leaks into other tests
    with pytest.raises(LookupError):
        current_job()


def test_kinds_filters_by_queue() -> None:
    jobs = Registry()
    a = jobs.job("a", queue="q1")(_noop)
    b = jobs.job("b", queue="q2")(_noop)
    c = jobs.job("c")(_noop)
    assert jobs.kinds() == [a, b, c]
    assert jobs.kinds({"q1"}) == [a]
    assert jobs.kinds({"q2", "default"}) == [b, c]
    assert jobs.kinds({"nope"}) == []
    assert jobs.kinds(set()) == []
    assert jobs.queues() == {"q1", "q2", "default"}
    assert jobs.get("missing") is None


def _claimed(attempt: int) -> ClaimedJob:
    return ClaimedJob(new_envelope("q", "k", None, at_ms=1), attempt, "tok", 0)


@pytest.mark.parametrize(
    ("attempt", "expected_ms"),
    [(0, 500), (1, 500), (2, 1500), (3, 4500), (4, 13500), (5, 40500), (6, 60000), (50, 60000)],
)
def test_backoff_without_jitter_is_exponential_and_capped(attempt: int, expected_ms: int) -> None:
    spec = Registry().job("k", backoff=Backoff(base_s=0.5, factor=3.0, cap_s=60.0, jitter=False))(_noop)
    assert _backoff(spec, _claimed(attempt)) == expected_ms


@pytest.mark.parametrize("attempt", [1, 2, 3, 8, 30])
def test_backoff_with_full_jitter_stays_within_the_ceiling(attempt: int) -> None:
    spec = Registry().job("k", backoff=Backoff(base_s=1.0, cap_s=100.0))(_noop)
    ceiling = min(100_000, 1000 * 2 ** (attempt - 1))
    for _ in range(20):
        assert 0 <= _backoff(spec, _claimed(attempt)) <= ceiling
