"""The far-future tier's transitions: an index entry per job kept in Kafka (GET says ``scheduled``),
a job Redis already holds is never indexed over, a move into the engine or a cancel ends the entry, and
a canceled far job is refused when it is moved in later."""

from __future__ import annotations

from collections.abc import Callable

from jqcore.envelope import Envelope
from jqcore.keys import far_scanned_key, far_scanning_key
from jqengine import CancelOutcome, Engine
from jqruntime.stores import farscan

Job = Callable[..., Envelope]


async def test_an_indexed_far_job_reads_as_scheduled_until_it_is_moved_in(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    run_at = t0 + 7_200_000
    assert await engine.schedule_far(q, [("a", run_at), ("b", run_at + 1)], now_ms=t0) == [
        "scheduled",
        "scheduled",
    ]
    assert q in await engine.reads.queues()
    info = await engine.reads.get_job(q, "a")
    assert info is not None
    assert (info.state, info.run_at) == ("scheduled", run_at)
    assert (await engine.reads.depth(q, now=t0)).far == 2
    await engine.enqueue_batch([job(q, id="a", run_at=run_at)], now_ms=t0)  # the mover moves it in
    moved = await engine.reads.get_job(q, "a")
    assert moved is not None
    assert moved.state == "delayed"
    assert await engine.reads.far_run_at(q, "a") is None, "the move ends the index entry"
    assert await engine.schedule_far(q, [("a", run_at)], now_ms=t0) == ["held"], "Redis holds it"
    assert await engine.timers.drop_far(q, ["b", "nope"], now_ms=t0) == 1
    assert await engine.reads.get_job(q, "b") is None


async def test_canceling_a_far_job_leaves_a_tombstone_that_refuses_its_move(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.schedule_far(q, [("a", t0 + 7_200_000)], now_ms=t0)
    result = await engine.admin.cancel(q, "a", "not needed", now_ms=t0)
    assert (result.outcome, result.state) == (CancelOutcome.TOMBSTONED, "scheduled")
    assert await engine.reads.far_run_at(q, "a") is None
    assert await engine.schedule_far(q, [("a", t0 + 7_200_000)], now_ms=t0) == ["held"]
    stored = await engine.enqueue_batch([job(q, id="a", run_at=t0 + 7_200_000)], now_ms=t0)
    assert [o.outcome for o in stored.outcomes] == ["canceled"]
    info = await engine.reads.get_job(q, "a")
    assert info is not None
    assert info.state == "canceled"


async def test_a_rewrite_marks_a_partition_scanned_only_if_redis_kept_its_start(
    engine: Engine, q: str
) -> None:
    """Redis lost while the far tier wrote a partition's index entries from memory (the start mark gone
    with the entries written so far): the partition must not be marked, or the entries are never written.
    The markers are the scheduler's own (:mod:`jqruntime.stores.farscan`, a plain client), beside the queues
    of the engine's Redis (single or Cluster)."""
    topic, client = f"{q}.schedule", engine._client
    assert await farscan.unscanned(client, topic, [0, 1]) == [0, 1]
    await farscan.begin(client, topic, [0, 1])
    assert await farscan.mark(client, topic, [0, 1], 1_000)
    assert await farscan.unscanned(client, topic, [0, 1]) == []
    await farscan.begin(client, topic, [0, 1])
    for key in (far_scanning_key(topic, 1), far_scanned_key(topic, 1)):  # what a Redis loss does to them
        await client.delete(key)
    assert not await farscan.mark(client, topic, [0, 1], 2_000)
    assert await farscan.unscanned(client, topic, [0, 1]) == [1], "partition 1 is written again"
