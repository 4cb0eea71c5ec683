"""Lifecycle events: every transition records exactly one event in the queue's stream, in the same script
(versions 1, 2, 3 … per job without gaps; the last event's state is the record's), with the worker, the
error's class and digest and the hop stamps; the stream is capped and every drop is counted."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Callable

import pytest

from jqcore.envelope import Envelope
from jqcore.events import Event, parse
from jqengine import Engine, QueueConfig
from jqengine.keys import QueueKeys

Job = Callable[..., Envelope]


async def stream(engine: Engine, q: str) -> list[Event]:
    return [parse(e.value) for e in await engine.events.read(q, 100_000)]


async def assert_complete_sequences(engine: Engine, q: str) -> dict[str, list[Event]]:
    """Per job: versions 1..n without gaps, each event's ``from`` the previous ``to``, and the record's
    version and state equal to the last event's (for jobs still in Redis)."""
    by_job: dict[str, list[Event]] = defaultdict(list)
    for e in await stream(engine, q):
        assert e.queue == q
        if e.v:  # v 0: a far-future index entry, before the record exists
            by_job[e.id].append(e)
    for job_id, events in by_job.items():
        assert [e.v for e in events] == list(range(1, len(events) + 1)), f"{job_id}: {events}"
        for before, after in itertools.pairwise(events):
            assert after.from_state == before.to, f"{job_id}: {before} -> {after}"
        info = await engine.reads.get_job(q, job_id)
        if info is not None:
            assert (info.version, info.state) == (events[-1].v, events[-1].to), job_id
    return by_job


async def test_a_job_story_is_one_event_per_transition(engine: Engine, q: str, job: Job, t0: int) -> None:
    env = job(q, id="a", kind="mail")
    await engine.enqueue_batch([env], origins={"a": "topic-x/3/42"}, now_ms=t0)
    [c] = await engine.jobs.claim(q, 1, worker="host:1:q", now_ms=t0 + 10)
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad input 7\n'
    failed = await engine.jobs.fail(q, (c.id, c.attempt, c.token), tb, retry_delay_ms=100, now_ms=t0 + 20)
    assert failed == "retry"
    await engine.timers.promote_due(q, now_ms=t0 + 200)
    [c2] = await engine.jobs.claim(q, 1, worker="host:2:q", now_ms=t0 + 210)
    await engine.jobs.complete(q, (c2.id, c2.attempt, c2.token), now_ms=t0 + 300)

    events = (await assert_complete_sequences(engine, q))["a"]
    assert [(e.from_state, e.to) for e in events] == [
        ("", "pending"),
        ("pending", "running"),
        ("running", "delayed"),
        ("delayed", "pending"),
        ("pending", "running"),
        ("running", "completed"),
    ]
    first = events[0]
    assert (first.origin, first.accepted_at, first.at, first.kind) == (
        "topic-x/3/42",
        env.enqueued_at,
        t0,
        "mail",
    )
    assert [(e.worker, e.attempt) for e in events[1:3]] == [("host:1:q", 1), ("host:1:q", 1)]
    retry = events[2]
    assert (retry.error, retry.message, retry.run_at) == ("ValueError", "bad input 7", t0 + 120)
    assert len(retry.digest) == 12
    assert events[3].worker == "", "a pending job is held by no worker"
    assert (events[5].worker, events[5].attempt, events[5].at) == ("host:2:q", 2, t0 + 300)
    info = await engine.reads.get_job(q, "a")
    assert info is not None
    assert info.worker == "host:2:q"


async def test_every_kind_of_transition_emits_and_nothing_else_does(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.admin.configure_queue(q, QueueConfig(mode="exclusive", excl_key="acct", max_attempts=1))
    await engine.admin.configure_kind("limited", concurrency=1, queues=[q])
    jobs = [
        job(q, id="x1", meta={"acct": "A"}),
        job(q, id="x2", meta={"acct": "A"}),  # waits behind x1
        job(q, id="late", meta={"acct": "B"}, run_at=t0 + 1_000),
        job(q, id="old", meta={"acct": "C"}, expires_at=t0 + 5),
        job(q, id="l1", kind="limited", meta={"acct": "D"}),
        job(q, id="l2", kind="limited", meta={"acct": "E"}),  # parked while l1 runs
        job(q, id="gone", meta={"acct": "F"}),
    ]
    await engine.enqueue_batch(jobs, now_ms=t0)
    await engine.admin.cancel(q, "gone", "not needed", now_ms=t0 + 1)
    await engine.admin.cancel(q, "ghost", "before it arrives", now_ms=t0 + 1)  # a tombstone: canceled at v 1
    claimed = {c.id: c for c in await engine.jobs.claim(q, 10, worker="w", now_ms=t0 + 10)}
    assert set(claimed) == {"x1", "l1"}, "old expired, l2 parked, x2 waiting, late delayed"
    await engine.admin.cancel(q, "l1", "stop", now_ms=t0 + 11)  # running: flagged (an event, same state)
    await engine.jobs.extend(
        q, [(claimed["l1"].id, claimed["l1"].attempt, claimed["l1"].token)], 0, now_ms=t0 + 12
    )
    x1 = claimed["x1"]
    await engine.jobs.fail(q, (x1.id, x1.attempt, x1.token), "RuntimeError: boom", now_ms=t0 + 13)  # errored
    assert await engine.admin.dead_retry(q, ids=["x1"], now_ms=t0 + 14) == 1  # behind x2 now
    more = {c.id: c for c in await engine.jobs.claim(q, 10, worker="w2", now_ms=t0 + 20)}
    assert set(more) == {"l2", "x2"}
    await engine.jobs.snooze(q, (more["l2"].id, more["l2"].attempt, more["l2"].token), 0, now_ms=t0 + 21)
    await engine.jobs.release(
        q, [(more["x2"].id, more["x2"].attempt, more["x2"].token, False)], now_ms=t0 + 22
    )
    last = {c.id: c for c in await engine.jobs.claim(q, 10, worker="w3", lease_ms=100, now_ms=t0 + 30)}
    assert set(last) == {"l2", "x2"}
    await engine.timers.reap_expired(q, now_ms=t0 + 500)  # leases expired, attempts used up: errored
    await engine.timers.promote_due(q, now_ms=t0 + 1_000)
    await engine.admin.forget(q, ["old"], now_ms=t0 + 1_001)

    by_job = await assert_complete_sequences(engine, q)
    tos = {job_id: [e.to for e in events] for job_id, events in by_job.items()}
    assert tos["x1"] == ["pending", "running", "errored", "waiting", "pending"]
    assert tos["x2"] == ["waiting", "pending", "running", "pending", "running", "errored"]
    assert tos["late"] == ["delayed", "pending"]
    assert tos["old"] == ["pending", "expired", "deleted"]
    assert tos["gone"] == ["pending", "canceled"]
    assert tos["ghost"] == ["canceled"]
    assert tos["l1"] == ["pending", "running", "running", "canceled"]
    assert tos["l2"] == ["pending", "parked", "pending", "running", "pending", "running", "errored"]
    errored = by_job["x1"][2]
    assert (errored.error, errored.message) == ("RuntimeError", "boom")
    stats = await engine.reads.queue_stats(q)
    assert stats.get("events_dropped", 0) == 0


async def test_any_worker_name_and_error_text_keep_their_text_in_events_and_history(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """Events and a first history entry are written as JSON text (lib/emit.lua, lib/record_attempt.lua):
    what a worker or an error may hold (quotes, backslashes, a newline, non-ASCII) comes back as it was,
    from an entry of several events and from an entry of one."""
    worker = 'host "a\\b"\n:é'
    err = 'ValueError: a "quoted" \\ path\n'
    await engine.enqueue_batch([job(q, id=i, kind="mail") for i in ("a", "b", "c")], now_ms=t0)
    a, _ = await engine.jobs.claim(q, 2, worker=worker, now_ms=t0 + 10)
    [c] = await engine.jobs.claim(q, 1, worker=worker, now_ms=t0 + 20)
    failed = await engine.jobs.fail(q, (c.id, c.attempt, c.token), err, retry_delay_ms=100, now_ms=t0 + 30)
    assert failed == "retry"
    await engine.jobs.complete(q, (a.id, a.attempt, a.token), now_ms=t0 + 40)

    by_job = await assert_complete_sequences(engine, q)
    assert {e.worker for j in "abc" for e in by_job[j] if e.to == "running"} == {worker}
    delayed = [(e.to, e.worker, e.message) for e in by_job["c"][2:]]
    assert delayed == [("delayed", worker, 'a "quoted" \\ path')]
    info_a, info_c = await engine.reads.get_job(q, "a"), await engine.reads.get_job(q, "c")
    assert info_a is not None
    assert info_c is not None
    assert [(h["outcome"], h["attempt"], h["at"]) for h in info_a.history] == [("completed", 1, t0 + 40)]
    assert [(h["outcome"], h["error"]) for h in info_c.history] == [("failed", err)]


async def test_the_stream_is_capped_and_every_drop_counted(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_queue(q, QueueConfig(events_cap=3))
    await engine.enqueue_batch([job(q, id=f"j{i}") for i in range(5)], now_ms=t0)
    kept = await engine.events.read(q)
    assert [e.job_id for e in kept] == ["j0", "j1", "j2"]
    assert len({e.entry for e in kept}) == 1, "one script call, one stream entry"
    assert (await engine.reads.queue_stats(q))["events_dropped"] == 2
    assert await engine.events.backlog([q]) == {q: 3}, "the cap counts events, not entries"
    await engine.jobs.claim(q, 1, now_ms=t0 + 1)
    assert (await engine.reads.queue_stats(q))["events_dropped"] == 3, "j0's claim: still at the cap"
    assert await engine.events.trim(q, kept) == 1, "the entry that held them"
    assert await engine.events.backlog([q]) == {q: 0}
    await engine.jobs.claim(q, 1, now_ms=t0 + 2)
    assert [e.job_id for e in await engine.events.read(q)] == ["j1"], "room again after the trim"
    assert await engine.events.backlog([q]) == {q: 1}


async def test_one_entry_per_call_read_whole_until_the_count(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    for i, n in enumerate((2, 3, 1)):  # three calls: entries of 2, 3 and 1 events
        await engine.enqueue_batch([job(q, id=f"c{i}-{j}") for j in range(n)], now_ms=t0)
    assert [len(await engine.events.read(q, count)) for count in (1, 2, 3, 5, 6, 100)] == [2, 2, 5, 5, 6, 6]
    first = await engine.events.read(q, 3)
    assert [e.job_id for e in first] == ["c0-0", "c0-1", "c1-0", "c1-1", "c1-2"], "in the order they happened"
    assert [parse(e.value).id for e in first] == [e.job_id for e in first], "each value is its own event"
    assert await engine.events.trim(q, first) == 2
    assert [e.job_id for e in await engine.events.read(q)] == ["c2-0"]
    assert await engine.events.backlog([q]) == {q: 1}


async def test_the_payload_read_gives_each_jobs_fields_in_order_and_none_where_missing(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """The shipper's read of the records its endings carry (``job_fields.lua``: one call for the batch)."""
    await engine.enqueue_batch([job(q, id="a", kind="mail"), job(q, id="b", kind="sms")], now_ms=t0)
    rows = await engine.reads.job_fields(q, ["b", "gone", "a"], ["kind", "no such field", "version"])
    assert rows == [[b"sms", None, b"1"], [None, None, None], [b"mail", None, b"1"]]
    assert await engine.reads.job_fields(q, [], ["kind"]) == []


async def test_a_stream_of_one_entry_per_event_is_read_and_counted(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """A stream written before the count (one ``i``/``e`` entry per event, no ``events_waiting``):
    read as it was, its length counted against the cap by the next call."""
    await engine.enqueue_batch([job(q, id="old")], now_ms=t0)
    [old] = await engine.events.read(q)
    keys, redis = QueueKeys(q), engine._client
    await redis.xadd(keys.events, {"i": "old", "e": old.value})
    await redis.hdel(keys.stats, "events_waiting")
    await engine.jobs.claim(q, 1, now_ms=t0 + 1)
    assert await engine.events.backlog([q]) == {q: 3}
    assert [parse(e.value).to for e in await engine.events.read(q)] == ["pending", "pending", "running"]


async def test_a_call_that_fails_midway_still_writes_its_events(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """Redis keeps a script's writes up to an error: the frame writes the events of the transitions done."""
    await engine.enqueue_batch([job(q, id="a"), job(q, id="b")], now_ms=t0)
    await engine.events.trim(q, await engine.events.read(q))
    redis, b = engine._client, QueueKeys(q).job("b")
    await redis.delete(b)
    await redis.set(b, "not a hash")  # the claim of b fails on its record
    try:
        with pytest.raises(Exception, match="WRONGTYPE"):
            await engine.jobs.claim(q, 2, now_ms=t0 + 1)
    finally:  # the session's Redis is shared: a broken record would fail whoever reads every queue
        await redis.delete(b)
        await redis.zrem(QueueKeys(q).ready, "b")
    [claimed] = [parse(e.value) for e in await engine.events.read(q)]
    assert (claimed.id, claimed.to) == ("a", "running")
    info = await engine.reads.get_job(q, "a")
    assert info is not None
    assert (info.state, info.version) == ("running", claimed.v)


async def test_events_off_still_counts_versions(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_queue(q, QueueConfig(events_cap=0))
    assert (await engine.reads.queue_config(q)).events_cap == 0
    await engine.enqueue_batch([job(q, id="a")], now_ms=t0)
    await engine.jobs.claim(q, 1, now_ms=t0 + 1)
    assert await engine.events.read(q) == []
    assert "events_dropped" not in await engine.reads.queue_stats(q), "off is not a drop"
    info = await engine.reads.get_job(q, "a")
    assert info is not None
    assert info.version == 2


async def test_far_jobs_get_a_version_zero_event_once(engine: Engine, q: str, t0: int) -> None:
    await engine.schedule_far(q, [("f1", t0 + 10**9)], now_ms=t0)
    await engine.schedule_far(q, [("f1", t0 + 10**9)], now_ms=t0 + 1)  # a rescan: indexed already
    [e] = await stream(engine, q)
    assert (e.id, e.v, e.to, e.run_at) == ("f1", 0, "far", t0 + 10**9)


async def test_waiting_for_events_returns_when_one_is_there(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    assert not await engine.events.wait([q], 0.05)
    waiter = asyncio.create_task(engine.events.wait([q, f"{q}.other"], 5.0))
    await engine.enqueue_batch([job(q, id="a")], now_ms=t0)
    assert await asyncio.wait_for(waiter, 10)
    assert await engine.events.wait([q], 0.05), "unshipped events answer at once"
