"""Job, queue, dead-letter, job-type and worker endpoints of the gateway against the real Redis.

The relay is not part of these tests: jobs are put into Redis through the engine (as the relay does)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from jqengine import Engine


async def test_get_cancel_and_replay_a_job(gw: Any, engine: Engine, put: Any) -> None:
    q = gw.queue
    job_id = await put(q, args={"x": 1}, meta={"tenant": "a"})
    status, body = await gw.call("GET", f"/v1/queues/{q}/jobs/{job_id}")
    assert status == 200
    assert (body["state"], body["args"], body["meta"]) == ("pending", {"x": 1}, {"tenant": "a"})
    status, body = await gw.call("DELETE", f"/v1/queues/{q}/jobs/{job_id}")
    assert (status, body["outcome"]) == (200, "canceled")
    status, body = await gw.call("DELETE", f"/v1/queues/{q}/jobs/{job_id}")
    assert (status, body["outcome"], body["changed"]) == (200, "already_canceled", False), "idempotent"
    status, body = await gw.call("DELETE", f"/v1/queues/{q}/jobs/not-yet-here")
    assert (status, body["outcome"]) == (200, "tombstoned"), "a job still in Kafka is unscheduled too"
    status, body = await gw.call("POST", f"/v1/queues/{q}/jobs/{job_id}/replay")
    assert status == 202
    assert body["replay_of"] == job_id
    assert body["ids"][0] != job_id
    status, body = await gw.call("GET", f"/v1/queues/{q}/jobs/nope")
    assert (status, body["error"]["code"]) == (404, "job_not_found")


async def test_queue_config_depth_by_filter_and_pause(gw: Any, engine: Engine, put: Any) -> None:
    q = gw.queue
    status, body = await gw.call(
        "PUT", f"/v1/queues/{q}", json={"filter_keys": ["region", "tier"], "lease_ms": 5000}
    )
    assert status == 200, body
    for region, tier in (("eu", "a"), ("eu", "b"), ("us", "a")):
        await put(q, meta={"region": region, "tier": tier})
    status, body = await gw.call("GET", f"/v1/queues/{q}?meta.region=eu")
    assert status == 200
    assert (body["depth"]["pending"], body["depth"]["by_filter"]) == (3, 2)
    assert body["config"]["filter_keys"] == ["region", "tier"]
    assert body["topic"] == gw.topic
    status, body = await gw.call("GET", f"/v1/queues/{q}?meta.region=eu&meta.tier=a")
    assert (status, body["depth"]["by_filter"]) == (200, 1), "every pair must match"
    status, body = await gw.call("GET", f"/v1/queues/{q}?meta.region=eu&meta.region=us")
    assert (status, body["error"]["code"]) == (400, "filter_invalid")
    status, body = await gw.call("GET", f"/v1/queues/{q}?meta.region=eu&meta.plan=x")
    assert (status, body["error"]["code"]) == (400, "filter_key_not_indexed")
    status, body = await gw.call("PUT", f"/v1/queues/{q}", json={"mode": "exclusive"})
    assert (status, body["error"]["code"]) == (400, "queue_config_invalid")
    status, body = await gw.call("PUT", f"/v1/queues/{q}", json={"lease_ms": "long", "colour": 1})
    assert (status, body["error"]["code"]) == (400, "body_invalid")
    assert {f["field"] for f in body["error"]["fields"]} == {"lease_ms", "colour"}
    status, body = await gw.call("PUT", f"/v1/queues/{q}", json={"paused": True, "filter_keys": ["region"]})
    assert status == 200
    status, body = await gw.call("POST", f"/v1/queues/{q}/claims", json={"n": 5})
    assert (status, body["jobs"]) == (200, []), "a paused queue hands nothing out"


async def test_worker_api_claim_extend_complete_fail_and_stale_writes(
    gw: Any, engine: Engine, put: Any
) -> None:
    q = gw.queue
    a = await put(q, priority=1, max_attempts=1)
    b = await put(q, priority=2)
    status, body = await gw.call("POST", f"/v1/queues/{q}/claims", json={"n": 1, "lease_ms": 10_000})
    assert status == 200
    (job,) = body["jobs"]
    assert (job["id"], job["attempt"]) == (a, 1)
    owner = {"attempt": 1, "token": job["token"]}
    status, _ = await gw.call("POST", f"/v1/queues/{q}/jobs/{a}/extend", json={**owner, "lease_ms": 20_000})
    assert status == 200
    status, body = await gw.call(
        "POST", f"/v1/queues/{q}/jobs/{a}/complete", json={"attempt": 1, "token": "forged", "result": 1}
    )
    assert (status, body["error"]["code"]) == (409, "lease_stale")
    status, _ = await gw.call(
        "POST", f"/v1/queues/{q}/jobs/{a}/complete", json={**owner, "result": {"ok": 1}}
    )
    assert status == 200
    status, body = await gw.call("GET", f"/v1/queues/{q}/jobs/{a}")
    assert (body["state"], body["result"]) == ("completed", '{"ok":1}')

    status, body = await gw.call("POST", f"/v1/queues/{q}/claims", json={"n": 10, "wait_ms": 5000})
    (job,) = body["jobs"]
    assert job["id"] == b
    status, body = await gw.call(
        "POST",
        f"/v1/queues/{q}/jobs/{b}/fail",
        json={"attempt": 1, "token": job["token"], "error": "boom", "permanent": True},
    )
    assert (status, body["outcome"]) == (200, "errored")
    status, body = await gw.call("GET", f"/v1/queues/{q}/dead")
    assert [j["id"] for j in body["jobs"]] == [b]
    status, body = await gw.call("POST", f"/v1/queues/{q}/dead/retry", json={"ids": [b]})
    assert (status, body["retried"]) == (200, 1)
    status, body = await gw.call("GET", f"/v1/queues/{q}/jobs/{b}")
    assert body["state"] == "pending"


async def test_long_poll_claim_wakes_when_work_arrives(
    gw: Any, engine: Engine, eventually: Callable[..., Awaitable[Any]], put: Any
) -> None:
    import asyncio

    q = gw.queue
    blocked_before = int((await engine._client.info("clients"))["blocked_clients"])
    claim = asyncio.create_task(gw.call("POST", f"/v1/queues/{q}/claims", json={"n": 1, "wait_ms": 20_000}))

    async def blocked() -> int:
        return int((await engine._client.info("clients"))["blocked_clients"])

    # the claim found nothing and waits in Redis: only Redis knows (no step in this process to wait on)
    await eventually(blocked, lambda n: n > blocked_before)
    job_id = await put(q)
    status, body = await asyncio.wait_for(claim, 25)
    assert status == 200
    assert [j["id"] for j in body["jobs"]] == [job_id]


async def test_dead_purge_and_kinds(gw: Any, engine: Engine) -> None:
    q = gw.queue
    status, body = await gw.call(
        "PUT", f"/v1/kinds/{q}.report", json={"concurrency": 1, "max_attempts": 2, "delivery": "at_most_once"}
    )
    assert status == 200, body
    status, body = await gw.call("PUT", f"/v1/kinds/{q}.report", json={"delivery": "sometimes"})
    assert (status, body["error"]["code"]) == (400, "body_invalid")
    # found by schemathesis: a queue name the queue routes refuse reached Redis, then Consul refused the
    # key and the gateway answered 503
    status, body = await gw.call("PUT", f"/v1/kinds/{q}.report", json={"queues": [q, "k\u00f6\u0003D"]})
    assert (status, body["error"]["code"]) == (400, "body_invalid"), body
    assert "queues" in body["error"]["message"]
    status, body = await gw.call("DELETE", f"/v1/queues/{q}/dead", json={"limit": 10})
    assert (status, body["purged"]) == (200, 0)


async def test_dead_list_paging_rejects_out_of_range_values(gw: Any) -> None:
    """Found by schemathesis: an offset beyond 64 bits reached Redis and came back as a 500."""
    q = gw.queue
    for query in ("offset=186384818263345469283385737216", "offset=-1", "limit=0", "limit=x"):
        status, body = await gw.call("GET", f"/v1/queues/{q}/dead?{query}")
        assert (status, body["error"]["code"]) == (400, "query_invalid"), query


async def test_job_search_without_history_tables_says_so(gw: Any) -> None:
    status, body = await gw.call("GET", "/v1/jobs?queue=" + gw.queue)
    assert (status, body["error"]["code"]) == (404, "history_missing")
    status, body = await gw.call("GET", f"/v1/queues/{gw.queue}/jobs/never-there")
    assert (status, body["error"]["code"]) == (404, "job_not_found"), "no archive: a plain 404"
