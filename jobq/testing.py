"""Test an application's jobs without a server: what Celery's eager mode, Oban's ``:inline`` / ``:manual``
and rivertest give (``docs/tutorial.md``, "Test it")::

    from jobq.testing import inline, manual
    from myapp.jobs import registry, send_welcome

    def test_the_welcome_email_is_sent():
        with inline(registry):                 # every enqueue runs its handler at once, in-process
            handle = send_welcome.enqueue("ada@example.com")
        assert handle.result() == "sent"

    def test_signup_enqueues_the_welcome_email():
        with manual(registry) as jobs:         # enqueues are recorded, nothing runs
            signup("ada@example.com")          # your code, calling send_welcome.enqueue(...)
            jobs.assert_enqueued(kind="email.welcome", args=["ada@example.com"])
            jobs.drain()                       # now run them (and what they enqueue)

Inside either, ``spec.enqueue``, ``spec.aenqueue``, ``jobq.Client.from_env()`` and ``AsyncClient.from_env()``
reach this in-process runner instead of a gateway. A job runs as a worker would run it: ``current_job()``,
the payload model, the timeout, ``Retry`` (the next attempt at once: no wait), ``Cancel``, ``Snooze`` (again
at once), ``defer_to`` (the child runs, the job ends with its outcome), ``retry_on``/``permanent_on``,
``max_attempts`` (a kind's, else the job's, else 10) — and a task graph's nodes run in their order, each fed
its parents' results. ``process`` handlers run in a thread here. The pytest plugin (:mod:`jobq.pytest_plugin`,
registered by the package's entry point) gives the fixtures ``jobq_inline`` and ``jobq_manual``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from jqcore.clock import now_ms
from jqcore.envelope import Envelope, new_envelope, new_job_id
from jqcore.errors import JobqError
from jqcore.graphs import GraphSpec, Node, parse
from jqengine import ClaimedJob, NodeInputs, ParentOutcome
from jqruntime.client import use_transport
from worker.execute import Outcome, run_handler
from worker.registry import Registry

__all__ = ["Recorded", "TestJobs", "inline", "manual"]

Mode = Literal["inline", "manual"]
DEFAULT_ATTEMPTS = 10
MAX_RUNS = 100
"""Runs of one job at most (retries and snoozes included): a handler that snoozes for ever ends errored."""
OPTIONS = ("priority", "run_at", "delay_ms", "expires_at", "max_attempts", "lease_ms")


@dataclass
class Recorded:
    """A job the test's code enqueued, and what became of it."""

    queue: str
    envelope: Envelope
    state: str = "pending"
    attempt: int = 0
    result: Any = None
    errors: list[str] = field(default_factory=list)
    inputs: NodeInputs | None = None
    """A graph node's view of its graph (``current_job().graph``)."""

    @property
    def id(self) -> str:
        return self.envelope.id

    @property
    def kind(self) -> str:
        return self.envelope.kind

    @property
    def args(self) -> Any:
        return self.envelope.args

    def as_job(self) -> dict[str, Any]:
        """What the gateway's ``GET`` of a job says (what a handle reads)."""
        return {
            "id": self.id,
            "queue": self.queue,
            "kind": self.kind,
            "state": self.state,
            "attempt": self.attempt,
            "args": self.args,
            "meta": dict(self.envelope.meta),
            "result": None if self.result is None else orjson.dumps(self.result).decode(),
            "last_error": self.errors[-1] if self.errors else None,
        }


class TestJobs:
    """The in-process runner (a ``jqruntime.client.Transport``) behind :func:`inline` and :func:`manual`,
    and what a test asks of the jobs it recorded."""

    __test__ = False  # not a pytest test class

    def __init__(self, registry: Registry, mode: Mode) -> None:
        self.registry, self.mode = registry, mode
        self.jobs: list[Recorded] = []
        self._threads: Executor | None = None

    # ---- what a test asks ------------------------------------------------------------------------
    def enqueued_jobs(self, *, kind: str | None = None, queue: str | None = None) -> list[Recorded]:
        """The jobs enqueued so far (of ``kind``, on ``queue``), in order."""
        return [
            j for j in self.jobs if (kind is None or j.kind == kind) and (queue is None or j.queue == queue)
        ]

    def assert_enqueued(
        self,
        *,
        kind: str | None = None,
        args: Any = ...,
        queue: str | None = None,
        meta: Mapping[str, str] | None = None,
    ) -> Recorded:
        """The first job matching every criterion given (``args`` compared as the job carries them: a list
        for positional arguments, an object for keyword ones); ``AssertionError`` naming what was enqueued."""
        found = self._matching(kind, args, queue, meta)
        if not found:
            raise AssertionError(
                f"no job {self._described(kind, args, queue, meta)}; enqueued: {self._summary()}"
            )
        return found[0]

    def refute_enqueued(
        self,
        *,
        kind: str | None = None,
        args: Any = ...,
        queue: str | None = None,
        meta: Mapping[str, str] | None = None,
    ) -> None:
        """``AssertionError`` when a job matches every criterion given."""
        found = self._matching(kind, args, queue, meta)
        if found:
            raise AssertionError(
                f"a job {self._described(kind, args, queue, meta)} was enqueued: {found[0].id}"
            )

    def drain(self) -> list[Recorded]:
        """Run every pending job, and the jobs those enqueue, until none is left (manual mode); the jobs
        run."""
        ran: list[Recorded] = _blocking(self.adrain())
        return ran

    async def adrain(self) -> list[Recorded]:
        ran: list[Recorded] = []
        while pending := [j for j in self.jobs if j.state == "pending"]:
            for job in pending:
                await self._run(job)
                ran.append(job)
        return ran

    def _matching(
        self, kind: str | None, args: Any, queue: str | None, meta: Mapping[str, str] | None
    ) -> list[Recorded]:
        return [
            j
            for j in self.enqueued_jobs(kind=kind, queue=queue)
            if (args is ... or j.args == args)
            and all(j.envelope.meta.get(k) == v for k, v in (meta or {}).items())
        ]

    @staticmethod
    def _described(kind: str | None, args: Any, queue: str | None, meta: Mapping[str, str] | None) -> str:
        said = {"kind": kind, "args": args, "queue": queue, "meta": meta}
        return ", ".join(f"{k}={v!r}" for k, v in said.items() if v is not None and v is not ...) or "at all"

    def _summary(self) -> str:
        return ", ".join(f"{j.kind}({j.args!r}) on {j.queue}" for j in self.jobs) or "nothing"

    # ---- the transport (jqruntime.client.Transport) ------------------------------------------------
    async def enqueue(self, queue: str, jobs: Sequence[Mapping[str, Any]]) -> list[str]:
        made = [self._record(queue, job) for job in jobs]
        if self.mode == "inline":
            for job in made:
                await self._run(job)
        return [j.id for j in made]

    async def get_job(self, queue: str, job_id: str) -> dict[str, Any] | None:
        found = self._find(queue, job_id)
        return None if found is None else found.as_job()

    async def cancel(self, queue: str, job_id: str) -> str:
        found = self._find(queue, job_id)
        if found is None:
            raise JobqError(f"no job {job_id!r} in queue {queue!r}", code="job_not_found")
        if found.state != "pending":
            return f"already_{found.state}"
        found.state = "canceled"
        return "canceled"

    async def replay(self, queue: str, job_id: str) -> str:
        found = self._find(queue, job_id)
        if found is None:
            raise JobqError(f"no job {job_id!r} in queue {queue!r}", code="job_not_found")
        env = found.envelope
        (new_id,) = await self.enqueue(queue, [{"kind": env.kind, "args": env.args, "meta": dict(env.meta)}])
        return new_id

    async def submit_graph(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """A task graph: its nodes recorded (and, inline, run in their order, each fed its parents')."""
        spec = parse(dict(doc), now=now_ms())
        nodes = {n.name: self._node_job(spec, n) for n in spec.all_nodes()}
        if self.mode == "inline":
            await self._run_graph(spec, nodes)
        return {"id": spec.id, "queue": spec.queue, "nodes": {name: j.id for name, j in nodes.items()}}

    # ---- running ---------------------------------------------------------------------------------
    def _record(self, queue: str, job: Mapping[str, Any]) -> Recorded:
        options = {k: job[k] for k in OPTIONS if job.get(k) is not None}
        env = new_envelope(
            queue,
            job["kind"],
            job.get("args"),
            id=job.get("id") or new_job_id(),
            meta=job.get("meta"),
            excl=job.get("excl"),
            **options,
        )
        recorded = Recorded(queue, env)
        self.jobs.append(recorded)
        return recorded

    def _find(self, queue: str, job_id: str) -> Recorded | None:
        return next((j for j in reversed(self.jobs) if j.queue == queue and j.id == job_id), None)

    def _executor(self, _mode: str) -> Executor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(4, thread_name_prefix="jobq-testing")
        return self._threads

    async def _run(self, job: Recorded) -> None:
        """Run ``job`` to its end as a pool would (without the waits between attempts)."""
        spec = self.registry.get(job.kind)
        limit = job.envelope.max_attempts or (spec.max_attempts if spec else None) or DEFAULT_ATTEMPTS
        job.state = "running"
        for _ in range(MAX_RUNS):
            job.attempt += 1
            claimed = ClaimedJob(job.envelope, job.attempt, secrets.token_hex(8), now_ms() + 60_000)
            outcome = await run_handler(self.registry, claimed, self._executor, job.inputs)
            if outcome.kind == "unhandled":
                job.state = "errored"
                raise JobqError(
                    f"no handler for kind {job.kind!r} in this registry (jobq.testing runs only its kinds)",
                    code="kind_unhandled",
                )
            if outcome.kind == "snooze":
                job.attempt -= 1  # a snooze spends no attempt
                continue
            if outcome.kind == "defer" and outcome.child is not None:
                child = Recorded(outcome.child.queue, outcome.child)
                self.jobs.append(child)
                await self._run(child)
                if child.state == "completed":
                    return self._ended(job, "completed", result=child.result)
                if outcome.on_failure == "fail" or job.attempt >= limit:
                    return self._ended(job, "errored", error=f"deferred job {child.id} ended {child.state}")
                continue
            if outcome.kind == "success":
                return self._ended(job, "completed", result=_json(outcome))
            if outcome.kind == "cancel":
                return self._ended(job, "canceled", error=outcome.error)
            job.errors.append(outcome.error or outcome.label)
            if outcome.permanent or job.attempt >= limit:
                return self._ended(job, "errored")
        self._ended(
            job, "errored", error=f"ran {MAX_RUNS} times without ending (snoozed or retried for ever?)"
        )

    @staticmethod
    def _ended(job: Recorded, state: str, *, result: Any = None, error: str | None = None) -> None:
        job.state, job.result = state, result
        if error is not None:
            job.errors.append(error)

    def _node_job(self, spec: GraphSpec, node: Node) -> Recorded:
        recorded = Recorded(node.queue, node.envelope(spec.id))
        self.jobs.append(recorded)
        return recorded

    async def _run_graph(self, spec: GraphSpec, jobs: Mapping[str, Recorded]) -> None:
        """The nodes in their (topological) order: a node runs when its ``require`` parents completed and
        its ``always`` parents ended; else it is skipped. The ``on_failure`` node runs last, if any did not
        complete, fed every failure."""
        states: dict[str, str] = {}
        for node in spec.nodes:
            job = jobs[node.name]
            parents = {e.parent: jobs[e.parent] for e in node.parents}
            blocked = any(e.policy == "require" and states.get(e.parent) != "completed" for e in node.parents)
            if blocked:
                job.state = states[node.name] = "skipped"
                continue
            kept = {
                n: _outcome(p)
                for n, p in parents.items()
                if not (p.state != "completed" and _ignored(node, n))
            }
            job.inputs = NodeInputs(spec.id, node.name, node.feed, kept)
            await self._run(job)
            states[node.name] = job.state
        failed = [n for n, s in states.items() if s != "completed"]
        if spec.on_failure is not None and failed:
            job = jobs[spec.on_failure.name]
            failures = [
                {"node": n, "state": jobs[n].state, "error": jobs[n].errors[-1] if jobs[n].errors else None}
                for n in failed
            ]
            job.inputs = NodeInputs(spec.id, spec.on_failure.name, "none", {}, failures)
            await self._run(job)
        elif spec.on_failure is not None:
            jobs[spec.on_failure.name].state = "skipped"

    def stop(self) -> None:
        """Let the handlers' threads go (the end of :func:`inline` / :func:`manual`)."""
        if self._threads is not None:
            self._threads.shutdown(wait=False)


def _json(outcome: Outcome) -> Any:
    return None if outcome.result is None else orjson.loads(outcome.result)


def _outcome(job: Recorded) -> ParentOutcome:
    return ParentOutcome(job.state, job.result, job.errors[-1] if job.errors else None, job.attempt)


def _ignored(node: Node, parent: str) -> bool:
    return any(e.parent == parent and e.policy == "ignore" for e in node.parents)


def _blocking(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError("drain() from inside an event loop: await jobs.adrain() there")


@contextlib.contextmanager
def _using(registry: Registry, mode: Mode) -> Iterator[TestJobs]:
    jobs = TestJobs(registry, mode)
    use_transport(jobs)
    try:
        yield jobs
    finally:
        use_transport(None)
        jobs.stop()


def inline(registry: Registry) -> contextlib.AbstractContextManager[TestJobs]:
    """Every enqueue runs its job at once, in-process, to its end (retries and snoozes without waiting)."""
    return _using(registry, "inline")


def manual(registry: Registry) -> contextlib.AbstractContextManager[TestJobs]:
    """Enqueues are recorded, nothing runs until ``drain()``: assert on what the code under test enqueued."""
    return _using(registry, "manual")
