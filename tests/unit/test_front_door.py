"""``import jobq`` and ``jobq.testing``: an application's handlers tested with no server — inline (each
enqueue runs its job at once, as a worker would) and manual (enqueues recorded, then drained); typed
results; options; retries and the kind's exception filters; Cancel, Snooze, defer_to; a graph in order."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import jobq
from jobq.testing import TestJobs, inline, manual


class Total(BaseModel):
    n: int
    label: str


registry = jobq.Registry()
seen: list[str] = []


@registry.job("count", queue="app.q")
async def count(words: list[str]) -> Total:
    job = jobq.current_job()
    seen.append(f"{job.kind}@{job.queue}#{job.attempt}")
    return Total(n=len(words), label="words")


@registry.job("flaky", queue="app.q", max_attempts=3, retry_on=(ConnectionError,))
def flaky(fail_first: int) -> int:
    if jobq.current_job().attempt <= fail_first:
        raise ConnectionError("down")
    return jobq.current_job().attempt


@registry.job("picky", queue="app.q", max_attempts=5, retry_on=(ConnectionError,))
def picky() -> None:
    raise ValueError("a bug: never worth retrying")


@registry.job("fatal", queue="app.q", max_attempts=5, permanent_on=(KeyError,))
def fatal() -> None:
    raise KeyError("gone")


@registry.job("stop", queue="app.q")
async def stop() -> None:
    raise jobq.Cancel("not needed")


@registry.job("later", queue="app.q")
async def later() -> str:
    if jobq.current_job().attempt == 1 and "snoozed" not in seen:
        seen.append("snoozed")
        raise jobq.Snooze(60)
    return "woke"


@registry.job("parent", queue="app.q")
async def parent(n: int) -> None:
    jobq.defer_to(double.message(n))


@registry.job("double", queue="app.other")
async def double(n: int) -> int:
    return 2 * n


@registry.job("signup", queue="app.q")
async def signup(email: str) -> None:
    await welcome.aenqueue(email)


@registry.job("welcome", queue="app.mail")
async def welcome(email: str) -> str:
    return f"hi {email}"


@registry.job("blocking", queue="app.q")
async def blocking() -> None:
    welcome.enqueue("x")  # the sync API inside an async handler: refused in-process, with advice


def test_inline_runs_the_job_at_once_and_the_result_is_typed() -> None:
    seen.clear()
    with inline(registry):
        handle = count.enqueue(["a", "b", "c"])
        assert handle.result(timeout=5) == Total(n=3, label="words")  # decoded as the annotation says
        assert handle.state() == "completed"
        assert handle.ref == f"app.q/{handle.id}"
        moved = count.options(queue="app.other", priority=1).enqueue(["x"])
        assert moved.queue == "app.other"
    assert seen == ["count@app.q#1", "count@app.other#1"]


def test_retries_follow_max_attempts_and_the_kinds_exception_filters() -> None:
    with inline(registry) as jobs:
        assert flaky.enqueue(2).result() == 3, "two ConnectionErrors retried, the third attempt succeeds"
        gave_up = flaky.enqueue(5)
        with pytest.raises(jobq.JobFailed, match="errored"):
            gave_up.result()
        with pytest.raises(jobq.JobFailed):
            picky.enqueue().result()
        with pytest.raises(jobq.JobFailed):
            fatal.enqueue().result()
        attempts = {j.kind: j.attempt for j in jobs.jobs if j.kind in ("picky", "fatal")}
    assert attempts == {"picky": 1, "fatal": 1}, "retry_on / permanent_on: no second attempt"


def test_cancel_snooze_and_a_tail_call_end_as_a_worker_ends_them() -> None:
    seen.clear()
    with inline(registry) as jobs:
        with pytest.raises(jobq.JobCanceled, match="not needed"):
            stop.enqueue().result()
        assert later.enqueue().result() == "woke"
        assert parent.enqueue(21).result() == 42, "the job ends with the job it deferred to"
    child = jobs.assert_enqueued(kind="double", args=[21], queue="app.q")  # defer_to: the job's queue
    assert child.state == "completed"


async def test_async_code_enqueues_with_aenqueue_and_jobs_enqueued_by_jobs_run_too() -> None:
    with inline(registry) as jobs:
        handle = await signup.aenqueue("ada@example.com")
        assert await handle.result() is None
        sent = jobs.assert_enqueued(kind="welcome", args=["ada@example.com"], queue="app.mail")
        assert sent.result == "hi ada@example.com"


def test_the_sync_api_inside_an_async_handler_run_in_process_is_refused_with_advice() -> None:
    with inline(registry):
        broken = blocking.enqueue()  # runs on the client's loop, where a blocking call would wait on itself
        with pytest.raises(jobq.JobFailed, match=r"await spec\.aenqueue"):
            broken.result()


def test_manual_records_and_drain_runs_what_was_recorded_and_what_it_enqueued() -> None:
    with manual(registry) as jobs:
        handle = signup.enqueue("bob@example.com")
        assert handle.state() == "pending"
        jobs.assert_enqueued(kind="signup", args=["bob@example.com"])
        jobs.refute_enqueued(kind="welcome")
        with pytest.raises(AssertionError, match="signup"):
            jobs.assert_enqueued(kind="welcome")
        ran = jobs.drain()
        assert [j.kind for j in ran] == ["signup", "welcome"]
        assert handle.state() == "completed"
        assert jobs.enqueued_jobs(kind="welcome")[0].result == "hi bob@example.com"


def test_a_graph_runs_its_nodes_in_order_each_fed_its_parents_results() -> None:
    with inline(registry) as jobs:
        graph = jobq.Graph("g-1", queue="app.q")
        graph.add("a", "double", [1])
        graph.add("b", "double", parents=["a"], feed="last")
        graph.add("c", "flaky", [9], parents=["b"])  # fails for good: its dependents are skipped
        graph.add("d", "double", parents=["c"], feed="last")
        jobq.Client.from_env().submit_graph(graph)
    states = {j.inputs.node if j.inputs else j.kind: (j.state, j.result) for j in jobs.jobs}
    assert states["a"] == ("completed", 2)
    assert states["b"] == ("completed", 4), "b got a's result appended to its args"
    assert states["c"][0] == "errored"
    assert [j.state for j in jobs.jobs if j.envelope.graph and j.envelope.graph["node"] == "d"] == ["skipped"]


def test_without_a_test_mode_the_client_says_how_to_configure_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBQ_URL", raising=False)
    monkeypatch.delenv("JOBQ_TOKEN", raising=False)
    with pytest.raises(jobq.JobqError, match="JOBQ_URL"):
        jobq.Client.from_env()


def test_the_front_door_names_everything_an_application_needs() -> None:
    for name in jobq.__all__:
        assert getattr(jobq, name) is not None, name
    assert isinstance(jobq.registry, jobq.Registry)
    assert isinstance(TestJobs, type)


class Recording:
    """A transport that records enqueues and answers every job completed (what a gateway would say)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.closed = False

    async def enqueue(self, queue: str, jobs: Any) -> list[str]:
        self.sent += [(queue, job["kind"]) for job in jobs]
        return [f"id{len(self.sent)}" for _ in jobs]

    async def get_job(self, queue: str, job_id: str) -> dict[str, Any]:
        return {"id": job_id, "queue": queue, "state": "completed", "result": '{"n": 1, "label": "x"}'}

    async def close(self) -> None:
        self.closed = True


async def test_a_client_opened_with_async_with_is_what_aenqueue_uses_on_its_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("JOBQ_URL", raising=False)
    transport = Recording()
    async with jobq.AsyncClient(transport) as client:  # type: ignore[arg-type]
        handle = await count.aenqueue(["a"])  # an application's lifespan client, used by its views
        assert handle.client is client
        assert await handle.result() == Total(n=1, label="x")
        async with jobq.AsyncClient(Recording()):  # type: ignore[arg-type]
            assert (await count.aenqueue(["b"])).client is client, "the first one opened stays the default"
    assert transport.sent == [("app.q", "count"), ("app.q", "count")]
    assert transport.closed
    with pytest.raises(jobq.JobqError, match="JOBQ_URL"):  # closed: no longer the loop's default
        await count.aenqueue(["c"])
