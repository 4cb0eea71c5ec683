"""Model-based test: many interleaved operations, the engine checked against a plain-Python model."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from jqcore.envelope import new_envelope
from jqengine import CancelOutcome, CancelResult, ClaimedJob, Code, Engine, Settle, StaleLease, reads
from jqstack.testing.backends import SessionStack

T0 = 1_900_000_000_000  # ahead of the real clock, as tests/state/conftest.py's
LEASE = 1000
RETRY = 50
MAX_ATTEMPTS = 2
IDS = [f"j{i}" for i in range(8)]


@dataclass
class Job:
    prio: int
    state: str
    attempt: int = 0
    run_at: int = 0
    deadline: int = 0
    token: str = ""
    cancel: bool = False


@dataclass
class Model:
    now: int = T0
    jobs: dict[str, Job] = field(default_factory=dict)

    def pending(self) -> list[str]:
        return sorted((j.prio, i) for i, j in self.jobs.items() if j.state == "pending")  # type: ignore[misc]

    def tick(self) -> None:
        for job in self.jobs.values():
            if job.state == "delayed" and job.run_at <= self.now:
                job.state = "pending"
        for job in self.jobs.values():
            if job.state == "running" and job.deadline < self.now:
                if job.cancel:
                    job.state = "canceled"
                elif job.attempt >= MAX_ATTEMPTS:
                    job.state = "errored"
                else:
                    job.state = "pending"


class EngineMachine(RuleBasedStateMachine):
    url: str = ""

    @initialize()
    def setup(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = aioredis.Redis.from_url(self.url)
        self.engine = Engine(self.client)
        self.q = f"model{secrets.token_hex(4)}"
        self.model = Model()
        self.tokens: dict[str, tuple[int, str]] = {}

    def run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        if hasattr(self, "loop"):
            self.run(self.client.aclose())
            self.loop.close()

    @rule(job_id=st.sampled_from(IDS), delay=st.sampled_from([0, 0, 100]))
    def enqueue(self, job_id: str, delay: int) -> None:
        env = new_envelope(
            self.q, "noop", None, id=job_id, delay_ms=delay, max_attempts=MAX_ATTEMPTS, at_ms=self.model.now
        )
        [out] = self.run(self.engine.enqueue_batch([env], now_ms=self.model.now)).outcomes
        known = self.model.jobs.get(job_id)
        if known is None:
            self.model.jobs[job_id] = Job(
                env.priority, "delayed" if delay else "pending", run_at=self.model.now + delay
            )
            assert out.outcome == ("delayed" if delay else "stored")
        else:
            assert out.outcome in ("duplicate", "canceled")

    @rule(n=st.integers(1, 3))
    def claim(self, n: int) -> None:
        self._claimed(self.run(self.engine.jobs.claim(self.q, n, lease_ms=LEASE, now_ms=self.model.now)), n)

    @rule(data=st.data(), n=st.integers(0, 3))
    def complete_and_claim(self, data: st.DataObject, n: int) -> None:
        """A pool's round (``settle_claim``): some running jobs completed, then up to n claimed."""
        done = (
            data.draw(st.lists(st.sampled_from(self._running()), unique=True, max_size=2))
            if self._running()
            else []
        )
        items = [Settle((i, self.model.jobs[i].attempt, self.model.jobs[i].token)) for i in done]
        answers, claimed = self.run(
            self.engine.jobs.settle_claim(self.q, items, n, lease_ms=LEASE, now_ms=self.model.now)
        )
        assert [code for code, _ in answers] == [Code.OK] * len(done)
        for job_id in done:
            self.model.jobs[job_id].state = "completed"
        self._claimed(claimed, n)

    def _claimed(self, claimed: list[ClaimedJob], n: int) -> None:
        expected = [i for _, i in self.model.pending()[:n]]  # type: ignore[misc]
        assert [c.id for c in claimed] == expected
        for c in claimed:
            job = self.model.jobs[c.id]
            job.state, job.attempt, job.deadline, job.token = (
                "running",
                job.attempt + 1,
                self.model.now + LEASE,
                c.token,
            )
            assert c.attempt == job.attempt

    def _running(self) -> list[str]:
        return sorted(i for i, j in self.model.jobs.items() if j.state == "running")

    @precondition(lambda self: any(j.state == "running" for j in self.model.jobs.values()))
    @rule(data=st.data(), ok=st.booleans(), permanent=st.booleans())
    def finish(self, data: st.DataObject, ok: bool, permanent: bool) -> None:
        job_id = data.draw(st.sampled_from(self._running()))
        job = self.model.jobs[job_id]
        owner = (job_id, job.attempt, job.token)
        if ok:
            self.run(self.engine.jobs.complete(self.q, owner, now_ms=self.model.now))
            job.state = "completed"
            return
        got = self.run(
            self.engine.jobs.fail(
                self.q, owner, "x", retry_delay_ms=RETRY, permanent=permanent, now_ms=self.model.now
            )
        )
        if job.cancel:
            job.state = "canceled"
        elif permanent or job.attempt >= MAX_ATTEMPTS:
            job.state = "errored"
        else:
            job.state, job.run_at = "delayed", self.model.now + RETRY
        assert got == {"delayed": "retry"}.get(job.state, job.state)

    @rule(job_id=st.sampled_from(IDS))
    def cancel(self, job_id: str) -> None:
        got = self.run(self.engine.admin.cancel(self.q, job_id, now_ms=self.model.now))
        job = self.model.jobs.get(job_id)
        if job is None:
            self.model.jobs[job_id] = Job(0, "canceled")
            assert got.outcome == CancelOutcome.TOMBSTONED
        elif job.state in ("pending", "delayed"):
            assert got == CancelResult(CancelOutcome.CANCELED, job.state)
            job.state = "canceled"
        elif job.state == "running":
            job.cancel = True
            assert got.outcome == CancelOutcome.FLAGGED
        else:
            assert got == CancelResult(CancelOutcome.FINAL, job.state)

    @rule(ms=st.sampled_from([10, 60, 1100]))
    def tick(self, ms: int) -> None:
        self.model.now += ms
        self.run(self.engine.timers.promote_due(self.q, now_ms=self.model.now))
        self.run(self.engine.timers.reap_expired(self.q, now_ms=self.model.now))
        self.model.tick()

    @precondition(lambda self: any(j.state == "running" for j in self.model.jobs.values()))
    @rule(data=st.data())
    def stale_write(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self._running()))
        job = self.model.jobs[job_id]
        with pytest.raises(StaleLease):
            self.run(
                self.engine.jobs.complete(self.q, (job_id, job.attempt - 1, job.token), now_ms=self.model.now)
            )

    @invariant()
    def states_agree(self) -> None:
        if not hasattr(self, "model"):
            return
        for job_id, job in self.model.jobs.items():
            info = self.run(reads.get_job(self.client, self.q, job_id))
            assert info is not None
            assert info.state == job.state, (job_id, info.state, job.state)
            if job.state != "canceled" or job.attempt:
                assert info.attempt == job.attempt


def test_engine_matches_the_model(stack: SessionStack) -> None:
    assert stack.endpoints.redis_url
    EngineMachine.url = stack.endpoints.redis_url
    run = EngineMachine.TestCase
    run.settings = settings(
        max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)
    )
    run().runTest()
