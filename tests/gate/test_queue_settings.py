"""Timestone's queue settings at the real gateway: ``enqueue_blocked`` refuses new jobs with 423 while the
neighbouring queues take theirs, ``default_delay_ms`` is configured like every field, and each change
(queue or job type) is kept in Consul as well as in Redis. With Redis unreachable the enqueue is accepted
(``test_bad_input``'s ``test_without_redis_the_exclusivity_check_is_skipped_and_the_job_accepted`` reads
the same cached configuration, which is then None)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from jqcore.settings.pipeline import CronSettings
from jqcore.settings.servers import ConsulSettings
from jqengine import Engine
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores.config import ConfigStore, KindEntry
from jqstack.manager import Endpoints


@pytest.fixture
async def kept(endpoints: Endpoints, cron_settings: CronSettings) -> AsyncIterator[ConfigStore]:
    """What this test's gateway keeps in Consul (its own KV root, deleted afterwards)."""
    client = consul_client(ConsulSettings(addr=endpoints.consul_addr))
    yield ConfigStore(client, cron_settings.kv_prefix)
    await client.kv.delete(cron_settings.kv_prefix + "/", recurse=True)
    await close_consul(client)


async def test_a_blocked_queue_answers_423_its_neighbours_202_and_changes_are_kept_in_consul(
    gw: Any, engine: Engine, kept: ConfigStore, topic_end: Callable[[str], int]
) -> None:
    q, neighbour = gw.queue, f"{gw.queue}.next"
    status, body = await gw.call("PATCH", f"/v1/queues/{q}", json={"enqueue_blocked": True})
    assert status == 200, body
    assert body["config"]["enqueue_blocked"] is True
    status, body = await gw.call("POST", f"/v1/queues/{q}/jobs", json={"jobs": [{"kind": "k"}] * 3})
    assert status == 423, body
    assert body["error"]["code"] == "queue_blocked"
    assert "enqueue_blocked" in body["error"]["message"]
    status, body = await gw.call("POST", f"/v1/queues/{neighbour}/jobs", json={"kind": "k"})
    assert status == 202, body
    # a graph goes in whole or not at all: its own queue blocked, or any node's
    graph = {"id": f"{q}-g", "queue": q, "nodes": [{"name": "a", "kind": "k"}]}
    status, body = await gw.call("POST", "/v1/graphs", json=graph)
    assert (status, body["error"]["code"]) == (423, "queue_blocked"), body
    assert "the graph's queue" in body["error"]["message"]
    graph = {"id": f"{q}-h", "queue": neighbour, "nodes": [{"name": "a", "kind": "k"}, {"name": "b",
             "kind": "k", "queue": q, "parents": ["a"]}]}  # fmt: skip
    status, body = await gw.call("POST", "/v1/graphs", json=graph)
    assert (status, body["error"]["code"]) == (423, "queue_blocked"), body
    assert "node 'b'" in body["error"]["message"]
    assert topic_end(gw.topic) == 1, "only the neighbour's job was produced"

    configs, unreadable = await kept.queue_configs()
    assert unreadable == []
    assert configs[q] == await engine.reads.queue_config(q)
    assert configs[q].enqueue_blocked

    # the gateway that lifted the flag forgot its cached configuration: the next job goes in
    status, body = await gw.call("PUT", f"/v1/queues/{q}", json={"default_delay_ms": 60_000})
    assert status == 200, body
    assert (body["config"]["enqueue_blocked"], body["config"]["default_delay_ms"]) == (False, 60_000)
    status, body = await gw.call("POST", f"/v1/queues/{q}/jobs", json={"kind": "k"})
    assert status == 202, body
    assert (await kept.queue_configs())[0][q].default_delay_ms == 60_000
    for bad in (-1, 31 * 86_400_000, "soon"):
        status, body = await gw.call("PATCH", f"/v1/queues/{q}", json={"default_delay_ms": bad})
        assert (status, body["error"]["code"]) == (400, "body_invalid"), body
    assert (await engine.reads.queue_config(q)).default_delay_ms == 60_000, "a refused change changed nothing"

    # job types: one queue's options, then every queue's (which replace the per-queue ones, as in Redis)
    kind = f"{q}.k"
    status, body = await gw.call("PUT", f"/v1/kinds/{kind}", json={"queues": [q], "max_attempts": 3})
    assert status == 200, body
    entries, _ = await kept.kind_entries()
    options = {"concurrency": None, "max_attempts": 3, "delivery": "at_least_once", "priority": None}
    assert [(e.kind, e.scope, e.options) for e in entries] == [(kind, q, {**options, "ignore_result": False})]
    every = {"concurrency": 2, "ignore_result": True}
    status, body = await gw.call("PUT", f"/v1/kinds/{kind}", json=every)
    assert status == 200, body
    (entry,) = (await kept.kind_entries())[0]
    assert entry == KindEntry(kind, "*", {**options, "max_attempts": None, **every}, entry.index)
