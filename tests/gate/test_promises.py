"""API promises of the gateway against the real Redis: retried worker writes and replays are idempotent,
lease defaults apply when a claimer asks for none, a partial queue update keeps the rest, job types can be
read back, and a claim by a key the queue does not index is a 400.

Jobs are put into Redis through the engine (as the relay does); the relay is not part of these tests."""

from __future__ import annotations

from typing import Any

from jqcore.envelope import new_envelope
from jqengine import Engine


async def claim(gw: Any, **body: Any) -> dict[str, Any]:
    status, got = await gw.call("POST", f"/v1/queues/{gw.queue}/claims", json={"n": 1, **body})
    assert status == 200, got
    (job,) = got["jobs"]
    return dict(job)


async def test_retried_complete_and_fail_get_the_same_answer(gw: Any, engine: Engine, put: Any) -> None:
    q = gw.queue
    a = await put(q, priority=1)
    b = await put(q, priority=2, max_attempts=3)
    job = await claim(gw)
    owner = {"attempt": job["attempt"], "token": job["token"]}
    for _ in range(2):  # the first answer was lost; the worker sends the same write again
        status, body = await gw.call("POST", f"/v1/queues/{q}/jobs/{a}/complete", json={**owner, "result": 1})
        assert (status, body["state"]) == (200, "completed")
    status, body = await gw.call(
        "POST", f"/v1/queues/{q}/jobs/{a}/complete", json={"attempt": job["attempt"], "token": "other"}
    )
    assert (status, body["error"]["code"]) == (409, "lease_stale"), "a different pair is still refused"

    job = await claim(gw)
    assert job["id"] == b
    fail = {"attempt": 1, "token": job["token"], "error": "boom", "retry_in_ms": 60_000}
    answers = [await gw.call("POST", f"/v1/queues/{q}/jobs/{b}/fail", json=fail) for _ in range(2)]
    assert [(s, body["outcome"]) for s, body in answers] == [(200, "retry"), (200, "retry")]
    status, body = await gw.call("GET", f"/v1/queues/{q}/jobs/{b}")
    assert (body["state"], body["attempt"], len(body["history"])) == ("delayed", 1, 1), "one failure recorded"


async def test_lease_defaults_apply_when_the_claimer_asks_for_none(gw: Any, engine: Engine, put: Any) -> None:
    q = gw.queue
    status, _ = await gw.call("PUT", f"/v1/queues/{q}", json={"lease_ms": 4_000})
    assert status == 200
    await put(q, priority=1, lease_ms=90_000)
    await put(q, priority=2)
    own_lease = await claim(gw)
    queue_lease = await claim(gw)
    assert (own_lease["lease_ms"], queue_lease["lease_ms"]) == (90_000, 4_000)
    status, body = await gw.call(
        "POST",
        f"/v1/queues/{q}/jobs/{queue_lease['id']}/extend",
        json={"attempt": 1, "token": queue_lease["token"]},
    )
    assert status == 200
    assert body["lease_deadline_ms"] - queue_lease["lease_deadline_ms"] < 4_000 + 60_000
    await put(q, priority=3, lease_ms=90_000)
    asked = await claim(gw, lease_ms=1_000)
    assert asked["lease_ms"] == 1_000, "a claimer that asks for a lease gets it"


async def test_patch_changes_one_setting_and_put_refuses_to_drop_exclusivity(gw: Any) -> None:
    q = gw.queue
    full = {"mode": "exclusive", "excl_key": "account", "lease_ms": 5_000, "filter_keys": ["region"]}
    status, _ = await gw.call("PUT", f"/v1/queues/{q}", json=full)
    assert status == 200
    status, body = await gw.call("PATCH", f"/v1/queues/{q}", json={"paused": True})
    assert status == 200, body
    config = body["config"]
    assert (config["paused"], config["mode"], config["excl_key"], config["lease_ms"]) == (
        True,
        "exclusive",
        "account",
        5_000,
    )
    assert config["filter_keys"] == ["region"]
    status, body = await gw.call("GET", f"/v1/queues/{q}")
    assert body["config"] == config
    status, body = await gw.call("PUT", f"/v1/queues/{q}", json={"paused": False})
    assert (status, body["error"]["code"]) == (409, "queue_config_would_reset")
    status, body = await gw.call("PATCH", f"/v1/queues/{q}", json={"mode": "simple", "paused": False})
    assert (status, body["config"]["mode"], body["config"]["lease_ms"]) == (200, "simple", 5_000)
    status, body = await gw.call("PATCH", f"/v1/queues/{q}", json={"dedup": "sometimes"})
    assert (status, body["error"]["code"]) == (400, "body_invalid")
    status, body = await gw.call(
        "PATCH", f"/v1/queues/{q}", json={"dedup": "finished", "dedup_window_ms": 600}
    )
    assert (status, body["config"]["dedup"], body["config"]["dedup_window_ms"]) == (200, "finished", 600)
    fair = {
        "fair_key": "tenant",
        "fair_weights": {"gold": 3},
        "fair_limits": {"noisy": 2},
        "fair_rates": {"noisy": 0.5},
    }
    status, body = await gw.call("PATCH", f"/v1/queues/{q}", json=fair)
    assert status == 200, body
    assert {k: body["config"][k] for k in fair} == fair
    for bad, code in (
        ({"fair_weights": {"gold": 0}}, "queue_config_invalid"),
        ({"fair_rates": {"noisy": 0}}, "queue_config_invalid"),
        ({"fair_rates": {"noisy": "1/s"}}, "body_invalid"),
    ):
        status, body = await gw.call("PATCH", f"/v1/queues/{q}", json=bad)
        assert (status, body["error"]["code"]) == (400, code), bad
    status, body = await gw.call(
        "PATCH",
        f"/v1/queues/{q}",
        json={"fair_key": "", "fair_weights": {}, "fair_limits": {}, "fair_rates": {}},
    )
    assert (status, body["config"]["fair_key"]) == (200, None), body


async def test_claim_by_an_unindexed_key_is_a_400(gw: Any, engine: Engine, put: Any) -> None:
    q = gw.queue
    await gw.call("PUT", f"/v1/queues/{q}", json={"filter_keys": ["region"]})
    await put(q, meta={"region": "eu", "tier": "gold"})
    status, body = await gw.call("POST", f"/v1/queues/{q}/claims", json={"filter": {"tier": "gold"}})
    assert (status, body["error"]["code"]) == (400, "filter_key_not_indexed")
    job = await claim(gw, filter={"region": "eu"})
    assert job["meta"] == {"region": "eu", "tier": "gold"}


async def test_job_types_can_be_read_back(gw: Any, prefix: str) -> None:
    kind = f"{prefix}.mail"
    status, body = await gw.call("GET", f"/v1/kinds/{kind}")
    assert (status, body["error"]["code"]) == (404, "kind_not_found")
    status, _ = await gw.call(
        "PUT", f"/v1/kinds/{kind}", json={"queues": [gw.queue], "concurrency": 2, "delivery": "at_most_once"}
    )
    assert status == 200
    status, body = await gw.call("GET", f"/v1/kinds/{kind}")
    assert status == 200
    assert body["queues"][gw.queue] == {
        "concurrency": 2,
        "max_attempts": None,
        "delivery": "at_most_once",
        "priority": None,
        "ignore_result": False,
        "running": 0,
    }
    status, body = await gw.call("GET", "/v1/kinds")
    assert kind in {k["kind"] for k in body["kinds"]}
    quiet = {"queues": [gw.queue], "priority": 0, "ignore_result": True}  # per-kind defaults (issue 37)
    status, _ = await gw.call("PUT", f"/v1/kinds/{kind}", json=quiet)
    assert status == 200
    status, body = await gw.call("GET", f"/v1/kinds/{kind}")
    assert (body["queues"][gw.queue]["priority"], body["queues"][gw.queue]["ignore_result"]) == (0, True)
    status, body = await gw.call("PUT", f"/v1/kinds/{kind}", json={"priority": "soon"})
    assert (status, body["error"]["code"]) == (400, "body_invalid")


async def test_replay_with_an_idempotency_key_makes_one_new_job(gw: Any, engine: Engine, put: Any) -> None:
    q = gw.queue
    job_id = await put(q)
    await gw.call("DELETE", f"/v1/queues/{q}/jobs/{job_id}")
    headers = {"Idempotency-Key": "replay-once"}
    status, first = await gw.call("POST", f"/v1/queues/{q}/jobs/{job_id}/replay", headers=headers)
    assert status == 202
    new_id = first["ids"][0]
    await engine.enqueue_batch([new_envelope(q, "k", None, id=new_id)])  # as the relay would, meanwhile
    status, second = await gw.call("POST", f"/v1/queues/{q}/jobs/{job_id}/replay", headers=headers)
    assert (status, second["ids"], second["changed"]) == (200, [new_id], False)
    status, other = await gw.call(
        "POST", f"/v1/queues/{q}/jobs/{job_id}/replay", headers={"Idempotency-Key": "another"}
    )
    assert status == 202
    assert other["ids"][0] != new_id
