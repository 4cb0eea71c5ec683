"""``jobq.migrate``: double writes from Celery's and RQ's calls into jobq, then the cut-over kind by kind.

Neither Celery nor RQ is installed here (jobq does not depend on them): the wrapped objects are stand-ins
with exactly the documented signatures of the methods the helper calls — Celery's ``Task.delay(*args,
**kwargs)`` and ``Task.apply_async(args=None, kwargs=None, task_id=None, producer=None, link=None,
link_error=None, shadow=None, **options)`` (Celery 5.6, "Calling Tasks"; ``run`` is a function task's
body), RQ's ``Queue.enqueue(f, *args, **kwargs)`` whose reserved keywords ``Queue.parse_args`` takes,
``enqueue_call(func, args=None, kwargs=None, timeout=None, result_ttl=None, ttl=None, failure_ttl=None,
description=None, depends_on=None, job_id=None, at_front=False, meta=None, retry=None, on_success=None,
on_failure=None, on_stopped=None, pipeline=None)``, ``enqueue_in(time_delta, func, *args, **kwargs)`` and
``enqueue_at(datetime, f, *args, **kwargs)`` (RQ 2.x, ``rq/queue.py``). They record what they were given
and answer with an object carrying an ``id``, as the real ones do (``AsyncResult``, ``Job``). The jobq side
is ``jobq.testing.manual``: the jobs recorded, then run by the kind's real handler."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import jobq
from jobq.migrate import RQ_RESERVED, celery_task, rq_queue
from jobq.testing import manual

registry = jobq.Registry()


@registry.job("email.welcome", queue="emails")
def welcome(user_id: int, template: str = "welcome") -> str:
    return f"{template} mail to user {user_id}"


@registry.job("image.resize", queue="images")
def resize(path: str, width: int = 100) -> str:
    return f"{path}@{width}"


def old_resize(path: str, width: int = 100) -> str:
    """The function the application enqueues into RQ today (the jobq handler above takes the same)."""
    return f"rq: {path}@{width}"


# ---- the stand-ins ---------------------------------------------------------------------------------


@dataclass
class Sent:
    """An ``AsyncResult`` / RQ ``Job``: what their enqueue answers, with the id it was given or made."""

    id: str
    call: tuple[Any, ...]


class CeleryTaskStandIn:
    """A Celery function task's calling API, with its documented signatures."""

    name = "myapp.tasks.send_welcome"

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    def run(self, user_id: int, template: str = "welcome") -> str:
        return f"celery: {template} {user_id}"

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        return self.run(*args, **kwargs)

    def delay(self, *args: Any, **kwargs: Any) -> Sent:
        return self.apply_async(args, kwargs)

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        shadow: str | None = None,
        **options: Any,
    ) -> Sent:
        sent = Sent(task_id or str(uuid.uuid4()), (args, kwargs, options))
        self.sent.append(sent)
        return sent

    def s(self, *args: Any) -> tuple[str, tuple[Any, ...]]:
        return (self.name, args)


@dataclass
class RQQueueStandIn:
    """RQ's ``Queue`` enqueue methods, with their documented signatures (``parse_args`` included)."""

    name: str = "default"
    sent: list[Sent] = field(default_factory=list)

    def enqueue(self, f: Any, *args: Any, **kwargs: Any) -> Sent:
        options = {k: kwargs.pop(k) for k in RQ_RESERVED if k in kwargs}
        if "job_timeout" in options:  # parse_args hands it to enqueue_call as `timeout`
            options["timeout"] = options.pop("job_timeout")
        if "args" in kwargs or "kwargs" in kwargs:
            assert args == ()
            args, kwargs = kwargs.pop("args", None), kwargs.pop("kwargs", None)
        return self.enqueue_call(f, args, kwargs, **options)

    def enqueue_call(
        self,
        func: Any,
        args: Any = None,
        kwargs: Any = None,
        timeout: int | None = None,
        result_ttl: int | None = None,
        ttl: int | None = None,
        failure_ttl: int | None = None,
        description: str | None = None,
        depends_on: Any = None,
        job_id: str | None = None,
        at_front: bool = False,
        meta: Any = None,
        retry: Any = None,
        on_success: Any = None,
        on_failure: Any = None,
        on_stopped: Any = None,
        pipeline: Any = None,
    ) -> Sent:
        sent = Sent(job_id or uuid.uuid4().hex, (func, args, kwargs, ttl, meta))
        self.sent.append(sent)
        return sent

    def enqueue_in(self, time_delta: timedelta, func: Any, *args: Any, **kwargs: Any) -> Sent:
        return self.enqueue_at(datetime.now(UTC) + time_delta, func, *args, **kwargs)

    def enqueue_at(self, datetime: datetime, f: Any, *args: Any, **kwargs: Any) -> Sent:
        job = self.enqueue(f, *args, **kwargs)
        job.call = (*job.call, datetime)
        return job

    def count(self) -> int:
        return len(self.sent)


class Down:
    """A jobq client whose gateways are all down."""

    def enqueue_kind(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("no gateway answers")


# ---- Celery ----------------------------------------------------------------------------------------


def test_celery_delay_writes_both_with_one_id_and_the_jobq_handler_runs_the_same_work() -> None:
    task = CeleryTaskStandIn()
    send_welcome = celery_task(task, "email.welcome", queue="emails")
    with manual(registry) as jobs:
        result = send_welcome.delay(42)
        result2 = send_welcome.delay(user_id=7, template="reminder")
        assert isinstance(result, Sent), "the caller still gets Celery's answer"
        first = jobs.assert_enqueued(kind="email.welcome", args=[42], queue="emails")
        assert first.id == result.id, "the jobq job carries the Celery task's id"
        jobs.assert_enqueued(kind="email.welcome", args={"user_id": 7, "template": "reminder"})
        assert jobs.enqueued_jobs()[1].id == result2.id
        ran = jobs.drain()
    assert [j.result for j in ran] == ["welcome mail to user 42", "reminder mail to user 7"]
    assert [s.call[:2] for s in task.sent] == [((42,), {}), ((), {"user_id": 7, "template": "reminder"})]
    assert send_welcome.writes.written == 2


def test_celery_apply_async_maps_countdown_eta_expires_and_task_id() -> None:
    task = CeleryTaskStandIn()
    send_welcome = celery_task(task, "email.welcome", queue="emails")
    eta = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
    with manual(registry) as jobs:
        send_welcome.apply_async((1,), countdown=30, expires=600, priority=9, queue="celery-mail")
        send_welcome.apply_async(args=(2,), kwargs={"template": "x"}, eta=eta, task_id="order-2")
        delayed, at = jobs.enqueued_jobs()
    assert task.sent[0].call[2] == {"countdown": 30, "expires": 600, "priority": 9, "queue": "celery-mail"}
    env = delayed.envelope
    assert env.run_at is not None
    assert 29_000 <= env.run_at - env.enqueued_at <= 30_000
    assert env.expires_at is not None
    assert 590_000 <= env.expires_at - env.enqueued_at <= 600_000
    assert delayed.queue == "emails", "Celery's routing options are not carried: the kind's jobq queue"
    assert at.id == "order-2"
    assert at.args == {"user_id": 2, "template": "x"}, "positional and keyword arguments bound by name"
    assert at.envelope.run_at == int(eta.timestamp() * 1000)


def test_everything_else_reaches_the_celery_task_unchanged() -> None:
    task = CeleryTaskStandIn()
    send_welcome = celery_task(task, "email.welcome")
    with manual(registry) as jobs:
        assert send_welcome(5) == "celery: welcome 5", "calling the task runs it here: no message"
        assert send_welcome.s(5) == ("myapp.tasks.send_welcome", (5,))
        assert send_welcome.name == "myapp.tasks.send_welcome"
        assert jobs.enqueued_jobs() == []
    assert task.sent == []


def test_a_jobq_write_that_fails_is_counted_and_logged_while_the_old_queue_has_the_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    task = CeleryTaskStandIn()
    send_welcome = celery_task(task, "email.welcome", client=Down())  # type: ignore[arg-type]
    result = send_welcome.delay(1)
    assert task.sent == [result]
    assert (send_welcome.writes.written, send_welcome.writes.failed) == (0, 1)
    assert "jobq double write failed" in caplog.text
    strict = celery_task(task, "email.welcome", client=Down(), strict=True)  # type: ignore[arg-type]
    with pytest.raises(ConnectionError):
        strict.delay(2)


def test_a_cut_over_kind_goes_to_jobq_only_and_answers_a_jobq_handle() -> None:
    task = CeleryTaskStandIn()
    flags: set[str] = set()
    send_welcome = celery_task(task, "email.welcome", queue="emails", cut_over=lambda: flags)
    with manual(registry) as jobs:
        send_welcome.delay(1)
        flags.add("email.welcome")  # a feature flag, read at each call
        handle = send_welcome.apply_async((2,), task_id="after-cut")
        assert isinstance(handle, jobq.JobHandle)
        assert handle.ref == "emails/after-cut"
        jobs.drain()
        assert handle.result(timeout=5) == "welcome mail to user 2"
    assert len(task.sent) == 1, "nothing more reached Celery after the cut-over"


# ---- RQ --------------------------------------------------------------------------------------------


def test_rq_enqueue_of_a_mapped_function_writes_both_and_others_stay_rqs() -> None:
    queue = RQQueueStandIn("images")
    q = rq_queue(queue, {old_resize: "image.resize"})
    with manual(registry) as jobs:
        job = q.enqueue(old_resize, "cat.png", width=200, job_timeout=30, description="thumb")
        other = q.enqueue(print, "not migrated")
        rec = jobs.assert_enqueued(kind="image.resize", queue="images")
        assert rec.args == {"path": "cat.png", "width": 200}, "RQ's own keywords are not the function's"
        assert rec.id == job.id
        assert len(jobs.enqueued_jobs()) == 1
        assert [j.result for j in jobs.drain()] == ["cat.png@200"]
    assert [s.call[0] for s in queue.sent] == [old_resize, print]
    assert other.call[1] == ("not migrated",)
    assert q.count() == 2, "the queue's other methods reach RQ"


def test_rq_explicit_args_enqueue_call_and_dotted_paths() -> None:
    queue = RQQueueStandIn("images")
    q = rq_queue(queue, {f"{__name__}.old_resize": "image.resize"}, jobq_queue="images")
    with manual(registry) as jobs:
        q.enqueue(old_resize, args=("a.png",), kwargs={"width": 3}, ttl=60, meta={"team": "web", "n": 1})
        q.enqueue_call(old_resize, ("b.png",), job_id="resize-b", ttl=None)
        q.enqueue(f"{__name__}.old_resize", "c.png")
        a, b, c = jobs.enqueued_jobs()
    assert a.args == {"path": "a.png", "width": 3}
    assert a.envelope.meta == {"team": "web"}, "jobq's meta holds strings only"
    assert a.envelope.expires_at is not None
    assert a.envelope.expires_at - a.envelope.enqueued_at >= 50_000
    assert (b.id, b.args) == ("resize-b", ["b.png"])
    assert c.args == ["c.png"]


def test_rq_enqueue_in_and_enqueue_at_delay_the_jobq_job_as_long() -> None:
    queue = RQQueueStandIn("images")
    q = rq_queue(queue, {old_resize: "image.resize"})
    at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    with manual(registry) as jobs:
        q.enqueue_in(timedelta(minutes=5), old_resize, "later.png")
        q.enqueue_at(at, old_resize, "then.png")
        later, then = jobs.enqueued_jobs()
    assert later.envelope.run_at is not None
    assert 299_000 <= later.envelope.run_at - later.envelope.enqueued_at <= 300_000
    assert then.envelope.run_at == int(at.timestamp() * 1000)
    assert queue.sent[1].call[-1] == at


def test_rq_cut_over_sends_the_kind_to_jobq_only() -> None:
    queue = RQQueueStandIn("images")
    q = rq_queue(queue, {old_resize: "image.resize"}, cut_over={"image.resize"})
    with manual(registry) as jobs:
        handle = q.enqueue(old_resize, "x.png", job_id="x-1")
        jobs.drain()
        assert handle.result(timeout=5) == "x.png@100"
    assert handle.ref == "images/x-1"
    assert queue.sent == []


def test_mixed_arguments_without_a_signature_are_a_counted_failure_not_an_outage() -> None:
    queue = RQQueueStandIn("images")
    q = rq_queue(queue, {"myapp.resize": "image.resize"})
    with manual(registry) as jobs:
        job = q.enqueue("myapp.resize", "x.png", width=3)  # a dotted path: no signature to bind with
        assert jobs.enqueued_jobs() == []
    assert queue.sent == [job]
    assert q.writes.failed == 1
