"""The far-future tier's transitions: an index entry per job kept in Kafka (GET says ``scheduled``),
a job Redis already holds is never indexed over, a move into the engine or a cancel ends the entry, and
a canceled far job is refused when it is moved in later."""

from __future__ import annotations

from collections.abc import Callable

from jqcore.envelope import Envelope
from jqcore.state import CancelOutcome, Engine
from jqcore.state.keys import far_scanned_key, far_scanning_key

Job = Callable[..., Envelope]


async def test_an_indexed_far_job_reads_as_scheduled_until_it_is_moved_in(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    run_at = t0 + 7_200_000
    assert await engine.schedule_far(q, [("a", run_at), ("b", run_at + 1)], now_ms=t0) == [
        "scheduled",
        "scheduled",
    ]
    assert q in await engine.queues()
    info = await engine.get_job(q, "a")
    assert info is not None
    assert (info.state, info.run_at) == ("scheduled", run_at)
    assert (await engine.depth(q, now=t0)).far == 2
    await engine.enqueue_batch([job(q, id="a", run_at=run_at)], now_ms=t0)  # the mover moves it in
    moved = await engine.get_job(q, "a")
    assert moved is not None
    assert moved.state == "delayed"
    assert await engine.far_run_at(q, "a") is None, "the move ends the index entry"
    assert await engine.schedule_far(q, [("a", run_at)], now_ms=t0) == ["held"], "Redis holds it"
    assert await engine.drop_far(q, ["b", "nope"], now_ms=t0) == 1
    assert await engine.get_job(q, "b") is None


async def test_canceling_a_far_job_leaves_a_tombstone_that_refuses_its_move(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.schedule_far(q, [("a", t0 + 7_200_000)], now_ms=t0)
    result = await engine.cancel(q, "a", "not needed", now_ms=t0)
    assert (result.outcome, result.state) == (CancelOutcome.TOMBSTONED, "scheduled")
    assert await engine.far_run_at(q, "a") is None
    assert await engine.schedule_far(q, [("a", t0 + 7_200_000)], now_ms=t0) == ["held"]
    stored = await engine.enqueue_batch([job(q, id="a", run_at=t0 + 7_200_000)], now_ms=t0)
    assert [o.outcome for o in stored.outcomes] == ["canceled"]
    info = await engine.get_job(q, "a")
    assert info is not None
    assert info.state == "canceled"


async def test_a_rewrite_marks_a_partition_scanned_only_if_redis_kept_its_start(
    engine: Engine, q: str
) -> None:
    """Redis lost while the far tier wrote a partition's index entries from memory (the start mark gone
    with the entries written so far): the partition must not be marked, or the entries are never written."""
    topic = f"{q}.schedule"
    assert await engine.far_unscanned(topic, [0, 1]) == [0, 1]
    await engine.begin_far_scan(topic, [0, 1])
    assert await engine.mark_far_scanned(topic, [0, 1], 1_000)
    assert await engine.far_unscanned(topic, [0, 1]) == []
    await engine.begin_far_scan(topic, [0, 1])
    for key in (far_scanning_key(topic, 1), far_scanned_key(topic, 1)):  # what a Redis loss does to them
        await engine._client.delete(key)
    assert not await engine.mark_far_scanned(topic, [0, 1], 2_000)
    assert await engine.far_unscanned(topic, [0, 1]) == [1], "partition 1 is written again"


async def test_an_index_an_older_jobq_wrote_as_a_zset_is_read_until_schedule_far_replaces_it(
    engine: Engine, q: str, t0: int
) -> None:
    far = f"jobq:{{{q}}}:far"
    await engine._client.zadd(far, {"old": t0 + 9_000_000, "older": t0 + 8_000_000})
    info = await engine.get_job(q, "old")
    assert info is not None
    assert (info.state, info.run_at) == ("scheduled", t0 + 9_000_000)
    assert (await engine.depth(q, now=t0)).far == 2
    assert await engine.list_ids(q, "far") == (["older", "old"], 2)
    assert await engine.far_next(q) == t0 + 8_000_000
    assert [j.run_at if j else None for j in await engine.far_jobs(q, ["old", "nope"])] == [
        t0 + 9_000_000,
        None,
    ]
    assert await engine.schedule_far(q, [("new", t0 + 7_000_000)], now_ms=t0) == ["scheduled"]
    assert await engine._client.type(far) == b"hash", "replaced: the schedulers write the old entries again"
    assert await engine.list_ids(q, "far") == (["new"], 1)
    assert await engine.far_next(q) == t0 + 7_000_000
