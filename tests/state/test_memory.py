"""The engine's estimate of a queue's Redis memory (the relay's per-queue budgets read it)."""

from __future__ import annotations

from collections.abc import Callable

from jqcore.envelope import Envelope
from jqengine import Engine, QueueConfig

Job = Callable[..., Envelope]


async def test_the_estimate_is_close_to_the_sum_over_the_queues_keys(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    ids = [f"j{i}" for i in range(400)]
    pad = "x" * 8000  # one big field of ~16: a sampled MEMORY USAGE misjudges it (none, or three times it)
    # a quarter delayed, the rest pending; then 50 claimed, 30 of them completed
    jobs = [
        job(q, id=i, args={"pad": pad}, run_at=t0 + (60_000 if n % 4 == 0 else 0)) for n, i in enumerate(ids)
    ]
    await engine.enqueue_batch(jobs, now_ms=t0)
    claimed = await engine.jobs.claim(q, 50, now_ms=t0)
    for c in claimed[:30]:
        await engine.jobs.complete(q, (c.id, c.attempt, c.token), "done", now_ms=t0 + 1)
    await engine.admin.configure_queue(q, QueueConfig(memory_budget=123_456))

    got = await engine.reads.memory(q)

    client = engine._client
    exact = sum([await client.memory_usage(f"jobq:{{{q}}}:job:{i}", samples=0) or 0 for i in ids])
    for name in ("ready", "delayed", "running", "done", "events"):
        exact += await client.memory_usage(f"jobq:{{{q}}}:{name}", samples=0) or 0
    assert got.jobs == 400
    assert got.budget == 123_456
    assert 0.8 * exact <= got.bytes <= 1.25 * exact, (got, exact)


async def test_an_unknown_queue_holds_nothing(engine: Engine, q: str) -> None:
    got = await engine.reads.memory(f"{q}.none")
    assert (got.jobs, got.bytes, got.budget) == (0, 0, 0)
