"""enqueue_batch and claim: dedup, fences, EDF order, filters, leases, expiry, pause."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jqcore.envelope import CANARY_KIND, CANARY_PREFIX, Envelope
from jqengine import Engine, FenceRejected, QueueConfig

Job = Callable[..., Envelope]


async def test_enqueue_is_idempotent_by_id(engine: Engine, q: str, job: Job, t0: int) -> None:
    first = await engine.enqueue_batch([job(q, id="a"), job(q, id="b")], now_ms=t0)
    assert [o.outcome for o in first.outcomes] == ["stored", "stored"]
    assert first.created_queues == [q]
    again = await engine.enqueue_batch([job(q, id="a"), job(q, id="c")], now_ms=t0)
    assert [o.outcome for o in again.outcomes] == ["duplicate", "stored"]
    assert again.created_queues == []
    assert (await engine.reads.depth(q, now=t0)).pending == 3
    assert q in await engine.reads.queues()


async def test_envelope_bytes_are_stored_verbatim(engine: Engine, q: str, job: Job, t0: int) -> None:
    raw = (
        b'{"v":1,"id":"raw-1","queue":"'
        + q.encode()
        + b'","kind":"noop","args":{"big":123456789012345678901234567890,'
        b'"s":"\\u2028"},"priority":1,"enqueued_at":1}'
    )
    from jqcore.envelope import decode

    await engine.enqueue_batch([decode(raw)], now_ms=t0)
    [claimed] = await engine.jobs.claim(q, 1, now_ms=t0)
    assert claimed.envelope.raw == raw


async def test_stale_fence_is_refused_whole_batch(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.enqueue_batch([job(q, id="a")], fence=7, source="topic-a", now_ms=t0)
    with pytest.raises(FenceRejected) as info:
        await engine.enqueue_batch([job(q, id="b")], fence=6, source="topic-a", now_ms=t0)
    assert info.value.newest == 7
    assert await engine.reads.get_job(q, "b") is None
    # another source has its own fence; the newer fence is accepted and remembered
    await engine.enqueue_batch([job(q, id="c")], fence=1, source="topic-b", now_ms=t0)
    await engine.enqueue_batch([job(q, id="d")], fence=8, source="topic-a", now_ms=t0)
    with pytest.raises(FenceRejected):
        await engine.enqueue_batch([job(q, id="e")], fence=7, source="topic-a", now_ms=t0)


async def test_a_fence_raise_creates_no_queue(engine: Engine, q: str, job: Job, t0: int) -> None:
    """A new term raises its fence in every listed queue; one Redis lost the configuration of stays without
    one, so the relay's first write still restores its kept settings (``jqrelay/kept.py``)."""
    await engine.raise_fence([q], fence=3, source="topic-a")
    assert await engine.reads.configured([q]) == set()
    assert not await engine._client.hexists(f"jobq:{{{q}}}:config", "created_at")
    with pytest.raises(FenceRejected):
        await engine.enqueue_batch([job(q, id="a")], fence=2, source="topic-a", now_ms=t0)


async def test_claim_takes_lowest_priority_first_fifo_by_default(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.enqueue_batch(
        [job(q, id="late", at_ms=t0 + 2), job(q, id="early", at_ms=t0 + 1), job(q, id="urgent", priority=-5)],
        now_ms=t0,
    )
    claimed = await engine.jobs.claim(q, 3, now_ms=t0)
    assert [c.id for c in claimed] == ["urgent", "early", "late"]
    assert all(c.attempt == 1 for c in claimed)
    assert len({c.token for c in claimed}) == 3
    assert await engine.jobs.claim(q, 1, now_ms=t0) == []


async def test_lease_deadline_from_claim_job_or_queue(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_queue(q, QueueConfig(lease_ms=5000))
    await engine.enqueue_batch([job(q, id="a"), job(q, id="b", lease_ms=700), job(q, id="c")], now_ms=t0)
    a, b = await engine.jobs.claim(q, 2, now_ms=t0)
    assert (a.lease_deadline_ms, b.lease_deadline_ms) == (t0 + 5000, t0 + 700)
    [c] = await engine.jobs.claim(q, 1, lease_ms=250, now_ms=t0)
    assert c.lease_deadline_ms == t0 + 250


async def test_filtered_claim_and_depth_by_filter(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_queue(q, QueueConfig(filter_keys=("tenant", "region")))
    await engine.enqueue_batch(
        [
            job(q, id="a1", meta={"tenant": "a", "region": "eu"}),
            job(q, id="b1", meta={"tenant": "b", "region": "eu"}),
            job(q, id="a2", meta={"tenant": "a", "region": "us"}),
            job(q, id="a3", meta={"tenant": "a", "region": "eu"}),
        ],
        now_ms=t0,
    )
    assert (await engine.reads.depth(q, {"tenant": "a"})).by_filter == 3
    got = await engine.jobs.claim(q, 5, filter={"tenant": "a", "region": "eu"}, now_ms=t0)
    assert [c.id for c in got] == ["a1", "a3"]
    assert (await engine.reads.depth(q, {"tenant": "a"})).by_filter == 1
    rest = await engine.jobs.claim(q, 5, now_ms=t0)
    assert sorted(c.id for c in rest) == ["a2", "b1"]
    assert (await engine.reads.depth(q, {"tenant": "a"})).by_filter == 0


async def test_expired_jobs_are_never_handed_out(engine: Engine, q: str, job: Job, t0: int) -> None:
    out = await engine.enqueue_batch(
        [job(q, id="gone", expires_at=t0 - 1 + 1), job(q, id="soon", expires_at=t0 + 100), job(q, id="ok")],
        now_ms=t0 + 1,
    )
    assert [o.outcome for o in out.outcomes] == ["expired", "stored", "stored"]
    claimed = await engine.jobs.claim(q, 5, now_ms=t0 + 100)
    assert [c.id for c in claimed] == ["ok"]
    info = await engine.reads.get_job(q, "soon")
    assert info is not None
    assert info.state == "expired"


async def test_paused_queue_accepts_enqueues_but_hands_out_nothing(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.admin.pause(q)
    await engine.enqueue_batch([job(q, id="a")], now_ms=t0)
    assert await engine.jobs.claim(q, 1, now_ms=t0) == []
    await engine.admin.pause(q, False)
    assert [c.id for c in await engine.jobs.claim(q, 1, now_ms=t0)] == ["a"]


async def test_queue_config_is_validated_and_read_back(engine: Engine, q: str, job: Job, t0: int) -> None:
    from jqengine import QueueConfigInvalid

    with pytest.raises(QueueConfigInvalid):
        await engine.admin.configure_queue(q, QueueConfig(filter_keys=("a", "b", "c", "d", "e")))
    with pytest.raises(QueueConfigInvalid):
        await engine.admin.configure_queue(q, QueueConfig(mode="exclusive"))
    config = QueueConfig(mode="exclusive", excl_key="account", lease_ms=1234, filter_keys=("account",))
    await engine.admin.configure_queue(q, config)
    assert await engine.reads.queue_config(q) == config


async def test_a_claim_is_stamped_no_earlier_than_redis_handed_it_out(
    engine: Engine, q: str, job: Job
) -> None:
    """A claimer's reading of Redis's clock may lag (a round trip, a loaded host): the record of a start is
    Redis's own time then, so a job promoted on time is never recorded as claimed before its run_at."""
    seconds, micros = await engine._client.time()
    before = int(seconds) * 1000 + int(micros) // 1000
    await engine.enqueue_batch([job(q, id="a")], now_ms=before)
    [claimed] = await engine.jobs.claim(q, 1, now_ms=before - 10_000)  # a clock 10 s behind Redis's
    info = await engine.reads.get_job(q, claimed.id)
    assert info is not None
    assert info.started_at is not None
    assert info.started_at >= before


async def test_kinds_under_jobq_are_refused_but_the_canary_s_heartbeat(
    engine: Engine, prefix: str, job: Job, t0: int
) -> None:
    """A ``jobq.*`` kind is jobq's own: refused (``kind_reserved``), but for the canary's heartbeat into a
    canary queue (``jqcore.admission``, which the engine imports when such a kind first comes)."""
    plain, canary = f"{prefix}.jobs", f"{CANARY_PREFIX}{prefix}"
    sent = [job(plain, "jobq.x", id="a"), job(plain, CANARY_KIND, id="b"), job(canary, CANARY_KIND, id="c")]
    got = await engine.enqueue_batch(sent, now_ms=t0)
    assert [(o.id, o.outcome) for o in got.outcomes] == [("a", "refused"), ("b", "refused"), ("c", "stored")]
    assert all((o.reason or "").startswith("kind_reserved: ") for o in got.outcomes[:2])
