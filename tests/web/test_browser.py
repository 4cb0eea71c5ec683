"""The dashboard in a real browser: Debian's chromium, headless, driven by Playwright (the system browser's
executable; nothing downloaded), against a running pipeline — gateway, relay, scheduler and a worker pool on
the session stack, in a Redis database of their own (:data:`DB`, emptied first) so the pages show only
this test's world. Every page loads with no console error and is saved as a screenshot into the test's
temporary folder (kept by pytest for a look after a failure; the README's pictures come from the demo's
workload instead: ``python -m loadtest.screenshots``); the operator's paths are clicked through: search by
filter and see the URL carry it, retry a dead job and see it run, pause and resume a queue, change a rate
limit and see the relay follow, a job whose args and error carry markup shown as text with no script run."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from canary.monitor import Canary
from jqcore import metrics
from jqcore.clock import now_ms
from jqcore.cron import CronSchedule
from jqcore.graphs import Step, group, pipeline
from jqcore.release import version
from jqcore.settings.servers import RedisSettings
from jqengine import Engine
from jqruntime.client import JobqClient
from jqruntime.consulconn import close_consul
from jqruntime.consulconn import consul_client as aio_consul
from jqruntime.stores.cron import CronStore
from jqstack.manager import Endpoints
from jqweb import render
from jqweb.main import WebService
from jqweb.overview import Sources
from jqweb.settings import WebSettings
from worker.pool import Pool, PoolConfig
from worker.registry import Registry

pytestmark = [pytest.mark.asyncio, pytest.mark.browser]

DB = 9
"""The Redis database of this module's pipeline (nothing else uses it)."""
CHROMIUM = os.environ.get("JOBQ_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
XSS_ARG = "<script>window.__pwned = 1</script>"
XSS_ERROR = "<img src=x onerror=window.__pwned=2>"


@dataclass
class Live:
    url: str
    page: Any
    client: JobqClient
    engine: Engine
    topic: str
    prefix: str
    broken: dict[str, bool]
    release: asyncio.Event
    """Set to let the long ``render_video`` job finish."""
    shots: Path
    """Where the pages' screenshots go (the test's temporary folder: a test run leaves the tree clean)."""
    errors: list[str] = field(default_factory=list)

    async def open(self, path: str, ready: str) -> None:
        await self.page.goto(self.url + path)
        await self.page.wait_for_selector(ready, timeout=30_000)

    async def shot(self, name: str) -> None:
        await self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)


@pytest.fixture
async def live(
    endpoints: Endpoints,
    web_sources: Sources,
    web_tokens: dict[str, str],
    make_gate: Callable[..., Any],
    make_relay: Callable[..., Any],
    make_scheduler: Callable[..., Any],
    prefix: str,
    token: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Live]:
    from playwright.async_api import async_playwright

    if not shutil.which(CHROMIUM):
        pytest.fail(f"no chromium at {CHROMIUM}: `./run test` installs Debian's chromium")
    base_url = (endpoints.redis_url or "").rsplit("/", 1)[0]
    redis_url = f"{base_url}/{DB}"
    raw = aioredis.Redis.from_url(redis_url)
    await raw.flushdb()
    sources = Sources(**{**web_sources.__dict__, "redis": RedisSettings(url=redis_url)})
    topic = web_sources.relay.topics[0]
    engine = Engine(raw)
    broken = {"flaky": True}
    release = asyncio.Event()
    registry = Registry()
    ok_q, flaky_q = f"{prefix}.emails", f"{prefix}.reports"

    @registry.job("send_email", queue=ok_q)
    async def send_email(to: str = "", subject: str = "") -> dict[str, str]:
        return {"sent_to": to, "subject": subject}

    @registry.job("build_report", queue=flaky_q, max_attempts=1)
    async def build_report(*args: Any) -> str:
        if broken["flaky"]:
            raise RuntimeError(f"report failed: {XSS_ERROR}")
        return "report ready"

    @registry.job("render_video", queue=ok_q, timeout=120)
    async def render_video(title: str = "") -> str:
        await release.wait()  # runs while the pages are shot: the workers page shows it
        return f"rendered {title}"

    @registry.job("count_words", queue=ok_q)
    async def count_words(text: str = "", *fed: Any) -> int:
        return len(text.split()) + sum(f for f in fed if isinstance(f, int))

    settings = WebSettings(
        port=0,
        read_tokens=[SecretStr(f"viewer:{web_tokens['read']}")],
        admin_tokens=[SecretStr(f"admin:{web_tokens['admin']}")],
    )
    monkeypatch.setattr(render, "REFRESH_S", 2)
    async with (
        make_gate(sources.routing, redis_url=redis_url) as gate,
        make_relay(web_sources.relay.topics[0], redis_url=redis_url),
        make_scheduler(f"{prefix}-s0", redis_url=redis_url, series_every_s=1),
        JobqClient([gate.url], token) as client,
        Pool(registry, engine, PoolConfig([ok_q, flaky_q, f"canary.{topic}"], concurrency=4), redis=raw),
        Canary(client, raw, {topic: [0, 1]}, interval_s=1, late_after_s=20),
        WebService(settings, sources) as web,
        async_playwright() as pw,
    ):
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = await browser.new_context(viewport={"width": 1280, "height": 860})
        page = await context.new_page()
        lv = Live(web.url, page, client, engine, topic, prefix, broken, release, tmp_path / "shots")
        lv.shots.mkdir()
        page.on("console", lambda m: lv.errors.append(f"{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: lv.errors.append(f"pageerror: {e}"))
        await page.goto(web.url + "/login")
        await page.fill("input[name=token]", web_tokens["admin"])
        await page.click("button[type=submit]")
        await page.wait_for_url(web.url + "/")
        try:
            yield lv
        finally:
            release.set()  # a failed test leaves no job holding the pool's shutdown
            await browser.close()
    await raw.flushdb()
    await raw.aclose()


async def test_operator_paths_in_a_real_browser(
    live: Live, cron_settings: Any, endpoints: Endpoints, eventually: Any
) -> None:
    page, p = live.page, live.prefix

    async def until(probe: Callable[[], Any], timeout_s: float = 60) -> Any:
        """The pipeline has no signal to wait on: watch the state it produces (``eventually``)."""
        return await eventually(probe, bool, timeout_s)

    ok_q, flaky_q = f"{p}.emails", f"{p}.reports"
    ids = [
        (await live.client.enqueue_one(ok_q, "send_email", {"to": f"user{i}@example.com", "subject": "hi"}))[
            "id"
        ]
        for i in range(5)
    ]
    bad = await live.client.enqueue_one(flaky_q, "build_report", [XSS_ARG])
    for job_id in ids:
        await until(lambda j=job_id: _state_is(live.engine, ok_q, j, "completed"))
    await until(lambda: _state_is(live.engine, flaky_q, bad["id"], "errored"))
    store = CronStore(aio_consul(live_consul(endpoints)), cron_settings.kv_prefix)
    await store.put(
        CronSchedule(name=f"{p}-nightly", cron="0 3 * * *", queue=ok_q, kind="send_email"), now_ms()
    )
    await close_consul(store.client)
    docs = [
        pipeline(f"{p}-words", Step("count_words", ["one two"]), Step("count_words", ["three"]), queue=ok_q),
        group(
            f"{p}-reports",
            [Step("count_words", ["a b c"]), Step("build_report", ["q3"], queue=flaky_q)],
            callback=Step("count_words", ["done"]),
            queue=ok_q,
        ),
    ]
    for doc in docs:
        await live.client.submit_graph(doc)
    for doc in docs:
        await until(lambda d=doc: _graph_ended(live.client, d["id"]))
    await until(lambda: _canaries_ok(live.engine))
    await until(lambda: _charted(live.engine, [ok_q, flaky_q]))
    video = await live.client.enqueue_one(ok_q, "render_video", {"title": "launch trailer"})
    await until(lambda: _state_is(live.engine, ok_q, video["id"], "running"))

    # every page loads with no console error; each is saved (into the test's temporary folder)
    pages = [
        ("overview", "/", "#alerts, #alerts-none"),
        ("topics", "/topics", f"#rate-form-{_css(live.topic)}"),
        ("queues", "/queues", "table"),
        ("queue", f"/queues/{ok_q}", f"#pause-{_css(ok_q)}"),
        ("jobs", f"/jobs?queue={ok_q}&state=done", "#search-form"),
        ("job", f"/jobs/{flaky_q}/{bad['id']}", "pre.value"),
        ("dead", f"/dead?queue={flaky_q}", "#dead-table"),
        ("schedules", "/schedules", "#cron-table"),
        ("graphs", "/graphs", "main h1"),
        ("graph", f"/graphs/{p}-reports", "main svg"),
        ("workers", "/workers", "#workers-table"),
        ("audit", "/audit", "#audit"),
    ]
    for name, path, ready in pages:
        await live.open(path, ready)
        await live.shot(name)
        assert not live.errors, f"{name}: {live.errors}"
    assert sorted(p.stem for p in live.shots.iterdir()) == sorted(name for name, _, _ in pages)

    # an ended graph stays listed (open until the scheduler sweeps it, ended after)
    await live.open("/graphs", f"#graphs-table tr[data-graph='{p}-reports'][data-state=failed]")

    # the Workers page lists every process of the pipeline with its version and uptime, the pool with its
    # busy / total slots; quieting the pool lets the running job finish and claims nothing more
    async def workers_say(selector: str, *words: str) -> bool:
        await live.open("/workers", "#processes-table")
        found = await page.query_selector(selector)
        said = await found.inner_text() if found is not None else ""
        return found is not None and all(w in said for w in words)

    pool = "#processes-table tr.process[data-role=worker]"
    for role in ("worker", "relay", "scheduler", "canary", "gate", "web"):
        assert await workers_say(f"#processes-table tr.process[data-role={role}]", version()), role
    await until(lambda: workers_say(f"{pool}[data-state=running]", "1 / 4"))  # render_video (at a beat)
    await page.click(f"{pool} button[data-action=quiet]")
    await until(lambda: workers_say(f"{pool}[data-state=quiet]"))  # the pool read it at its beat
    waiting = await live.client.enqueue_one(ok_q, "send_email", {"to": "later@example.com"})
    live.release.set()
    await until(lambda: _state_is(live.engine, ok_q, video["id"], "completed"))  # what ran, finishes
    assert await _state_is(live.engine, ok_q, waiting["id"], "pending"), "a quiet pool claims nothing"
    await live.open("/workers", "#processes-table")
    await page.click(f"{pool} button[data-action=resume]")
    await until(lambda: _state_is(live.engine, ok_q, waiting["id"], "completed"))

    # markup in args and errors is text: shown escaped, never run
    await live.open(f"/jobs/{flaky_q}/{bad['id']}", "pre.value")
    body = await page.inner_text("main")
    assert XSS_ARG in body
    assert XSS_ERROR in body
    assert await page.evaluate("window.__pwned === undefined")

    # search by a filter: the URL carries it
    await live.open("/jobs", "#search-form")
    await page.fill("#search-form [name=queue]", ok_q)
    await page.select_option("#search-form [name=state]", "done")
    await page.click("#search-form button[type=submit]")
    await page.wait_for_url(re.compile(r".*queue=" + re.escape(ok_q).replace("\\.", "[.]") + ".*"))
    assert "state=done" in page.url
    await page.wait_for_selector(f"text={ids[0]}")

    # retry a dead job from the UI and see it run
    live.broken["flaky"] = False
    await live.open(f"/dead?queue={flaky_q}", "#dead-table")
    await page.click(f"#retry-all-{_css(flaky_q)}")
    if await page.query_selector("#confirm-form"):
        await page.click("#confirm-form button[type=submit]")
    await until(lambda: _state_is(live.engine, flaky_q, bad["id"], "completed"))

    # pause and resume a queue
    await live.open(f"/queues/{ok_q}", f"#pause-{_css(ok_q)}")
    await page.click(f"#pause-{_css(ok_q)}")
    await until(lambda: _paused(live.engine, ok_q, True))
    await page.wait_for_selector(f"#resume-{_css(ok_q)}")
    await page.click(f"#resume-{_css(ok_q)}")
    await until(lambda: _paused(live.engine, ok_q, False))

    # change a rate limit and see the relay follow (its live limit, as it exports it)
    gauge = metrics.RELAY_RATE_LIMIT.labels(live.topic)
    await live.open("/topics", f"#rate-form-{_css(live.topic)}")
    await page.fill(f"#rate-form-{_css(live.topic)} [name=rate]", "2.5")
    await page.click(f"#rate-form-{_css(live.topic)} button[type=submit]")
    await until(lambda: _equals(lambda: gauge._value.get(), 2.5))
    await page.fill(f"#rate-form-{_css(live.topic)} [name=rate]", "")
    await page.click(f"#rate-form-{_css(live.topic)} button[type=submit]")
    await until(lambda: _equals(lambda: gauge._value.get(), -1))

    # every action above is in the audit log, by the signed-in admin
    await live.open("/audit", "#audit")
    log = await page.inner_text("#audit")
    actions = ("dead.retry", "queue.pause", "queue.resume", "rate.topic", "worker.quiet", "worker.resume")
    for action in actions:
        assert action in log
    await page.fill("#f-action", "worker.")  # filtered by action (a prefix): the URL carries it
    await page.click("#audit-filter")
    await page.wait_for_url(re.compile(r".*action=worker[.].*"))
    log = await page.inner_text("#audit")
    assert "worker.quiet" in log
    assert "queue.pause" not in log

    # stopping a pool asks first, then the pool shuts down gracefully and leaves the page
    await live.open("/workers", "#processes-table")
    await page.click(f"{pool} button[data-action=stop]")
    await page.wait_for_selector("#confirm-form")
    assert "Stop worker pool" in await page.inner_text("main")
    await page.click("#confirm-form button[type=submit]")
    await until(lambda: workers_say(f"{pool}[data-state=stopping]"))
    assert not live.errors, live.errors


def live_consul(endpoints: Endpoints) -> Any:
    from jqcore.settings.servers import ConsulSettings

    return ConsulSettings(addr=endpoints.consul_addr)


def _css(name: str) -> str:
    """An id as a CSS selector fragment (queue names carry dots)."""
    return re.sub(r"([^A-Za-z0-9_-])", r"\\\1", name)


async def _state_is(engine: Engine, queue: str, job_id: str, state: str) -> bool:
    info = await engine.reads.get_job(queue, job_id)
    return info is not None and info.state == state


async def _graph_ended(client: JobqClient, graph_id: str) -> bool:
    got = await client.get_graph(graph_id)
    return got is not None and got["state"] != "running"


async def _charted(engine: Engine, queues: list[str]) -> bool:
    """The scheduler sampled the queues at least three times since they started (two rates to draw)."""
    from jqweb import series

    return len((await series.read(engine._client, queues, 0)).at_ms) >= 2


async def _canaries_ok(engine: Engine) -> bool:
    from jqcore.keys import CANARY_HEALTH_KEY

    raw = await engine._client.hgetall(CANARY_HEALTH_KEY)
    return len(raw) == 2


async def _paused(engine: Engine, queue: str, paused: bool) -> bool:
    return (await engine.reads.queue_config(queue)).paused is paused


async def _equals(read: Callable[[], float], want: float) -> bool:
    return read() == want
