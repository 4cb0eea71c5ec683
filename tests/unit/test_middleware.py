"""Per-job middleware (``worker/middleware.py``) around the handler, run by ``run_handler`` as a pool runs it:
the order of the layers and of each one's methods, sync and async methods, what a middleware's own failure
does, and what it sees (no servers)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

import orjson
import pytest
import structlog

from jobq import JobContext, Registry, current_job
from jqcore.envelope import new_envelope
from jqcore.errors import Cancel, Retry, Snooze
from jqcore.log import configure
from jqcore.settings.observe import LogSettings
from jqengine import ClaimedJob
from worker.execute import Outcome, run_handler
from worker.middleware import CallNext, is_failure

_threads = ThreadPoolExecutor(2)


def _executor(mode: str) -> Executor:
    assert mode == "thread", mode
    return _threads


def _job(kind: str = "k", attempt: int = 1) -> ClaimedJob:
    return ClaimedJob(new_envelope("q", kind, None, at_ms=1), attempt, "tok", 0)


async def _run(registry: Registry, kind: str = "k", attempt: int = 1) -> Outcome:
    return await run_handler(registry, _job(kind, attempt), _executor)


@pytest.fixture
def json_logs() -> Iterator[None]:
    """This process logs JSON lines (to the stderr of the moment: pytest's capture, ``capsys``)."""
    configure(LogSettings(format="json"))
    try:
        yield
    finally:
        configure(LogSettings())


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]


class Recorder:
    """A middleware with all three observing methods, sync or async, recording into ``calls``."""

    def __init__(self, name: str, calls: list[str], *, sync: bool) -> None:
        self.name, self.calls = name, calls
        self.before: Callable[..., Any]
        self.after: Callable[..., Any]
        self.on_failure: Callable[..., Any]
        if sync:
            self.before, self.after, self.on_failure = self._before, self._after, self._on_failure
        else:
            self.before, self.after, self.on_failure = self._abefore, self._aafter, self._aon_failure

    def _before(self, job: JobContext) -> None:
        self.calls.append(f"{self.name}.before {job.kind}")

    def _after(self, job: JobContext, result: Any) -> None:
        self.calls.append(f"{self.name}.after {result}")

    def _on_failure(self, job: JobContext, exc: BaseException) -> None:
        self.calls.append(f"{self.name}.on_failure {type(exc).__name__}")

    async def _abefore(self, job: JobContext) -> None:
        await asyncio.sleep(0)
        self._before(job)

    async def _aafter(self, job: JobContext, result: Any) -> None:
        await asyncio.sleep(0)
        self._after(job, result)

    async def _aon_failure(self, job: JobContext, exc: BaseException) -> None:
        await asyncio.sleep(0)
        self._on_failure(job, exc)


def _around(name: str, calls: list[str]) -> Any:
    async def around(job: JobContext, call_next: CallNext) -> Any:
        calls.append(f"{name}.around in")
        try:
            return await call_next()
        finally:
            calls.append(f"{name}.around out")

    return around


async def test_the_first_registered_is_the_outermost_sync_and_async_alike() -> None:
    calls: list[str] = []
    registry = Registry(middleware=[Recorder("A", calls, sync=True)])
    registry.middleware(_around("B", calls))
    registry.middleware(Recorder("C", calls, sync=False))

    @registry.job("k")
    def handler() -> int:  # a thread handler: the middleware still runs on the loop around it
        calls.append("handler")
        return 7

    outcome = await _run(registry)
    assert (outcome.kind, outcome.result) == ("success", b"7")
    assert calls == [
        "A.before k",
        "B.around in",
        "C.before k",
        "handler",
        "C.after 7",
        "B.around out",
        "A.after 7",
    ]


async def test_a_failing_handler_reaches_on_failure_inside_out_and_no_after() -> None:
    calls: list[str] = []
    registry = Registry(middleware=[Recorder("A", calls, sync=False), Recorder("B", calls, sync=True)])

    @registry.job("k")
    async def handler() -> None:
        raise ValueError("boom")

    outcome = await _run(registry)
    assert (outcome.kind, outcome.label) == ("failure", "failed")
    assert "ValueError: boom" in (outcome.error or "")
    assert calls == ["A.before k", "B.before k", "B.on_failure ValueError", "A.on_failure ValueError"]


async def test_a_raising_before_fails_the_attempt_and_the_handler_does_not_run() -> None:
    calls: list[str] = []

    class Refuses:
        def before(self, job: JobContext) -> None:
            raise PermissionError("not today")

        def on_failure(self, job: JobContext, exc: BaseException) -> None:
            calls.append("own on_failure")  # its before raised: it never wrapped the call

    registry = Registry(middleware=[Recorder("A", calls, sync=True), Refuses()])

    @registry.job("k")
    async def handler() -> None:
        calls.append("handler")

    outcome = await _run(registry)
    assert (outcome.kind, outcome.label) == ("failure", "failed")
    assert "PermissionError: not today" in (outcome.error or "")
    assert calls == ["A.before k", "A.on_failure PermissionError"]


async def test_a_raising_around_fails_the_attempt() -> None:
    async def broken(job: JobContext, call_next: CallNext) -> Any:
        await call_next()
        raise LookupError("lost it")

    registry = Registry(middleware=[broken])

    @registry.job("k")
    async def handler() -> int:
        return 1

    outcome = await _run(registry)
    assert (outcome.kind, outcome.label) == ("failure", "failed")
    assert "LookupError: lost it" in (outcome.error or "")


async def test_control_flow_in_before_works_as_in_the_handler() -> None:
    class Limiter:
        async def before(self, job: JobContext) -> None:
            raise Snooze(5)

    registry = Registry(middleware=[Limiter()])

    @registry.job("k")
    async def handler() -> None:
        raise AssertionError("never runs")

    outcome = await _run(registry)
    assert (outcome.kind, outcome.delay_ms) == ("snooze", 5000)


@pytest.mark.usefixtures("json_logs")
async def test_a_raising_after_or_on_failure_is_logged_and_the_outcome_stands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Noisy:
        def after(self, job: JobContext, result: Any) -> None:
            raise RuntimeError("after broke")

        async def on_failure(self, job: JobContext, exc: BaseException) -> None:
            raise RuntimeError("on_failure broke")

    registry = Registry(middleware=[Noisy()])

    @registry.job("ok")
    async def ok() -> str:
        return "fine"

    @registry.job("bad")
    async def bad() -> None:
        raise ValueError("the handler's")

    done = await _run(registry, "ok")
    assert (done.kind, done.result) == ("success", b'"fine"')
    failed = await _run(registry, "bad")
    assert (failed.kind, failed.label) == ("failure", "failed")
    assert "ValueError: the handler's" in (failed.error or "")
    broke = [line for line in _lines(capsys) if line["event"] == "job middleware failed"]
    assert [(b["method"], b["kind"], b["level"]) for b in broke] == [
        ("after", "ok", "error"),
        ("on_failure", "bad", "error"),
    ]
    assert all(b["middleware"].endswith("Noisy") for b in broke)
    assert "RuntimeError: after broke" in broke[0]["exception"]


@pytest.mark.parametrize(
    ("error", "seen"),
    [
        (Retry(1), ["on_failure Retry"]),  # a Retry is a failed attempt
        (Cancel("no"), []),  # control flow: neither after nor on_failure
        (Snooze(1), []),
    ],
)
async def test_on_failure_sees_failed_attempts_only(error: Exception, seen: list[str]) -> None:
    calls: list[str] = []

    class Watch:
        def after(self, job: JobContext, result: Any) -> None:
            calls.append("after")

        def on_failure(self, job: JobContext, exc: BaseException) -> None:
            calls.append(f"on_failure {type(exc).__name__}")

    registry = Registry(middleware=[Watch()])

    @registry.job("k")
    async def handler() -> None:
        raise error

    await _run(registry)
    assert calls == seen


def test_is_failure_tells_failed_attempts_from_control_flow() -> None:
    from worker.tail import Deferred

    assert [is_failure(e) for e in (ValueError(), TimeoutError(), Retry(1))] == [True, True, True]
    assert [is_failure(e) for e in (Cancel(), Snooze(1), Deferred.__new__(Deferred))] == [False, False, False]


async def test_a_timeout_reaches_on_failure_and_bounds_the_handler_only() -> None:
    calls: list[str] = []

    async def slow_around(job: JobContext, call_next: CallNext) -> Any:
        await asyncio.sleep(0.2)  # beyond the kind's timeout: the middleware's own time is not counted
        return await call_next()

    registry = Registry(middleware=[Recorder("A", calls, sync=True), slow_around])

    @registry.job("k", timeout=0.1)
    async def handler() -> None:
        await asyncio.sleep(5)

    outcome = await _run(registry)
    assert outcome.label == "timeout"
    assert calls == ["A.before k", "A.on_failure TimeoutError"]


REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request")


async def test_middleware_runs_in_the_jobs_context_which_a_thread_handler_shares() -> None:
    seen: dict[str, Any] = {}

    class Scope:
        def before(self, job: JobContext) -> None:
            seen["current"] = current_job().id
            seen["fields"] = structlog.contextvars.get_contextvars()
            REQUEST.set(f"scope of {job.id}")

    registry = Registry(middleware=[Scope()])

    @registry.job("k")
    def handler() -> str:
        return REQUEST.get()

    job = _job()
    outcome = await run_handler(registry, job, _executor)
    assert outcome.result == orjson.dumps(f"scope of {job.id}")
    assert seen["current"] == job.id
    assert seen["fields"] == {"job_id": job.id, "queue": "q", "kind": "k", "attempt": 1}


async def test_each_job_binds_its_own_log_fields_and_leaves_none_behind() -> None:
    seen: list[dict[str, Any]] = []
    registry = Registry()

    @registry.job("k")
    async def handler() -> None:
        seen.append(structlog.contextvars.get_contextvars())

    async def in_a_fresh_context() -> dict[str, Any]:
        traced = new_envelope("q", "k", None, at_ms=1, trace="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01")
        first, second = _job(), ClaimedJob(traced, 2, "tok", 0)
        await run_handler(registry, first, _executor)
        await run_handler(registry, second, _executor)
        assert seen == [
            {"job_id": first.id, "queue": "q", "kind": "k", "attempt": 1},
            {"job_id": second.id, "queue": "q", "kind": "k", "attempt": 2, "trace_id": "ab" * 16},
        ]
        return structlog.contextvars.get_contextvars()

    assert await asyncio.create_task(in_a_fresh_context(), context=contextvars.Context()) == {}


async def test_the_canary_kind_runs_without_the_applications_middleware() -> None:
    calls: list[str] = []
    registry = Registry(middleware=[Recorder("A", calls, sync=True)])
    outcome = await run_handler(registry, _job("jobq.canary"), _executor)
    assert outcome.kind == "success"
    assert calls == []


def test_bad_middleware_is_refused_at_registration() -> None:
    registry = Registry()

    def sync_around(job: JobContext, call_next: CallNext) -> Any:
        return call_next()

    class Sync:
        def around(self, job: JobContext, call_next: CallNext) -> Any:
            return call_next()

    with pytest.raises(TypeError, match="around must be an async function"):
        registry.middleware(sync_around)
    with pytest.raises(TypeError, match="around must be an async function"):
        registry.middleware(Sync())
    with pytest.raises(TypeError, match="an instance of the class"):
        registry.middleware(Recorder)
    with pytest.raises(TypeError, match="neither a function nor an object"):
        registry.middleware(42)
    assert registry.job_middleware == []
