"""Kill switches at claim time: a switch on a kind or meta pairs parks matching jobs (no attempt spent)
or kills them, claims and hand-offs alike; lifting it gives the parked jobs back in priority order."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio.cluster import RedisCluster

from jqcore.envelope import Envelope
from jqcore.errors import BackendUnavailable
from jqengine import Engine, QueueConfig, Switch, SwitchNotFound, core
from jqengine.keys import QUEUES_KEY, SWITCHES_KEY, QueueKeys

from .conftest import lose_queue

Job = Callable[..., Envelope]


@pytest.fixture
async def lift_after(engine: Engine) -> AsyncIterator[list[str]]:
    """Names of the switches a test set: lifted at its end (the switch hash is shared by the session)."""
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(SwitchNotFound):
            await engine.admin.lift_switch(name)


async def _set(engine: Engine, names: list[str], switch: Switch) -> list[str]:
    names.append(switch.name)
    return await engine.admin.set_switch(switch)


async def test_a_parked_kind_waits_without_spending_attempts_and_comes_back_in_order(
    engine: Engine, q: str, prefix: str, job: Job, t0: int, lift_after: list[str]
) -> None:
    jobs = [job(q, "poison", id=f"p{i}", priority=5 - i) for i in range(3)] + [job(q, "ok", id="ok")]
    await engine.enqueue_batch(jobs, now_ms=t0)
    name = f"{prefix}-poison"
    assert await _set(engine, lift_after, Switch(name, queue=q, kind="poison")) == [q]

    claimed = await engine.jobs.claim(q, 10, now_ms=t0 + 1)
    assert [j.id for j in claimed] == ["ok"]
    parked = await engine.reads.get_job(q, "p0")
    assert parked is not None
    assert (parked.state, parked.attempt) == ("parked", 0)
    assert (await engine.reads.depth(q, now=t0 + 1)).blocked == 3
    assert [s.name for s in await engine.admin.switches() if s.name == name] == [name]

    assert await engine.admin.lift_switch(name) == 3
    lift_after.remove(name)
    again = await engine.jobs.claim(q, 10, now_ms=t0 + 2)
    assert [(j.id, j.attempt) for j in again] == [("p2", 1), ("p1", 1), ("p0", 1)]  # priority kept
    assert (await engine.reads.depth(q, now=t0 + 2)).blocked == 0
    with pytest.raises(SwitchNotFound):
        await engine.admin.lift_switch(name)


async def test_a_dead_switch_on_meta_sends_matching_jobs_to_the_dead_letters(
    engine: Engine, q: str, prefix: str, job: Job, t0: int, lift_after: list[str]
) -> None:
    await engine.enqueue_batch(
        [job(q, id="x", meta={"tenant": "acme"}), job(q, id="y", meta={"tenant": "other"})], now_ms=t0
    )
    await _set(engine, lift_after, Switch(f"{prefix}-acme", action="dead", queue=q, meta={"tenant": "acme"}))
    assert [j.id for j in await engine.jobs.claim(q, 10, now_ms=t0 + 1)] == ["y"]
    dead = await engine.reads.get_job(q, "x")
    assert dead is not None
    assert (dead.state, dead.attempt, dead.reason) == ("errored", 0, f"kill switch {prefix}-acme")
    assert [j.id for j in await engine.reads.dead_list(q)] == ["x"]


async def test_a_canceled_parked_job_stays_canceled_when_the_switch_lifts(
    engine: Engine, q: str, prefix: str, job: Job, t0: int, lift_after: list[str]
) -> None:
    await engine.enqueue_batch([job(q, "poison", id="p")], now_ms=t0)
    name = f"{prefix}-stop"
    await _set(engine, lift_after, Switch(name, queue=q, kind="poison"))
    assert await engine.jobs.claim(q, 1, now_ms=t0 + 1) == []
    assert (await engine.admin.cancel(q, "p", now_ms=t0 + 2)).outcome == "canceled"
    assert await engine.admin.lift_switch(name) == 0
    lift_after.remove(name)
    info = await engine.reads.get_job(q, "p")
    assert info is not None
    assert info.state == "canceled"
    assert (await engine.reads.depth(q, now=t0 + 3)).blocked == 0


async def test_a_switch_reaches_queues_created_after_it_and_waiting_pools(
    engine: Engine, prefix: str, job: Job, t0: int, lift_after: list[str]
) -> None:
    await _set(engine, lift_after, Switch(f"{prefix}-all", queue=f"{prefix}.*", kind="poison"))
    q = f"{prefix}.later"
    await engine.enqueue_batch([job(q, "ok", id="seed")], now_ms=t0)  # the queue is born now
    [seed] = await engine.jobs.claim(q, 1, worker="w", waiter="pool", wait_ms=60_000, now_ms=t0)
    assert await engine.jobs.claim(q, 5, worker="w", waiter="pool", wait_ms=60_000, now_ms=t0) == []  # waits

    await engine.enqueue_batch([job(q, "poison", id="p")], now_ms=t0 + 1)  # hand-off meets the switch
    assert await engine._client.llen(QueueKeys(q).prefix + "inbox:pool") == 0
    info = await engine.reads.get_job(q, "p")
    assert info is not None
    assert (info.state, info.attempt) == ("parked", 0)
    assert seed.id == "seed"


async def test_a_switch_set_before_its_queue_existed_holds_the_first_batch(
    engine: Engine, prefix: str, job: Job, t0: int, lift_after: list[str]
) -> None:
    """A queue born (or born again after Redis lost it) under a switch: its first batch is held already —
    the batch that creates it hands nothing matching to a pool waiting for it."""
    q = f"{prefix}.born"
    assert await engine.jobs.claim(q, 5, worker="w", waiter="pool", wait_ms=60_000, now_ms=t0) == []  # waits
    await _set(engine, lift_after, Switch(f"{prefix}-born", queue=q, meta={"sw": "1"}))
    result = await engine.enqueue_batch(
        [job(q, "k", id="held", meta={"sw": "1"}), job(q, "k", id="free")], now_ms=t0
    )
    assert result.created_queues == [q], "this batch created the queue"
    handed = await engine.jobs.wait_for_handoff(q, "pool", 1.0)
    assert [j.id for j in handed or []] == ["free"]
    info = await engine.reads.get_job(q, "held")
    assert info is not None
    assert (info.state, info.attempt) == ("parked", 0)


async def test_a_queue_lost_after_its_first_batch_is_announced_again_before_its_next(
    engine: Engine, prefix: str, job: Job, t0: int, lift_after: list[str]
) -> None:
    """The engine announces a queue before its first write only (then the script alone): a queue whose
    configuration and listing were lost since (Redis lost them) is not created by the next write, which
    announces it again — listed, and born with the switch set while it was gone."""
    q = f"{prefix}.gone"
    await engine.enqueue_batch([job(q, "k", id="first")], now_ms=t0)
    await lose_queue(engine, q)
    assert await _set(engine, lift_after, Switch(f"{prefix}-gone", queue=q, kind="poison")) == []
    assert await engine.jobs.claim(q, 5, worker="w", waiter="pool", wait_ms=60_000, now_ms=t0) == []  # waits
    result = await engine.enqueue_batch([job(q, "poison", id="p"), job(q, "ok", id="free")], now_ms=t0 + 1)
    assert result.created_queues == [q], "the write created the queue again, after announcing it"
    assert q in await engine.core.queues()
    handed = await engine.jobs.wait_for_handoff(q, "pool", 1.0)
    assert [j.id for j in handed or []] == ["free"]
    info = await engine.reads.get_job(q, "p")
    assert info is not None
    assert (info.state, info.attempt) == ("parked", 0)


async def test_a_queue_whose_listing_alone_was_lost_is_listed_again_within_the_announce_period(
    engine: Engine, prefix: str, job: Job, t0: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue list and a queue's configuration can be lost apart (a Cluster keeps them in different
    slots): a queue still configured is written without announcing, and listed again once
    ANNOUNCE_EVERY_S passed since its last announce — where a switch set later finds it."""
    q = f"{prefix}.unlisted"
    await engine.enqueue_batch([job(q, "k", id="a")], now_ms=t0)
    await engine._client.srem(QUEUES_KEY, q)
    await engine.enqueue_batch([job(q, "k", id="b")], now_ms=t0)
    assert q not in await engine.core.queues(), "within the period: the script alone"
    monkeypatch.setattr(core, "ANNOUNCE_EVERY_S", 0.0)  # the period passed
    await engine.enqueue_batch([job(q, "k", id="c")], now_ms=t0)
    assert q in await engine.core.queues()


@pytest.mark.parametrize("first", ["configured", "paused"])
async def test_a_queue_configured_again_after_redis_lost_it_gets_the_switches_in_force(
    engine: Engine, prefix: str, job: Job, t0: int, lift_after: list[str], first: str
) -> None:
    """Redis lost a queue this engine had written: a switch set then reaches no queue list, and the
    operator's configuring (or pausing) the queue again creates it — under the switches in force, so the
    jobs of the relay's next batch, which no longer creates the queue, are held."""
    q = f"{prefix}.lost"
    await engine.enqueue_batch([job(q, "k", id="before")], now_ms=t0)
    await lose_queue(engine, q)
    assert await _set(engine, lift_after, Switch(f"{prefix}-lost", queue=q, meta={"sw": "1"})) == []
    if first == "configured":
        await engine.admin.configure_queue(q, QueueConfig())
    else:
        await engine.admin.pause(q, False)
    result = await engine.enqueue_batch([job(q, "k", id="held", meta={"sw": "1"})], now_ms=t0 + 1)
    assert result.created_queues == [], "the configuration created the queue, not this batch"
    assert await engine.jobs.claim(q, 5, worker="w", now_ms=t0 + 2) == []
    info = await engine.reads.get_job(q, "held")
    assert info is not None
    assert (info.state, info.attempt) == ("parked", 0)


async def test_switches_redis_lost_come_back_before_the_first_job_of_a_queue_written_again(
    engine: Engine, prefix: str, job: Job, t0: int, lift_after: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis lost its data, the switches with it. The kept ones put back by the hook an enqueue calls for a
    queue Redis does not know (the relay's: it reads them from Consul) hold that very batch: the queue was
    listed before the hook ran, and the restore gives every listed queue its list. Restored once: from then
    on Redis's switches are those in force (the mark), and the mark is no switch to list or lift."""
    q = f"{prefix}.wiped"
    poison = Switch(f"{prefix}-poison", queue=q, meta={"sw": "1"})
    await _set(engine, lift_after, poison)
    await engine.enqueue_batch([job(q, "k", id="before")], now_ms=t0)
    await lose_queue(engine, q)
    await engine._client.delete(SWITCHES_KEY)  # lost with the rest
    assert not await engine.admin.switches_restored()
    put_back: list[list[str]] = []

    async def hook(queues: list[str]) -> list[str]:
        assert queues == [q]
        put_back.append(await engine.admin.restore_switches([poison]))
        return []

    async def not_yet(*_: object, **__: object) -> None:
        """The engine registers the queues a batch created after it (switches again among them): a claim
        may come first — the switches must hold the jobs from the write on."""

    monkeypatch.setattr(engine.core, "before_new_queues", hook)
    monkeypatch.setattr(core, "ANNOUNCE_EVERY_S", 0.0)  # this engine announces the queue again
    with monkeypatch.context() as m:
        m.setattr(engine.core, "register", not_yet)
        result = await engine.enqueue_batch([job(q, "k", id="held", meta={"sw": "1"})], now_ms=t0 + 1)
    assert put_back == [[poison.name]]
    assert result.created_queues == [q]
    assert await engine.jobs.claim(q, 5, worker="w", now_ms=t0 + 2) == []
    info = await engine.reads.get_job(q, "held")
    assert info is not None
    assert (info.state, info.attempt) == ("parked", 0)
    assert await engine.admin.switches_restored()
    assert [s.name for s in await engine.admin.switches()] == [poison.name]
    with pytest.raises(SwitchNotFound):
        await engine.admin.lift_switch(".")
    assert await engine.admin.switches_restored()
    assert await engine.admin.restore_switches([poison]) == [], "one Redis has is left as it is"


def test_a_switch_refuses_what_it_cannot_match() -> None:
    with pytest.raises(Exception, match="name"):
        Switch("has space")
    with pytest.raises(Exception, match="action"):
        Switch("x", action="pause")  # type: ignore[arg-type]
    with pytest.raises(Exception, match="meta"):
        Switch("x", meta={"Bad-Key": "v"})
    with pytest.raises(Exception, match="every job of every queue"):
        Switch("x")


async def test_a_redis_refusing_writes_holds_an_enqueue_before_its_switches_are_read(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """The enqueue's first round trip (list the queue, read the switches: a pipeline) meets a Redis that
    refuses every write for now: an outage to wait out (BackendUnavailable), not a queue refusing the
    batch — redis-py's pipeline wording around the server's reply must not hide its kind."""
    client = engine._client
    if isinstance(client, RedisCluster):
        pytest.skip("one Redis's setting")
    await client.config_set("min-replicas-to-write", 5)  # NOREPLICAS for every write
    try:
        with pytest.raises(BackendUnavailable, match="NOREPLICAS"):
            await engine.enqueue_batch([job(q, "k", id="a")], now_ms=t0)
    finally:
        await client.config_set("min-replicas-to-write", 0)
    assert (await engine.enqueue_batch([job(q, "k", id="a")], now_ms=t0)).count("stored") == 1
