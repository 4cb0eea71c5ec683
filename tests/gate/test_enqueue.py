"""POST /v1/queues/{queue}/jobs against the real broker: 202 only after Kafka has the jobs, bad input refused
whole with every field named, auth, idempotency keys, routing, Kafka unreachable ⇒ 503."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest

from jqcore.envelope import content_id, decode
from jqcore.routing import Route, RoutingSettings
from jqruntime.stores.config import ConfigStore
from kafkagate import state
from kafkagate.main import GateService


async def test_one_job_is_in_kafka_when_the_202_comes(
    gw: Any, topic_reader: Callable[..., list[Any]]
) -> None:
    status, body = await gw.call(
        "POST",
        f"/v1/queues/{gw.queue}/jobs",
        json={"kind": "email.send", "args": {"to": "a@example.com", "n": 1.5e300}, "meta": {"tenant": "t1"}},
    )
    assert status == 202, body
    (job_id,) = body["ids"]
    assert body["jobs"][0]["topic"] == gw.topic
    (msg,) = topic_reader(gw.topic, 1)
    env = decode(msg.value())
    assert (env.id, env.queue, env.kind, dict(env.meta)) == (job_id, gw.queue, "email.send", {"tenant": "t1"})
    assert env.args == {"to": "a@example.com", "n": 1.5e300}
    assert msg.key() == job_id.encode()
    assert dict(msg.headers() or [])["jobq-queue"] == gw.queue.encode()
    assert (msg.partition(), msg.offset()) == (body["jobs"][0]["partition"], body["jobs"][0]["offset"])


async def test_concurrent_enqueues_each_answer_their_own_jobs_record(
    gw: Any, topic_reader: Callable[..., list[Any]]
) -> None:
    """The producer's delivery thread hands a round's settled calls to the event loop together: each of
    many requests in flight at once gets its own job's partition and offset."""
    calls = [
        gw.call("POST", f"/v1/queues/{gw.queue}/jobs", json={"kind": "k", "id": f"c-{i}"}) for i in range(64)
    ]
    answers = await asyncio.gather(*calls)
    assert [status for status, _ in answers] == [202] * 64, answers
    placed = {
        body["ids"][0]: (body["jobs"][0]["partition"], body["jobs"][0]["offset"]) for _, body in answers
    }
    assert sorted(placed) == sorted(f"c-{i}" for i in range(64))
    records = topic_reader(gw.topic, 64)
    assert {decode(m.value()).id: (m.partition(), m.offset()) for m in records} == placed


async def test_batch_and_ndjson_and_exclusive_keys(gw: Any, topic_reader: Callable[..., list[Any]]) -> None:
    jobs = [{"kind": "k", "args": [i], "excl": "user-7" if i % 2 else None} for i in range(20)]
    status, body = await gw.call("POST", f"/v1/queues/{gw.queue}/jobs", json={"jobs": jobs})
    assert status == 202, body
    ndjson = b"\n".join(orjson.dumps({"kind": "k", "id": f"nd-{i}", "delay_ms": 60_000}) for i in range(5))
    status, nd = await gw.call(
        "POST",
        f"/v1/queues/{gw.queue}/jobs",
        data=ndjson,
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert status == 202, nd
    assert nd["ids"] == [f"nd-{i}" for i in range(5)]
    msgs = topic_reader(gw.topic, 25)
    assert {decode(m.value()).id for m in msgs} == set(body["ids"]) | set(nd["ids"])
    excl_partitions = {m.partition() for m in msgs if m.key() == b"user-7"}
    assert len(excl_partitions) == 1, "one exclusivity value lands in one partition"
    delayed = [decode(m.value()) for m in msgs if decode(m.value()).id.startswith("nd-")]
    assert all(e.run_at is not None and e.run_at - e.enqueued_at == 60_000 for e in delayed)


async def test_bad_jobs_refuse_the_whole_request_and_name_each_field(
    gw: Any, topic_end: Callable[[str], int]
) -> None:
    before = topic_end(gw.topic)
    jobs: list[Any] = [
        {"kind": "ok"},
        {"kind": "ok", "priority": "high"},
        {"args": 1},
        {"kind": "ok", "colour": "red"},
        {"kind": "ok", "run_at": 1, "delay_ms": 5},
        "not an object",
    ]
    status, body = await gw.call("POST", f"/v1/queues/{gw.queue}/jobs", json={"jobs": jobs})
    assert status == 400
    assert body["error"]["code"] == "envelope_invalid"
    fields = {f["field"] for f in body["error"]["fields"]}
    assert {"jobs[1].priority", "jobs[2].kind", "jobs[3].colour", "jobs[4].delay_ms", "jobs[5].$"} <= fields
    assert not any(f.startswith("jobs[0]") for f in fields)
    for raw, code in [(b"{not json", "body_not_json"), (b"", "body_empty"), (b'{"jobs": 3}', "body_invalid")]:
        status, body = await gw.call(
            "POST", f"/v1/queues/{gw.queue}/jobs", data=raw, headers={"Content-Type": "application/json"}
        )
        assert (status, body["error"]["code"]) == (400, code)
    status, body = await gw.call("POST", "/v1/queues/Bad Queue!/jobs", json={"kind": "k"})
    assert (status, body["error"]["code"]) == (400, "queue_invalid")
    assert topic_end(gw.topic) == before, "nothing of a refused request reached Kafka"


async def test_auth_is_required_except_for_probes(gw: Any) -> None:
    async with aiohttp.ClientSession() as anon:
        async with anon.post(f"{gw.url}/v1/queues/{gw.queue}/jobs", json={"kind": "k"}) as r:
            assert (r.status, (await r.json())["error"]["code"]) == (401, "unauthenticated")
        async with anon.post(
            f"{gw.url}/v1/queues/{gw.queue}/jobs",
            json={"kind": "k"},
            headers={"Authorization": "Bearer nope"},
        ) as r:
            assert (r.status, (await r.json())["error"]["code"]) == (401, "token_invalid")
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
            async with anon.get(gw.url + path) as r:
                assert r.status == 200, path


async def test_idempotency_key_gives_the_same_ids_and_refuses_another_body(gw: Any) -> None:
    path, key = f"/v1/queues/{gw.queue}/jobs", {"Idempotency-Key": f"order-{gw.queue}"}
    body = {"jobs": [{"kind": "charge", "args": {"cents": 100}}, {"kind": "receipt"}]}
    s1, first = await gw.call("POST", path, json=body, headers=key)
    s2, second = await gw.call("POST", path, json=body, headers=key)
    assert (s1, s2) == (202, 202)
    assert first["ids"] == second["ids"]
    s3, third = await gw.call(
        "POST", path, json={"jobs": [{"kind": "charge", "args": {"cents": 999}}]}, headers=key
    )
    assert (s3, third["error"]["code"]) == (409, "idempotency_key_reused")


async def test_unrouted_queue_and_missing_topic(
    prefix: str, make_gate: Callable[..., GateService], token: str
) -> None:
    routing = RoutingSettings(
        routes=[Route(queues=f"{prefix}.a*", topic=f"{prefix}.absent")], default_topic=""
    )
    async with (
        make_gate(routing) as svc,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
    ):
        async with http.post(f"{svc.url}/v1/queues/{prefix}.zzz/jobs", json={"kind": "k"}) as r:
            assert (r.status, (await r.json())["error"]["code"]) == (404, "queue_unrouted")
        async with http.post(f"{svc.url}/v1/queues/{prefix}.a1/jobs", json={"kind": "k"}) as r:
            assert (r.status, (await r.json())["error"]["code"]) == (503, "topic_missing")
        async with http.get(f"{svc.url}/readyz") as r:
            body = await r.json()
            assert (r.status, body["error"]["code"]) == (503, "kafka_not_ready")
            assert f"{prefix}.absent" in body["error"]["topics"]


async def test_kafka_unreachable_is_a_503_with_retry_after(
    prefix: str, make_gate: Callable[..., GateService], token: str
) -> None:
    """No broker listens on the address: the request must fail (never a 2xx) once the produce times out."""
    routing = RoutingSettings(default_topic=f"{prefix}.jobs")
    dead = make_gate(routing, bootstrap="127.0.0.1:1", produce_timeout_ms=1000)
    auth = {"Authorization": f"Bearer {token}"}
    async with dead as svc, aiohttp.ClientSession(headers=auth) as http:
        r = await http.post(f"{svc.url}/v1/queues/{prefix}.q/jobs", json={"kind": "k"})
        body = await r.json()
        assert r.status == 503, body
        assert body["error"]["code"] in ("kafka_unavailable", "topic_missing")
        assert r.headers["Retry-After"] == "1"


async def test_client_prefers_its_own_az_and_fails_over_without_loss_or_duplicates(
    prefix: str,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    token: str,
    topic_reader: Callable[..., list[Any]],
    topic_end: Callable[[str], int],
) -> None:
    from jqruntime.client import Gateway, JobqClient

    topic = make_topic("jobs")
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    gate_a, gate_b = make_gate(routing, az="az-a"), make_gate(routing, az="az-b")
    await gate_a.start()
    await gate_b.start()
    try:
        gws = [Gateway(gate_b.url, "az-b"), Gateway(gate_a.url, "az-a")]
        async with JobqClient(gws, token, az="az-a") as client:
            zones = set()
            for i in range(20):
                body = await client.request(
                    "POST", f"/v1/queues/{prefix}.q/jobs", json={"kind": "k", "args": i}
                )
                zones.add(body["az"])
            assert zones == {"az-a"}, "the client's own zone first"
            await gate_a.stop()  # the own-zone gateway dies: the client fails over
            for i in range(20, 40):
                body = await client.request(
                    "POST", f"/v1/queues/{prefix}.q/jobs", json={"kind": "k", "args": i}
                )
                assert body["az"] == "az-b"
            ids = await client.enqueue(f"{prefix}.q", [{"kind": "k", "args": i} for i in range(40, 50)])
            assert len(ids) == 10
    finally:
        await gate_a.stop()
        await gate_b.stop()
    assert topic_end(topic) == 50, "exactly 50 records in Kafka"
    values = [decode(m.value()).args for m in topic_reader(topic, 50)]
    assert sorted(values) == list(range(50)), "every job once: nothing lost, nothing twice"


async def test_token_scopes_limit_what_a_token_may_do(
    prefix: str, make_gate: Callable[..., GateService], make_topic: Callable[..., str]
) -> None:
    from pydantic import SecretStr

    topic = make_topic("jobs")
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    tokens = [SecretStr("producer:enqueue"), SecretStr("viewer:read"), SecretStr("ops:admin+read")]
    q = f"/v1/queues/{prefix}.q"
    async with make_gate(routing, tokens=tokens) as svc, aiohttp.ClientSession() as http:

        async def call(token: str, method: str, path: str, **kw: Any) -> tuple[int, str | None]:
            async with http.request(
                method, svc.url + path, headers={"Authorization": f"Bearer {token}"}, **kw
            ) as r:
                body = await r.json()
                return r.status, body.get("error", {}).get("code") if isinstance(body, dict) else None

        assert (await call("producer", "POST", f"{q}/jobs", json={"kind": "k"}))[0] == 202
        assert await call("producer", "GET", q) == (403, "scope_missing")
        assert (await call("viewer", "GET", q))[0] == 200
        assert await call("viewer", "POST", f"{q}/jobs", json={"kind": "k"}) == (403, "scope_missing")
        assert await call("viewer", "POST", f"{q}/claims", json={}) == (403, "scope_missing")
        assert (await call("ops", "PUT", q, json={"paused": True}))[0] == 200
        assert await call("ops", "POST", f"{q}/jobs", json={"kind": "k"}) == (403, "scope_missing")


def test_unknown_scope_is_a_config_error() -> None:
    from pydantic import SecretStr

    from jqcore.errors import ConfigError
    from jqruntime.tokens import load_tokens

    with pytest.raises(ConfigError, match="unknown scope"):
        load_tokens(gate=[SecretStr("t:enqueue+everything")])


async def test_content_ids_make_identical_work_one_job(gw: Any) -> None:
    """Slack's rule: queue + kind + canonical args (+ a dedup key) → the id; per request, per job, or the
    queue's policy; an explicit id still wins. The engine's dedup then keeps one job per id."""
    path = f"/v1/queues/{gw.queue}/jobs"
    a = {"kind": "report", "args": {"user": 7, "month": "2026-11"}}
    same = {"kind": "report", "args": {"month": "2026-11", "user": 7}}  # other key order, same work
    other = {"kind": "report", "args": {"user": 8, "month": "2026-11"}}
    status, first = await gw.call("POST", path + "?id_from=content", json={"jobs": [a, same, other]})
    assert status == 202, first
    ids = first["ids"]
    assert ids[0] == ids[1] != ids[2]
    assert ids[0] == content_id(gw.queue, "report", a["args"])
    _, random_ids = await gw.call("POST", path, json={"jobs": [a, a]})
    assert random_ids["ids"][0] != random_ids["ids"][1], "random ids unless asked (queue policy: random)"
    _, keyed = await gw.call(
        "POST", path, json={"jobs": [{**a, "dedup_key": "run-1"}, {**a, "dedup_key": "run-2"}]}
    )
    assert keyed["ids"][0] not in (keyed["ids"][1], ids[0]), "a dedup key is part of the identity"
    status, body = await gw.call("PATCH", f"/v1/queues/{gw.queue}", json={"id_from": "content"})
    assert (status, body["config"]["id_from"]) == (200, "content"), body
    _, policy = await gw.call("POST", path, json=same)
    assert policy["ids"] == [ids[0]], "the queue's policy: content ids without asking"
    _, named = await gw.call("POST", path, json={**a, "id": "mine-1"})
    assert named["ids"] == ["mine-1"]
    for query, job, code in (
        ("?id_from=sometimes", a, "id_from_invalid"),
        ("", {**a, "dedup_key": ""}, "envelope_invalid"),
        ("", {**a, "dedup_key": 5}, "envelope_invalid"),
        ("", {**a, "id": "x1", "dedup_key": "k"}, "envelope_invalid"),
    ):
        status, body = await gw.call("POST", path + query, json=job)
        assert (status, body["error"]["code"]) == (400, code), (query, job, body)


async def test_the_graph_key_consul_lost_is_put_back_and_one_made_anew_taken(
    gw: Any, consul_store: ConfigStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway signs graphs with the key it read once; it checks it against Consul's every
    ``GRAPH_KEY_CHECK_S`` (0 here: at every graph), so an agent back empty gets it back and a key made anew
    meanwhile is the one it signs with next (the relays verify it)."""
    gate, where = gw.service.gate, f"{consul_store.prefix}/keys/graphs"
    held = await gate.graph_key()
    monkeypatch.setattr(state, "GRAPH_KEY_CHECK_S", 0.0)
    await consul_store.client.kv.delete(where)  # Consul came back empty
    assert await gate.graph_key() == held
    assert await consul_store.graph_key() == held, "put back"
    made_anew = b"\1" * 32
    await consul_store.client.kv.put(where, made_anew.hex())
    assert await gate.graph_key() == made_anew
