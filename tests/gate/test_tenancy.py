"""The security review's tenancy findings, each as its attack against a real gateway (Kafka, Redis,
Consul): what a token of team A (``<prefix>.teama.*``) tried on team B (``<prefix>.payments``), refused.
The authorization matrix (``tests/web/test_authz_matrix.py``) covers every route; these are the findings'
own requests, read as the review wrote them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from jqcore.graphs import Graph
from jqcore.routing import Route, RoutingSettings
from jqengine import Engine, Switch
from jqengine.admin import MAX_SWITCHES_PER_QUEUE
from jqengine.keys import SWITCHES_KEY
from jqruntime.stores import audit
from jqruntime.stores.config import ConfigStore
from jqruntime.tokens import hash_line
from kafkagate.main import GateService

A_ENQUEUE, A_ADMIN, ROOT = "a-enqueue-0123456789abcdef", "a-admin-0123456789abcdef", "root-0123456789abcdef"


@pytest.fixture
async def gate(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prefix: str,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
) -> AsyncIterator[GateService]:
    path = tmp_path / "tokens.toml"
    path.write_text(
        f'[[token]]\nname = "a-enqueue"\n{hash_line(A_ENQUEUE)}\nscopes = ["enqueue"]\n'
        f'queues = ["{prefix}.teama.*"]\n\n'
        f'[[token]]\nname = "a-admin"\n{hash_line(A_ADMIN)}\nscopes = ["read", "admin", "enqueue"]\n'
        f'queues = ["{prefix}.teama.*"]\n\n'
        f'[[token]]\nname = "root"\n{hash_line(ROOT)}\nscopes = ["read", "admin", "enqueue"]\n'
    )
    monkeypatch.setenv("JOBQ_TOKENS_FILE", str(path))
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=make_topic("jobs"))], default_topic="")
    async with make_gate(routing, tokens=[]) as service:
        yield service


async def call(gate: GateService, secret: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http:
        headers = {"Authorization": f"Bearer {secret}"}
        async with http.request(method, gate.url + path, headers=headers, json=body) as r:
            return r.status, await r.json()


async def test_c1_an_enqueue_token_cannot_smuggle_a_graph_as_a_job(gate: GateService, prefix: str) -> None:
    smuggled = {
        "kind": "jobq.graph",
        "args": {
            "id": "g-1",
            "queue": f"{prefix}.payments",
            "nodes": [{"name": "a", "kind": "refund.issue"}],
        },
    }
    status, body = await call(gate, A_ENQUEUE, "POST", f"/v1/queues/{prefix}.teama.jobs/jobs", smuggled)
    assert (status, body["error"]["code"]) == (400, "kind_reserved"), body
    schedule = {
        "every_s": 60,
        "queue": f"{prefix}.teama.jobs",
        "kind": "jobq.graph",
        "args": smuggled["args"],
    }
    status, body = await call(gate, A_ADMIN, "PUT", f"/v1/cron/{prefix}-smuggle", schedule)
    assert (status, body["error"]["code"]) == (400, "cron_invalid"), body
    assert "jobq" in body["error"]["message"]


async def test_m4_a_graph_id_belongs_to_its_home_queue(
    gate: GateService, engine: Engine, prefix: str
) -> None:
    squatted = Graph(f"{prefix}-nightly", queue=f"{prefix}.teama.jobs")
    squatted.add("a", "k")
    await engine.graphs.create(squatted.spec())  # team A was first, as the relay would have made it
    victims = {
        "id": f"{prefix}-nightly",
        "queue": f"{prefix}.payments",
        "nodes": [{"name": "a", "kind": "k"}],
    }
    status, body = await call(gate, ROOT, "POST", "/v1/graphs", victims)
    assert (status, body["error"]["code"]) == (409, "graph_id_taken"), body
    again = {**victims, "queue": f"{prefix}.teama.jobs"}  # the same home queue: the idempotent resubmission
    status, body = await call(gate, ROOT, "POST", "/v1/graphs", again)
    assert status == 202, body


async def test_l5_kill_switches_are_capped_per_queue(gate: GateService, engine: Engine, prefix: str) -> None:
    queue = f"{prefix}.teama.jobs"
    for i in range(MAX_SWITCHES_PER_QUEUE):
        await engine.admin.set_switch(Switch(name=f"{prefix}-s{i}", queue=queue, kind=f"k{i}"))
    status, body = await call(gate, A_ADMIN, "PUT", f"/v1/switches/{prefix}-one-more", {"queue": queue})
    assert (status, body["error"]["code"]) == (409, "switches_full"), body
    status, _ = await call(gate, A_ADMIN, "PUT", f"/v1/switches/{prefix}-s0", {"queue": queue, "kind": "z"})
    assert status == 200, "replacing one of its own is no new switch"
    for i in range(MAX_SWITCHES_PER_QUEUE):
        await engine.admin.lift_switch(f"{prefix}-s{i}")


async def test_h3_a_switch_redis_lost_is_still_its_owners(
    gate: GateService, engine: Engine, prefix: str, consul_store: ConfigStore
) -> None:
    """H3 after Redis lost its data: team B's switch, kept in Consul and not back in Redis yet, is still
    B's — team A can neither lift its kept copy nor take its name."""
    name, payments = f"{prefix}-hold-refunds", {"queue": f"{prefix}.payments", "kind": "refund.issue"}
    status, body = await call(gate, ROOT, "PUT", f"/v1/switches/{name}", payments)
    assert status == 200, body
    await engine._client.delete(SWITCHES_KEY)  # Redis lost its data
    status, body = await call(gate, A_ADMIN, "DELETE", f"/v1/switches/{name}")
    assert status == 403, body
    mine = {"queue": f"{prefix}.teama.jobs", "kind": "noop"}
    status, body = await call(gate, A_ADMIN, "PUT", f"/v1/switches/{name}", mine)
    assert status == 403, body
    assert [(s.name, s.queue) for s in (await consul_store.switches())[0]] == [(name, payments["queue"])]
    status, body = await call(gate, ROOT, "DELETE", f"/v1/switches/{name}")
    assert (status, body["jobs_released"]) == (200, 0), body


async def test_l4_an_admin_call_is_audited_with_the_queues_it_touched_and_what_it_changed(
    gate: GateService, engine: Engine, prefix: str, redis: Any
) -> None:
    queue = f"{prefix}.teama.jobs"
    status, _ = await call(gate, A_ADMIN, "PATCH", f"/v1/queues/{queue}", {"paused": True, "lease_ms": 60000})
    assert status == 200
    status, _ = await call(gate, A_ADMIN, "PATCH", f"/v1/queues/{prefix}.payments", {"paused": True})
    assert status == 403
    entries = [e for e in await audit.read(redis, 200) if prefix in e.target]
    done = next(e for e in entries if e.target == queue)
    assert (done.queues, done.details, done.outcome) == (queue, "fields=lease_ms,paused", "ok")
    refused = next(e for e in entries if e.target == f"{prefix}.payments")
    assert (refused.outcome.split(":")[0], refused.who) == ("queue_forbidden", "a-admin")


async def test_m3_a_queue_admin_cannot_lift_the_operators_bounds(gate: GateService, prefix: str) -> None:
    queue = f"{prefix}.teama.jobs"
    for change in ({"retention_ms": 365 * 86_400_000}, {"events_cap": 10**9}):  # memory: a unit test
        status, body = await call(gate, A_ADMIN, "PATCH", f"/v1/queues/{queue}", change)
        assert (status, body["error"]["code"]) == (400, "queue_config_invalid"), body
        assert next(iter(change)) in body["error"]["message"], body
    status, body = await call(gate, A_ADMIN, "PATCH", f"/v1/queues/{queue}", {"retention_ms": 3_600_000})
    assert status == 200, body
