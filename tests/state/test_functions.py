"""How the transitions reach Redis: one Functions library, loaded once and called by ``FCALL``
(``jqengine.core.Functions``): loaded again where Redis lost it, beside another jobq version's, one call
a round trip on a Cluster, and no call sees another's per-call state."""

from __future__ import annotations

from collections.abc import Callable

from redis.asyncio.cluster import RedisCluster

from jqcore.envelope import Envelope
from jqengine import Engine
from jqengine.scripts import function_library


async def _libraries(engine: Engine) -> set[str]:
    """The libraries every primary has (a Cluster's: those all of them have)."""
    listed = await engine._client.function_list()
    per_node = listed.values() if isinstance(listed, dict) else [listed]
    names = [{bytes(lib[1]).decode() for lib in node} for node in per_node]
    return set.intersection(*names)


async def test_a_lost_library_is_loaded_again_and_the_call_runs_once(
    engine: Engine, q: str, job: Callable[..., Envelope]
) -> None:
    """On a Cluster only the queue's node lost it (one that joined empty): the others answer the load
    that they have it."""
    await engine.enqueue_batch([job(q) for _ in range(2)])
    client = engine._client
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(engine.core.keys_for("claim", q)[0])
        await client.execute_command("FUNCTION FLUSH", target_nodes=node)
    else:
        await client.function_flush()  # a Redis restarted without it, or wiped
    assert function_library().name not in await _libraries(engine)
    claimed = await engine.jobs.claim(q, 1, lease_ms=30_000)
    assert len(claimed) == 1, "claimed once, by the call sent again"
    assert function_library().name in await _libraries(engine)
    depth = await engine.reads.depth(q)
    assert (depth.running, depth.pending) == (1, 1)


async def test_another_versions_library_stays_loaded_and_callable_beside_this_ones(
    engine: Engine, q: str, job: Callable[..., Envelope]
) -> None:
    ours = function_library()
    other = ours.text.replace(ours.name, "jobq_0therversion0")
    await engine._client.function_load(other, replace=True)
    await engine._client.function_flush()
    await engine._client.function_load(other, replace=True)
    await engine.enqueue_batch([job(q) for _ in range(2)])
    assert await _libraries(engine) == {ours.name, "jobq_0therversion0"}
    keys = engine.core.keys_for("job_fields", q)
    reply = await engine._client.fcall_ro(
        "jobq_0therversion0_job_fields", len(keys), *keys, 0, 1, "state", "x"
    )
    assert reply == [None]  # the other version answers its own callers
    assert len(await engine.jobs.claim(q, 2, lease_ms=30_000)) == 2


async def test_a_call_does_not_see_the_state_of_the_call_before_it(
    engine: Engine, prefix: str, job: Callable[..., Envelope]
) -> None:
    """kind_limit keeps a kind's limit for the call: one queue's must not limit the next call's queue."""
    limited, free = f"{prefix}.limited", f"{prefix}.free"
    await engine.admin.configure_kind("k", queues=[limited], concurrency=1)
    await engine.enqueue_batch([job(q, kind="k") for q in (limited, limited, free, free)])
    assert len(await engine.jobs.claim(limited, 2, lease_ms=30_000)) == 1
    assert len(await engine.jobs.claim(free, 2, lease_ms=30_000)) == 2


async def test_on_a_cluster_a_call_is_one_round_trip(
    engine: Engine, q: str, job: Callable[..., Envelope]
) -> None:
    """redis-py asks a Cluster node where an FCALL's keys are (``COMMAND GETKEYS``) unless told, as
    ``jqengine.redisconn.Cluster`` tells it."""
    if not isinstance(engine._client, RedisCluster):
        return

    async def asked() -> int:
        stats = await engine._client.info("commandstats", target_nodes=RedisCluster.ALL_NODES)
        return sum(int(s.get("cmdstat_command|getkeys", {}).get("calls", 0)) for s in stats.values())

    await engine.enqueue_batch([job(q)])
    before = await asked()
    for _ in range(5):
        await engine.reads.depth(q)
        await engine.jobs.claim(q, 1, lease_ms=30_000)
    assert await asked() == before
