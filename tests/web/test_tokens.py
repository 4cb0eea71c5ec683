"""The dashboard on named, scoped tokens (``JOBQ_TOKENS_FILE``): a token held to ``<prefix>.billing.*`` sees
only those queues in lists and is refused another queue's page (403 ``queue_forbidden``); a token without
``read`` is refused every page."""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from jqcore import keys
from jqcore.clock import now_ms
from jqcore.cron import CronSchedule
from jqcore.envelope import new_envelope
from jqcore.routing import Route, RoutingSettings
from jqengine import Engine
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores.cron import CronStore
from jqruntime.tokens import hash_line
from jqweb import alerting
from jqweb.main import WebService
from jqweb.overview import Sources
from jqweb.settings import WebSettings

VIEWER = "billing-viewer-0123456789"
ADMIN = "billing-admin-0123456789"
PRODUCER = "producer-only-0123456789"


async def test_a_queue_scoped_token_sees_only_its_queues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str, engine: Engine, web_sources: Sources
) -> None:
    billing, payments = f"{prefix}.billing.x", f"{prefix}.payments"
    await engine.enqueue_batch([new_envelope(billing, "k"), new_envelope(payments, "k")])
    path = tmp_path / "tokens.toml"
    path.write_text(
        f'[[token]]\nname = "billing-viewer"\n{hash_line(VIEWER)}\nscopes = ["read"]\n'
        f'queues = ["{prefix}.billing.*"]\n\n'
        f'[[token]]\nname = "producer"\n{hash_line(PRODUCER)}\nscopes = ["enqueue"]\n'
    )
    monkeypatch.setenv("JOBQ_TOKENS_FILE", str(path))
    async with WebService(WebSettings(port=0), web_sources) as service, aiohttp.ClientSession() as http:

        async def get(secret: str, page: str) -> tuple[int, str]:
            headers = {"Authorization": f"Bearer {secret}", "Accept": "text/html"}
            async with http.get(service.url + page, headers=headers) as r:
                return r.status, await r.text()

        status, html = await get(VIEWER, "/queues")
        assert status == 200
        assert billing in html
        assert payments not in html
        assert (await get(VIEWER, f"/queues/{billing}"))[0] == 200
        status, html = await get(VIEWER, f"/queues/{payments}")
        assert status == 403
        assert "queue_forbidden" in html
        assert (await get(VIEWER, f"/jobs?queue={payments}"))[0] == 403
        status, html = await get(PRODUCER, "/queues")
        assert status == 403
        assert "scope_missing" in html


async def test_a_queue_scoped_admin_may_not_act_on_another_queues_cron_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str, web_sources: Sources
) -> None:
    theirs, mine = f"{prefix}-payments-nightly", f"{prefix}-billing-nightly"
    client = consul_client(web_sources.consul)
    try:
        store = CronStore(client, web_sources.cron.kv_prefix)
        await store.put(
            CronSchedule(name=theirs, every_s=3600, queue=f"{prefix}.payments", kind="k"), now_ms()
        )
        await store.put(
            CronSchedule(name=mine, every_s=3600, queue=f"{prefix}.billing.x", kind="k"), now_ms()
        )
    finally:
        await close_consul(client)
    path = tmp_path / "tokens.toml"
    path.write_text(
        f'[[token]]\nname = "billing-admin"\n{hash_line(ADMIN)}\nscopes = ["read", "admin"]\n'
        f'queues = ["{prefix}.billing.*"]\n'
    )
    monkeypatch.setenv("JOBQ_TOKENS_FILE", str(path))
    async with WebService(WebSettings(port=0), web_sources) as service, aiohttp.ClientSession() as http:

        async def post(page: str) -> tuple[int, str]:
            headers = {"Authorization": f"Bearer {ADMIN}", "Accept": "application/json"}
            async with http.post(service.url + page, headers=headers, data={}) as r:
                return r.status, await r.text()

        for action in ("pause", "resume", "trigger"):
            status, body = await post(f"/schedules/{theirs}/{action}")
            assert status == 403, (action, body)
            assert "queue_forbidden" in body
        status, body = await post(f"/schedules/{mine}/pause")
        assert status in (200, 303), body


async def test_sighup_reloads_the_dashboards_tokens(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    web_sources: Sources,
    eventually: Callable[..., Awaitable[Any]],
) -> None:
    path = tmp_path / "tokens.toml"
    viewer = f'[[token]]\nname = "viewer"\n{hash_line(VIEWER)}\nscopes = ["read"]\n'
    path.write_text(f'[[token]]\nname = "producer"\n{hash_line(PRODUCER)}\nscopes = ["enqueue"]\n')
    monkeypatch.setenv("JOBQ_TOKENS_FILE", str(path))
    async with WebService(WebSettings(port=0), web_sources) as service, aiohttp.ClientSession() as http:

        async def status() -> int:
            async with http.get(service.url + "/queues", headers={"Authorization": f"Bearer {VIEWER}"}) as r:
                return r.status

        assert await status() == 401
        path.write_text(path.read_text() + "\n" + viewer)
        os.kill(os.getpid(), signal.SIGHUP)
        await eventually(status, lambda s: s == 200, 10)


async def test_a_queue_scoped_admin_sees_and_limits_only_its_own_topics_and_queues(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prefix: str,
    engine: Engine,
    web_sources: Sources,
    make_topic: Callable[..., str],
) -> None:
    """Shared parts are narrowed: the topics page and the overview's live panel show the topics that carry
    the token's queues; a topic's rate (it holds every queue on the topic) and another team's queue rate
    are refused. Of the queues held in a topic's holding lane, it sees its own only (not its neighbour's on
    the same topic, nor that one's alert)."""
    mine, theirs = web_sources.relay.topics[0], make_topic("pay-topic", partitions=1)
    billing, payments, neighbour = f"{prefix}.billing.x", f"{prefix}.payments", f"{prefix}.neighbour"
    sources = dataclasses.replace(
        web_sources,
        routing=RoutingSettings(
            routes=[Route(queues=f"{prefix}.payments", topic=theirs), Route(queues=f"{prefix}*", topic=mine)],
            default_topic="",
        ),
        relay=web_sources.relay.model_copy(update={"topics": [mine, theirs]}),
    )
    await engine.enqueue_batch([new_envelope(billing, "k"), new_envelope(payments, "k")])
    old = now_ms() - (alerting.HELD_AGE_S + 60) * 1000
    lane = {"reason": "paused", "records": 5, "oldest": old, "drained_per_s": 0.0}
    held = {"at": now_ms() + 30_000, "queues": {billing: lane, neighbour: lane}}  # the lock holder's snapshot
    await engine._client.hset(keys.RELAY_HELD_KEY, mine, orjson.dumps(held))
    path = tmp_path / "tokens.toml"
    path.write_text(
        f'[[token]]\nname = "billing-admin"\n{hash_line(ADMIN)}\nscopes = ["read", "admin"]\n'
        f'queues = ["{prefix}.billing.*"]\n'
    )
    monkeypatch.setenv("JOBQ_TOKENS_FILE", str(path))
    async with WebService(WebSettings(port=0), sources) as service, aiohttp.ClientSession() as http:
        headers = {"Authorization": f"Bearer {ADMIN}", "Accept": "text/html"}

        async def get(page: str) -> str:
            async with http.get(service.url + page, headers=headers) as r:
                assert r.status == 200, (page, r.status)
                return await r.text()

        async def post(page: str) -> tuple[int, str]:
            async with http.post(
                service.url + page, headers={**headers, "Accept": "application/json"}, data={"rate": "0"}
            ) as r:
                return r.status, await r.text()

        topics = await get("/topics")
        assert f'id="{mine}"' in topics
        assert theirs not in topics
        assert payments not in topics
        assert f"rate-form-{mine}" not in topics, "no topic rate form for a scoped admin"
        assert (billing in topics, neighbour in topics) == (True, False)
        live = await get("/overview/live")
        assert theirs not in live
        assert (f"queue {billing} held (paused)" in live, neighbour in live) == (True, False)
        await engine._client.hdel(keys.RELAY_HELD_KEY, mine)
        status, body = await post(f"/topics/{mine}/rate")
        assert (status, "queue_forbidden" in body, "every queue" in body) == (403, True, True), body
        status, body = await post(f"/queues/{payments}/rate")
        assert (status, "queue_forbidden" in body) == (403, True), body
        status, body = await post(f"/queues/{billing}/rate")
        assert status in (200, 303), body
