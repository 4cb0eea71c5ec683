"""The workers page (processes alive, the running jobs per worker, scheduler instances and what they own)
and the schedules page (delayed and far-future jobs per queue, cron schedules paused, resumed and
triggered from the dashboard)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import pytest

from jqcore.clock import now_ms
from jqcore.cron import CronSchedule
from jqcore.envelope import new_envelope
from jqcore.testsignal import enable_all
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.lifecycle import run_until_signal
from jqruntime.stores import presence
from jqruntime.stores.cron import CronStore
from jqruntime.stores.membership import Membership
from jqruntime.stores.presence import Presence
from jqweb.pages.workers import ROLES
from worker.pool import Pool, PoolConfig
from worker.registry import Registry

pytestmark = pytest.mark.asyncio

HOUR_MS = 3_600_000


def _worker(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((w for w in body["workers"] if w["name"] == name), None)


async def test_a_running_job_shows_under_the_worker_that_claimed_it(
    dash: Any, engine: Any, prefix: str
) -> None:
    q = f"{prefix}.work"
    job = new_envelope(q, "resize", {"n": 1})
    await engine.enqueue_batch([job])
    me = f"{prefix}-host:4242:{q}"
    (claimed,) = await engine.jobs.claim(q, 1, worker=me)
    r = await dash.get("/workers")
    assert r.status == 200
    row = _worker(r.json(), me)
    assert row is not None
    assert row["alive"] is False, "claimed by a name no pool announced"
    (shown,) = row["jobs"]
    assert (shown["id"], shown["queue"], shown["kind"]) == (claimed.id, q, "resize")
    assert shown["started_at"]
    assert shown["lease_over"] is False
    assert shown["lease_deadline"] > shown["started_at"]
    html = await dash.get("/workers", as_json=False)
    assert 'id="workers-table"' in html.text
    assert f'href="/jobs/{q}/{claimed.id}"' in html.text
    assert me in html.text
    await engine.jobs.complete(q, (claimed.id, claimed.attempt, claimed.token))
    r = await dash.get("/workers")
    assert _worker(r.json(), me) is None, "a finished job leaves its worker's row"


async def test_an_announced_pool_is_listed_alive_and_idle(dash: Any, redis: Any, prefix: str) -> None:
    name = f"{prefix}-pool:77:{prefix}.a,{prefix}.b"
    async with Presence(redis, "worker", name):
        r = await dash.get("/workers")
        assert name in r.json()["processes"]["worker"]
        row = _worker(r.json(), name)
        assert row == {"name": name, "alive": True, "jobs": [], "silent": []}
        assert set(r.json()["processes"]) == set(ROLES)
        assert r.json()["processes"]["web"], "the dashboard announces itself"
        (mine,) = [p for p in r.json()["rows"] if p["name"] == name]
        assert (mine["kind"], mine["queues"], mine["state"]) == (
            "worker pool",
            [f"{prefix}.a", f"{prefix}.b"],
            "running",
        )
        assert mine["version"]
        assert mine["can_control"] is False, "a read token"
    r = await dash.get("/workers")
    assert name not in r.json()["processes"]["worker"], "a stopped pool leaves at once"


async def test_a_pool_is_quieted_resumed_and_stopped_from_the_workers_page(
    dash: Any, engine: Any, redis: Any, prefix: str
) -> None:
    """Quiet: the pool claims nothing more and finishes what it runs; resume: it claims again; stop
    (confirmed): it shuts down as on SIGTERM. Each reaches the pool at its heartbeat, each is audited,
    and the page shows the pool's slots, processed count and state as its record says."""
    q, reg = f"{prefix}.pool", Registry()
    release, started = asyncio.Event(), asyncio.Event()

    @reg.job("slow", queue=q)
    async def slow() -> str:
        started.set()
        await release.wait()
        return "done"

    @reg.job("fast", queue=q)
    async def fast() -> str:
        return "done"

    pool = Pool(reg, engine, PoolConfig([q], concurrency=2), redis=redis)
    enable_all(pool.signals)
    running = asyncio.create_task(run_until_signal(pool, until=pool.done))
    beat = pool._presence.beat  # the heartbeat, on the test's cue instead of every 5 s
    try:
        a = new_envelope(q, "slow")
        await engine.enqueue_batch([a])
        await asyncio.wait_for(started.wait(), 30)
        await beat()
        (row,) = [
            p
            for p in (await dash.get("/workers", token="admin")).json()["rows"]
            if p["name"] == pool.context.pool
        ]
        assert (row["busy"], row["slots"], row["processed"], row["state"]) == (1, 2, 0, "running")
        assert row["can_control"] is True
        assert row["uptime_ms"] >= 0
        url = f"/workers/{quote(pool.context.pool, safe='')}"
        html = (await dash.get("/workers", as_json=False, token="admin")).text
        assert f'action="{url}/quiet"' in html

        r = await dash.post(f"{url}/quiet")
        assert (r.status, r.json()["action"]) == (200, "worker.quiet"), r.text
        mark = pool.signals.quiet.mark()
        await beat()  # reads the control
        await pool.signals.quiet.wait_for(lambda on: on is True, after=mark)
        b = new_envelope(q, "fast")
        await engine.enqueue_batch([b])
        release.set()
        await pool.signals.finished.wait_for(lambda f: f == (a.id, "succeeded"))  # what ran, finishes
        assert (await engine.reads.get_job(q, b.id)).state == "pending", "a quiet pool claims nothing"
        await beat()
        (row,) = [p for p in (await dash.get("/workers")).json()["rows"] if p["name"] == pool.context.pool]
        assert (row["state"], row["processed"]) == ("quiet", 1)

        r = await dash.post(f"{url}/resume")
        assert r.json()["action"] == "worker.resume"
        await beat()
        await pool.signals.finished.wait_for(lambda f: f == (b.id, "succeeded"))

        asked = (await dash.post(f"{url}/stop")).json()["confirm"]  # stop asks first
        assert not pool.done.is_set()
        r = await dash.post(f"{url}/stop", dict(asked["fields"]))
        assert r.json()["action"] == "worker.stop"
        await beat()
        await asyncio.wait_for(running, 30)  # the process's main loop ends: a graceful stop
    finally:
        release.set()
        if not running.done():
            await pool.stop()
            await running
    names = (await dash.get("/workers")).json()["processes"]["worker"]
    assert pool.context.pool not in names, "a stopped pool leaves"
    log = (await dash.get("/audit")).json()["entries"]
    assert [e["action"] for e in log if e["target"] == pool.context.pool][:3] == [
        "worker.stop",
        "worker.resume",
        "worker.quiet",
    ]


async def test_pool_controls_refuse_read_tokens_and_unknown_pools(dash: Any, redis: Any, prefix: str) -> None:
    name = f"{prefix}-pool:78:{prefix}.a"
    async with Presence(redis, "worker", name, facts=lambda: {"queues": [f"{prefix}.a"]}) as announced:
        await announced.beat()
        url = f"/workers/{quote(name, safe='')}"
        r = await dash.post(f"{url}/quiet", token="read")
        assert (r.status, r.code) == (403, "admin_required")
        r = await dash.post(f"/workers/{prefix}-nope:1:x/quiet")
        assert (r.status, r.code) == (404, "worker_not_found")
        for action in ("quiet", "resume", "stop"):
            r = await dash.post(f"/workers/{prefix}-nope:1:x/{action}")
            assert r.code == "worker_not_found", action


async def test_a_silent_worker_is_flagged_on_its_row(
    dash: Any, engine: Any, redis: Any, prefix: str, eventually: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool with room that claims nothing while its queue's head waits is flagged silent on that queue
    (the threshold cut to 0.3 s here); the same pool busy (no free slot) is not."""
    monkeypatch.setattr(presence, "SILENT_AFTER_S", 0.3)
    q, calm = f"{prefix}.waiting", f"{prefix}.calm"
    await engine.enqueue_batch([new_envelope(q, "k")])
    name, busy = f"{prefix}-pool:78:{q}", f"{prefix}-busy:79:{q}"
    load = {name: (0, 4), busy: (4, 4)}
    async with (
        Presence(redis, "worker", name, queues=[q, calm], load=lambda: load[name]),
        Presence(redis, "worker", busy, queues=[q], load=lambda: load[busy]),
    ):

        async def rows() -> dict[str, Any]:
            body = (await dash.get("/workers")).json()
            return {w["name"]: w for w in body["workers"] if w["name"] in (name, busy)}

        # both rows, each once its pool's first beat landed (a beat runs in the background: the judgement
        # of one pool can come before the other pool's beat — seen once in a full run)
        found = await eventually(rows, lambda r: busy in r and r.get(name, {}).get("silent"), timeout_s=30)
        assert found[name]["silent"] == [q], "the calm queue has nothing waiting"
        assert found[busy]["silent"] == [], "every slot taken: not expected to claim"
        html = await dash.get("/workers", as_json=False)
        assert f"silent on {q}" in html.text


async def test_scheduler_instances_and_the_queues_each_owns(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.owned"
    await engine.enqueue_batch([new_envelope(q, "k")])
    group = f"{prefix}-sched"
    one = Membership(engine._client, group, f"{prefix}-s1", stale_s=30)
    two = Membership(engine._client, group, f"{prefix}-s2", stale_s=30)
    await one.beat("3 queues")
    await two.beat("4 queues")
    try:
        r = await dash.get("/workers")
        mine = [s for s in r.json()["schedulers"] if s["group"] == group]
        assert [s["member"] for s in mine] == [f"{prefix}-s1", f"{prefix}-s2"]
        assert [s["note"] for s in mine] == ["3 queues", "4 queues"]
        owners = [s["member"] for s in mine if q in s["owned"]]
        assert len(owners) == 1, "each queue has exactly one owner"
        assert not set(mine[0]["owned"]) & set(mine[1]["owned"])
        await one.beat("3 queues")  # the dashboard counts members silent for 3 s as gone
        await two.beat("4 queues")
        html = await dash.get("/workers", as_json=False)
        assert 'id="schedulers-table"' in html.text
        assert f"{prefix}-s2" in html.text
    finally:
        await one.leave()
        await two.leave()


async def test_workers_page_needs_a_token(dash: Any) -> None:
    r = await dash.get("/workers", token=None)
    assert (r.status, r.code) == (401, "unauthenticated")


# ---- schedules ------------------------------------------------------------------------------------


def _cron(body: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in body["cron"] if c["name"] == name)


@pytest.fixture
async def cron_store(dash: Any) -> Any:
    client = consul_client(dash.sources.consul)
    try:
        yield CronStore(client, dash.sources.cron.kv_prefix)
    finally:
        await close_consul(client)


async def test_delayed_and_far_future_jobs_per_queue(dash: Any, engine: Any, prefix: str) -> None:
    q = f"{prefix}.later"
    run_at = now_ms() + HOUR_MS
    await engine.enqueue_batch([new_envelope(q, "k", run_at=run_at), new_envelope(q, "k", run_at=run_at + 5)])
    far_at = now_ms() + 400 * 24 * HOUR_MS
    assert await engine.schedule_far(q, [(f"{prefix}-far", far_at)]) == ["scheduled"]
    r = await dash.get("/schedules")
    assert r.status == 200
    row = next(w for w in r.json()["waiting"] if w["queue"] == q)
    assert row == {"queue": q, "delayed": 2, "next_delayed_at": run_at, "far": 1, "next_far_at": far_at}
    html = await dash.get("/schedules", as_json=False)
    assert 'id="waiting-table"' in html.text
    assert f'data-queue="{q}"' in html.text
    await engine.timers.drop_far(q, [f"{prefix}-far"])


async def test_cron_schedules_pause_resume_and_trigger(
    dash: Any, engine: Any, prefix: str, cron_store: Any
) -> None:
    q = f"{prefix}.cron"
    name = f"{prefix}-nightly"
    await cron_store.put(CronSchedule(name=name, every_s=3600, queue=q, kind="report", args=[1]), now_ms())
    r = await dash.get("/schedules")
    row = _cron(r.json(), name)
    assert (row["queue"], row["kind"], row["paused"], row["fires"]) == (q, "report", False, 0)
    assert row["next_slot_ms"] > now_ms()
    html = await dash.get("/schedules", token="admin", as_json=False)
    assert 'id="cron-table"' in html.text
    assert f'id="pause-{name}"' in html.text
    assert f'id="trigger-{name}"' in html.text
    assert f'id="pause-{name}"' not in (await dash.get("/schedules", as_json=False)).text, "read: no button"

    r = await dash.post(f"/schedules/{name}/pause")
    assert r.status == 200
    assert r.json()["action"] == "cron.pause"
    row = _cron((await dash.get("/schedules")).json(), name)
    assert row["paused"] is True
    assert row["next_slot_ms"] is None
    html = await dash.get("/schedules", token="admin", as_json=False)
    assert f'id="resume-{name}"' in html.text

    r = await dash.post(f"/schedules/{name}/resume", {"next": "/schedules"}, as_json=False)
    assert r.status == 303
    assert r.headers["Location"] == "/schedules"
    assert _cron((await dash.get("/schedules")).json(), name)["paused"] is False

    r = await dash.post(f"/schedules/{name}/trigger")
    assert (r.status, r.json()["count"]) == (200, 1)
    job_id = r.json()["message"].split("job ")[1].split(" ")[0]
    assert job_id.startswith(f"cron:{name}:")
    assert job_id.endswith(":manual")
    job = await engine.reads.get_job(q, job_id)
    assert job is not None
    assert (job.kind, job.state) == ("report", "pending")
    assert (await engine.reads.depth(q)).pending == 1

    audit = (await dash.get("/audit", count=50)).json()["entries"]
    done = [(e["action"], e["outcome"]) for e in audit if e["target"] == name]
    assert done[:3] == [("cron.trigger", "ok"), ("cron.resume", "ok"), ("cron.pause", "ok")]


async def test_cron_actions_refuse_unknown_names_bad_names_and_read_tokens(
    dash: Any, prefix: str, cron_store: Any
) -> None:
    name = f"{prefix}-guarded"
    await cron_store.put(CronSchedule(name=name, every_s=60, queue=f"{prefix}.g", kind="k"), now_ms())
    for verb in ("pause", "resume", "trigger"):
        r = await dash.post(f"/schedules/{name}/{verb}", token="read")
        assert (r.status, r.code) == (403, "admin_required"), verb
        r = await dash.post(f"/schedules/{prefix}-nope/{verb}")
        assert (r.status, r.code) == (404, "schedule_not_found"), verb
        r = await dash.post(f"/schedules/-bad/{verb}")
        assert (r.status, r.code) == (400, "schedule_name_invalid"), verb
    assert (await cron_store.get(name)).paused is False, "nothing changed"
    r = await dash.post(f"/schedules/{name}/pause", token=None)
    assert (r.status, r.code) == (401, "unauthenticated")
    html = await dash.post(f"/schedules/{prefix}-nope/pause", as_json=False)
    assert html.status == 404
    assert html.headers["X-Jobq-Error"] == "schedule_not_found"
