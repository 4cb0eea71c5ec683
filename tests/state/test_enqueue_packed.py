"""enqueue_batch's packed rows (one MessagePack string a call): every field of every job arrives, a kind's
options are applied per kind, the stats are counted once per call, the envelope's bytes stay verbatim."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY

from jqcore.clock import now_ms
from jqcore.envelope import Envelope, decode
from jqcore.events import parse
from jqengine import Engine
from jqengine.keys import QueueKeys

Job = Callable[..., Envelope]


async def test_each_kind_gets_its_own_options_in_one_call(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.enqueue_batch([job(q, id="first")], now_ms=t0)  # the queue exists: kinds configured in it
    await engine.admin.configure_kind("urgent", queues=[q], priority=0, max_attempts=3)
    await engine.admin.configure_kind("plain", queues=[q], max_attempts=5)
    batch = [
        job(q, "urgent", id="u1"),
        job(q, "plain", id="p1"),
        job(q, "urgent", id="u2", priority=7),  # a priority given wins over the kind's
        job(q, "plain", id="p2", max_attempts=9),  # so do attempts given
        job(q, "noop", id="n1"),  # a kind without options: the queue's defaults
    ]
    result = await engine.enqueue_batch(batch, now_ms=t0)
    assert [o.outcome for o in result.outcomes] == ["stored"] * 5
    got = {i: await engine.reads.get_job(q, i) for i in ("u1", "p1", "u2", "p2", "n1")}
    assert {i: (j.priority, j.max_attempts) for i, j in got.items() if j} == {
        "u1": (0, 3),
        "p1": (t0, 5),
        "u2": (7, 3),
        "p2": (t0, 9),
        "n1": (t0, 10),
    }


async def test_any_int64_priority_reads_back_and_orders_the_ready_set(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """A priority is any int64; Lua holds it as a double, written whole (not as '9.2e+18', which the job
    view could not read back) and ordering the ready set."""
    edges = {"low": -(2**63), "high": 2**63 - 1, "big": 2**62, "small": -5}
    await engine.enqueue_batch([job(q, id=i, priority=p) for i, p in edges.items()], now_ms=t0)
    got = {i: await engine.reads.get_job(q, i) for i in edges}
    assert {i: j.priority for i, j in got.items() if j} == {i: int(float(p)) for i, p in edges.items()}
    ready = await engine.core.client.zrange(QueueKeys(q).ready, 0, -1)
    assert [r.decode() for r in ready] == ["low", "small", "big", "high"]


def _enqueued_metric(queue: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("jobq_jobs_enqueued_total", {"queue": queue, "outcome": outcome}) or 0.0


async def test_stats_are_counted_once_per_call(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.enqueue_batch([job(q, id="a")], now_ms=t0)
    before = await engine.reads.queue_stats(q)
    metric_before = {o: _enqueued_metric(q, o) for o in ("stored", "duplicate", "delayed")}
    result = await engine.enqueue_batch(
        [
            job(q, id="a"),
            job(q, id="b"),
            job(q, id="c"),
            job(q, id="b"),
            job(q, id="late", run_at=t0 + 60_000),
        ],
        now_ms=t0,
    )
    assert [o.outcome for o in result.outcomes] == ["duplicate", "stored", "stored", "duplicate", "delayed"]
    after = await engine.reads.queue_stats(q)
    assert after["enqueued"] - before["enqueued"] == 3
    assert after["duplicates"] - before.get("duplicates", 0) == 2
    metric = {o: _enqueued_metric(q, o) - metric_before[o] for o in ("stored", "duplicate", "delayed")}
    assert metric == {"stored": 2, "duplicate": 2, "delayed": 1}


async def test_every_row_field_arrives(engine: Engine, q: str, job: Job, t0: int) -> None:
    env = job(q, id="full", run_at=t0 + 5_000, expires_at=t0 + 9_000, lease_ms=1234, meta={"tenant": "t1"})
    [out] = (await engine.enqueue_batch([env], origins={"full": "topic/2/17"}, now_ms=t0)).outcomes
    assert out.outcome == "delayed"
    info = await engine.reads.get_job(q, "full")
    assert info is not None
    assert (info.run_at, info.origin, info.enqueued_at) == (t0 + 5_000, "topic/2/17", t0)
    [fields] = await engine.reads.job_fields(q, ["full"], ["expires_at", "lease_ms", "accepted_at", "fair"])
    assert fields == [str(t0 + 9_000).encode(), b"1234", None, None], (
        "accepted_at: the event's, not the record"
    )
    [event] = [parse(e.value) for e in await engine.events.read(q)]
    assert (event.accepted_at, event.origin, event.run_at) == (env.enqueued_at, "topic/2/17", t0 + 5_000)


async def test_a_record_holds_only_the_fields_its_job_has(engine: Engine, q: str, job: Job, t0: int) -> None:
    """A plain job's record leaves out the fields it has no value for (every reader takes a missing field
    as none); a finished job enqueued again under its id drops its old run's."""
    await engine.enqueue_batch([job(q, id="p")], origins={"p": "t/0/1"}, now_ms=t0)
    names = {k.decode() for k in await engine._client.hkeys(QueueKeys(q).job("p"))}
    has = {"env", "kind", "prio", "attempt", "max_attempts", "origin", "enqueued_at"}
    assert names == has | {"state", "updated_at", "version"}
    once = job(q, id="x", run_at=t0 + 5_000, expires_at=t0 + 9_000, lease_ms=1234)
    await engine.enqueue_batch([once], origins={"x": "t/0/2"}, now_ms=t0)
    await engine.admin.cancel(q, "x")
    [again] = (await engine.enqueue_batch([job(q, id="x")], origins={"x": "t/0/3"}, now_ms=t0 + 2)).outcomes
    assert again.outcome == "stored", "a finished id, a new record: a new run"
    [fields] = await engine.reads.job_fields(q, ["x"], ["run_at", "expires_at", "lease_ms", "state"])
    assert fields == [None, None, None, b"pending"], "the old run's fields are gone"


async def test_a_record_is_never_dated_before_redis_stored_it(engine: Engine, q: str, job: Job) -> None:
    """A caller's ``now`` may lag Redis's clock (a round trip, or far more): ``enqueued_at`` is the later of
    the two, as a claim's ``started_at`` is, so a wait measured between them is Redis's own."""
    before = now_ms()
    await engine.enqueue_batch([job(q, id="lagging")], now_ms=before - 60_000)
    info = await engine.reads.get_job(q, "lagging")
    assert info is not None
    assert info.enqueued_at is not None
    assert before <= info.enqueued_at <= now_ms()


async def test_utf8_envelope_bytes_are_stored_verbatim(engine: Engine, q: str, t0: int) -> None:
    raw = (
        '{"v":1,"id":"u-1","queue":"' + q + '","kind":"noop","args":{"s":"grüße 😀 \\n"},'
        '"priority":1,"enqueued_at":1,"meta":{"who":"zoë"}}'
    ).encode()
    await engine.enqueue_batch([decode(raw)], now_ms=t0)
    [claimed] = await engine.jobs.claim(q, 1, now_ms=t0)
    assert claimed.envelope.raw == raw
    assert claimed.envelope.meta == {"who": "zoë"}


async def test_a_batch_ended_by_an_error_leaves_no_stored_job_outside_the_ready_set(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """A batch's plain jobs enter the ready set in one ZADD at the end: a call that fails midway (a damaged
    record key) still adds the jobs it stored before the failure, as a job a ZADD did."""
    await engine.enqueue_batch([job(q, id="seed")], now_ms=t0)
    keys = QueueKeys(q)
    await engine._client.set(keys.job("bad"), "not a hash")
    with pytest.raises(Exception, match="WRONGTYPE"):
        await engine.enqueue_batch([job(q, id="a"), job(q, id="bad"), job(q, id="c")], now_ms=t0)
    info = await engine.reads.get_job(q, "a")
    assert info is not None
    assert info.state == "pending"
    assert await engine._client.zscore(keys.ready, "a") is not None, "stored, so claimable"
    assert await engine.reads.get_job(q, "c") is None
