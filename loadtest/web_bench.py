"""``./run bench web``: how long the dashboard's pages take with a large Redis and a large history.

The issue's target (``jqweb``, issue 22): pages render in < 300 ms at 1M jobs in Redis and 10M history
rows. This bench measures it; it asserts nothing.

1. **Fill.** ``Sizes.jobs`` jobs (1,000,000; quick: 20,000) go straight into the engine
   (``Engine.enqueue_batch``, 1,000 per call, a few calls in flight) over :data:`QUEUES` (shares
   40/30/20/10 %, three kinds each, small JSON args), events off (``events_cap`` 0: nobody ships them):
   80 % pending, 8 % delayed (due in 30 min to 3 h), 10 % done, 1.5 % dead and 0.5 % running (claimed
   with a 1-day lease and left so). The finished and running ones are enqueued first, claimed in batches
   and completed (``complete_many``) or failed permanently; the pending and delayed ones come after.
   ``Sizes.history_rows`` history rows (10,000,000; quick: 200,000) are written by DuckDB straight into
   the layout ``jqruntime.stores.history.HistoryStore`` reads (``jqspark.history`` writes it):
   ``events/day=<UTC date>/batch=<tag>/*.parquet`` (three events per job: enqueued, running, completed or
   — one job in 50 — errored; 7 days ending now, :data:`BATCHES_PER_DAY` batch folders a day) and
   ``current/seg=<b|c><tag>/`` (each job's latest event, ``first_at``, ``accepted_at``): one compacted ``c``
   segment and :data:`OPEN_SEGMENTS` batch segments holding the newest jobs, as a pipeline between two
   compactions leaves them. The archived jobs are in the same queues as the live ones. A Kafka topic routed
   to the queues and a few cron schedules give the topics and schedules pages something to show.
2. **Serve and request.** :class:`jqweb.main.WebService` in this process (port 0, a read token) over
   those sources; every page of :data:`PAGES` is requested with ``Accept: text/html`` and the bearer
   token, ``Sizes.warmups`` times unmeasured then ``Sizes.requests`` times, one request at a time; the
   time runs until the whole body is read. Every status is recorded. A page answering 404 ``not_found``
   (no such route: the page is not written yet) is **missing**, not a failure; any other non-200 is a
   failure.
3. **Report.** p50 / p95 / max per page, its status and whether p95 < 300 ms: a table printed, in
   ``report.md`` and in ``results.json`` (``pages``: every sample and status), and ``pages.png`` (p50 and
   p95 per page with the 300 ms line).

Servers: a throw-away stack of its own (Kafka + Consul + Redis on free ports, purged afterwards: the
1M jobs never touch another stack), or the ones passed in (the smoke test: the session's stack) — then
the jobs live in Redis database :data:`SHARED_DB`, flushed at the end, and the topic and schedules are
removed. The history folder is a temporary one, deleted at the end. The dashboard, its client, DuckDB
and Redis share this machine's cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import duckdb
import redis
import redis.asyncio as aioredis
from confluent_kafka.admin import AdminClient
from pydantic import SecretStr
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from jqcore.clock import now_ms
from jqcore.cron import CronSchedule
from jqcore.envelope import new_envelope
from jqcore.routing import Route, RoutingSettings
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import CronSettings, HistorySettings, RelayKeys
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqcore.topics import job_topics
from jqengine import Engine, QueueConfig
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores.cron import CronStore
from jqruntime.stores.history import CURRENT_DIR, EVENTS_DIR
from jqruntime.topicadmin import ensure
from jqstack.manager import Endpoints
from jqweb.main import WebService
from jqweb.overview import Sources
from jqweb.settings import WebSettings
from loadtest.report import Report
from loadtest.stacks import bench_stack

__all__ = ["FULL", "PAGES", "QUEUES", "QUICK", "TARGET_MS", "PageTimes", "Sizes", "WebReport", "run"]

TARGET_MS = 300.0
SHARED_DB = 10
"""On servers passed in (the test session's), the jobs live in this Redis database (flushed at the end)."""
TOKEN = "web-bench-reader-0123456789"
BATCH = 1000
IN_FLIGHT = 4
CLAIM = 500
FAIL_IN_FLIGHT = 20
HISTORY_DAYS = 7
BATCHES_PER_DAY = 48
OPEN_SEGMENTS = 8
REQUEST_TIMEOUT_S = 120.0
DAY_MS = 86_400_000

QUEUES: tuple[tuple[str, float, tuple[str, ...]], ...] = (
    ("emails", 0.4, ("email.send", "email.digest", "email.bounce")),
    ("reports", 0.3, ("report.build", "report.export", "report.mail")),
    ("images", 0.2, ("image.resize", "image.thumb", "image.scan")),
    ("billing", 0.1, ("billing.charge", "billing.refund", "billing.invoice")),
)
"""Queue suffix, share of the jobs, kinds."""

STATES: tuple[tuple[str, float], ...] = (
    ("running", 0.005),
    ("dead", 0.015),
    ("done", 0.10),
    ("delayed", 0.08),
    ("pending", 0.80),
)
"""Share of each queue's jobs per state (the finished and running ones are made first)."""

PAGES: tuple[str, ...] = (
    "/",
    "/overview/live",
    "/topics",
    "/queues",
    "/queues/{q}",
    "/jobs?queue={q}&state=pending",
    "/jobs?source=archive&queue={q}",
    "/jobs/{q}/{id}",
    "/jobs/{q}/{id}/timeline",
    "/jobs/{q}/{hid}",
    "/dead?queue={q}",
    "/schedules",
    "/graphs",
    "/workers",
    "/audit",
)
"""The pages requested: ``{q}`` is the largest queue, ``{id}`` one of its pending jobs (its page, and the
timeline fragment the page loads after it showed: a scan of the history's events), ``{hid}`` a job only
the history holds (its page reads the history's latest snapshot)."""


ARCHIVED_ID = "h000000001"
"""A job of the generated history (ids ``h<9 digits>``; job 1 is in the largest queue, see ``_jobs_sql``)."""


@dataclass(frozen=True)
class Sizes:
    jobs: int
    history_rows: int
    requests: int = 20
    """Measured requests per page."""
    warmups: int = 2
    """Unmeasured requests per page before them."""


FULL = Sizes(jobs=1_000_000, history_rows=10_000_000)
QUICK = Sizes(jobs=20_000, history_rows=200_000)


@dataclass
class PageTimes:
    """One page: the path requested, every status (warm-ups included) and the measured times (ms)."""

    page: str
    path: str
    statuses: list[int] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    """The ``X-Jobq-Error`` of each non-200 answer (``""`` when there was none)."""
    times_ms: list[float] = field(default_factory=list)

    @property
    def status(self) -> str:
        """``ok`` (every answer 200), ``missing`` (404 ``not_found``: no such route yet) or ``failed``."""
        if self.statuses and all(s == 200 for s in self.statuses):
            return "ok"
        if self.statuses and all(s == 404 for s in self.statuses) and set(self.codes) <= {"not_found"}:
            return "missing"
        return "failed"

    def quantile(self, q: float) -> float:
        """The ``q`` quantile of the times (nearest rank), NaN with none."""
        if not self.times_ms:
            return math.nan
        ordered = sorted(self.times_ms)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    @property
    def under_target(self) -> bool | None:
        """p95 < :data:`TARGET_MS` (None unless the page answered: a missing page has no verdict)."""
        return self.quantile(0.95) < TARGET_MS if self.status == "ok" else None

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "status": self.status,
            "status_counts": {str(s): self.statuses.count(s) for s in sorted(set(self.statuses))},
            "p50_ms": self.quantile(0.5),
            "p95_ms": self.quantile(0.95),
            "max_ms": max(self.times_ms, default=math.nan),
            "under_target": self.under_target,
        }


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.1f}"


def _verdict(p: PageTimes) -> str:
    return {True: "yes", False: "NO", None: "-"}[p.under_target]


@dataclass
class WebReport(Report):
    """A :class:`Report` with the per-page times (``results.json``: ``pages``; ``report.md``: a table)."""

    pages: list[PageTimes] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "pages": [p.as_dict() for p in self.pages]}

    def markdown(self) -> str:
        lines = [
            "",
            f"## Pages (p95 < {TARGET_MS:g} ms?)",
            "",
            "| page | path | status | p50 ms | p95 ms | max ms | requests | < 300 ms |",
            "|---|---|---|---:|---:|---:|---:|---|",
        ]
        for p in self.pages:
            lines.append(
                f"| `{p.page}` | `{p.path}` | {p.status} | {_ms(p.quantile(0.5))} | {_ms(p.quantile(0.95))} "
                f"| {_ms(max(p.times_ms, default=math.nan))} | {len(p.statuses)} | {_verdict(p)} |"
            )
        return super().markdown() + "\n".join(lines) + "\n"

    def table(self) -> Table:
        table = Table(
            "page", "status", "p50 ms", "p95 ms", "max ms", f"p95 < {TARGET_MS:g} ms", title="jobq bench web"
        )
        for p in self.pages:
            table.add_row(
                p.page,
                p.status,
                _ms(p.quantile(0.5)),
                _ms(p.quantile(0.95)),
                _ms(max(p.times_ms, default=math.nan)),
                _verdict(p),
            )
        return table


# --- the servers -----------------------------------------------------------------------------------


@dataclass
class Setup:
    """The servers and names of one run."""

    ep: Endpoints
    shared: bool
    """Servers passed in: clean up what this run added to them."""
    tag: str = field(default_factory=lambda: f"wb{os.getpid()}")
    history: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix=f"jobq-bench-web-{os.getpid()}-")) / "history"
    )

    @property
    def url(self) -> str:
        return self.ep.redis_url or ""

    @property
    def topic(self) -> str:
        return f"{self.tag}.jobs"

    def queue(self, suffix: str) -> str:
        return f"{self.tag}.{suffix}"

    def sources(self) -> Sources:
        kv = f"jobq-bench-web/{self.tag}"
        return Sources(
            routing=RoutingSettings(
                routes=[Route(queues=f"{self.tag}.*", topic=self.topic)], default_topic=""
            ),
            relay=RelayKeys(topics=[self.topic], kv_prefix=kv, group_prefix=f"{self.tag}-relay"),
            kafka=KafkaSettings(bootstrap=self.ep.kafka_bootstrap),
            consul=ConsulSettings.model_validate({"addr": self.ep.consul_addr}),
            redis=RedisSettings.model_validate({"url": self.url}),
            cron=CronSettings(kv_prefix=kv),
            history=HistorySettings.model_validate({"path": str(self.history)}),
        )


@contextmanager
def _setup(endpoints: Endpoints | None) -> Iterator[Setup]:
    with bench_stack("web", endpoints) as ep:
        if endpoints is not None:
            url = urlsplit(ep.redis_url or "")
            ep = Endpoints(ep.kafka_bootstrap, ep.consul_addr, urlunsplit(url._replace(path=f"/{SHARED_DB}")))
        setup = Setup(ep, shared=endpoints is not None)
        try:
            yield setup
        finally:
            shutil.rmtree(setup.history.parent, ignore_errors=True)
            if setup.shared:
                _clean_shared(setup)


def _clean_shared(setup: Setup) -> None:
    """Remove what the run added to servers it was handed: its Redis database, topic and schedules."""
    with redis.Redis.from_url(setup.url) as client:
        client.flushdb()
    admin = AdminClient({"bootstrap.servers": setup.ep.kafka_bootstrap, "log_level": 0})
    for fut in admin.delete_topics([setup.topic], operation_timeout=15, request_timeout=15).values():
        with contextlib.suppress(Exception):  # already gone, or never made: nothing to remove
            fut.result(timeout=20)
    asyncio.run(_drop_schedules(setup.sources()))


async def _drop_schedules(sources: Sources) -> None:
    consul = consul_client(sources.consul)
    try:
        store = CronStore(consul, sources.cron.kv_prefix)
        for schedule in await store.list():
            await store.delete(schedule.name)
    finally:
        await close_consul(consul)


# --- fill: Redis ------------------------------------------------------------------------------------


def plan(jobs: int) -> dict[str, dict[str, int]]:
    """Queue suffix -> state -> jobs (the shares of :data:`QUEUES` and :data:`STATES`; ``jobs`` in all)."""
    out: dict[str, dict[str, int]] = {}
    left = jobs
    for i, (suffix, share, _) in enumerate(QUEUES):
        n = left if i == len(QUEUES) - 1 else round(jobs * share)
        left -= n
        states = {state: int(n * s) for state, s in STATES}
        states["pending"] += n - sum(states.values())
        out[suffix] = states
    return out


def _envelopes(queue: str, kinds: Sequence[str], ids: range, prefix: str, delayed: bool) -> list[Any]:
    now = now_ms()
    return [
        new_envelope(
            queue,
            kinds[i % len(kinds)],
            {"account": i % 9973, "ref": f"{prefix}{i}", "note": "bench"},
            id=f"{prefix}{i:08d}",
            run_at=now + 1_800_000 + (i % 9_000) * 1_000 if delayed else None,
            at_ms=now,
        )
        for i in ids
    ]


async def _enqueue(
    engine: Engine, queue: str, kinds: Sequence[str], n: int, prefix: str, delayed: bool, tick: Any
) -> None:
    """``n`` jobs (ids ``<prefix>00000000``...) in batches of :data:`BATCH`, :data:`IN_FLIGHT` at a time."""
    starts = list(range(0, n, BATCH))
    for group in range(0, len(starts), IN_FLIGHT):
        chunk = starts[group : group + IN_FLIGHT]
        batches = [_envelopes(queue, kinds, range(s, min(n, s + BATCH)), prefix, delayed) for s in chunk]
        await asyncio.gather(*(engine.enqueue_batch(b) for b in batches))
        tick(sum(len(b) for b in batches))


async def _finish(engine: Engine, queue: str, states: dict[str, int], tick: Any) -> None:
    """Claim the queue's first jobs: leave ``running`` of them running, fail ``dead`` permanently and
    complete the rest of ``done``."""
    todo = {"running": states["running"], "dead": states["dead"], "done": states["done"]}
    while sum(todo.values()):
        claimed = await engine.jobs.claim(
            queue, min(CLAIM, sum(todo.values())), lease_ms=DAY_MS, worker="bench"
        )
        if not claimed:
            raise RuntimeError(f"{queue}: nothing left to claim with {todo} still to make")
        keep = min(todo["running"], len(claimed))
        todo["running"] -= keep
        rest = claimed[keep:]
        dead, done = rest[: todo["dead"]], rest[todo["dead"] :]
        todo["dead"] -= len(dead)
        todo["done"] -= len(done)
        for i in range(0, len(dead), FAIL_IN_FLIGHT):
            await asyncio.gather(
                *(
                    engine.jobs.fail(
                        queue, (c.id, c.attempt, c.token), "ValueError: bench: bad input", permanent=True
                    )
                    for c in dead[i : i + FAIL_IN_FLIGHT]
                )
            )
        await engine.jobs.complete_many(queue, [((c.id, c.attempt, c.token), b'{"ok": true}') for c in done])
        tick(len(claimed))


async def fill_redis(setup: Setup, jobs: int, progress: Progress) -> dict[str, dict[str, int]]:
    """Store the jobs of :func:`plan` into Redis; the plan (with the queues' full names)."""
    planned = plan(jobs)
    task = progress.add_task(f"{jobs:,} jobs into Redis", total=jobs)

    def tick(n: int) -> None:
        progress.advance(task, n)

    client = aioredis.Redis.from_url(setup.url, socket_timeout=120)
    try:
        engine = Engine(client)
        for suffix, _, kinds in QUEUES:
            queue, states = setup.queue(suffix), planned[suffix]
            await engine.admin.configure_queue(queue, QueueConfig(events_cap=0))
            made = states["running"] + states["dead"] + states["done"]
            await _enqueue(engine, queue, kinds, made, "f", False, lambda n: None)
            await _finish(engine, queue, states, tick)
            await _enqueue(engine, queue, kinds, states["delayed"], "d", True, tick)
            await _enqueue(engine, queue, kinds, states["pending"], "j", False, tick)
    finally:
        await client.aclose()
    return {setup.queue(s): states for s, states in planned.items()}


async def add_schedules(setup: Setup) -> int:
    """A few cron schedules for the schedules page; how many."""
    sources = setup.sources()
    consul = consul_client(sources.consul)
    try:
        store = CronStore(consul, sources.cron.kv_prefix)
        n = 0
        for suffix, _, kinds in QUEUES:
            for i, kind in enumerate(kinds):
                name = f"{setup.tag}-{suffix}-{i}"
                cron = f"{i * 7 % 60} */{i + 1} * * *"
                sched = CronSchedule.model_validate(
                    {"name": name, "cron": cron, "queue": setup.queue(suffix), "kind": kind}
                )
                await store.put(sched, now_ms())
                n += 1
        return n
    finally:
        await close_consul(consul)


# --- fill: the history tables ------------------------------------------------------------------------


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _jobs_sql(setup: Setup, jobs: int, end_ms: int) -> str:
    """One row per archived job ``j``: its queue, kind, id and the time of its first event (the jobs
    spread evenly over :data:`HISTORY_DAYS` days ending at ``end_ms``)."""
    queues = "[" + ", ".join(_lit(setup.queue(s)) for s, _, _ in QUEUES) + "]"
    kinds = "[" + ", ".join(_lit(k) for _, _, ks in QUEUES for k in ks) + "]"
    span = HISTORY_DAYS * DAY_MS
    return f"""
        SELECT j, {kinds}[q * 3 + CAST(j % 3 AS INTEGER) + 1] AS kind,
               {queues}[q + 1] AS queue, 'h' || lpad(CAST(j AS VARCHAR), 9, '0') AS id,
               {end_ms - span} + CAST(j * {span / max(1, jobs)} AS BIGINT) AS t0,
               j % 50 = 0 AS failed
        FROM (
          SELECT range AS j, CASE WHEN range % 10 < 4 THEN 0 WHEN range % 10 < 7 THEN 1
                                  WHEN range % 10 < 9 THEN 2 ELSE 3 END AS q
          FROM range({jobs})
        )
    """


_EVENT_SELECT = """
    SELECT id, queue, kind,
           CASE v WHEN 1 THEN '' WHEN 2 THEN 'pending' ELSE 'running' END AS from_state,
           CASE v WHEN 1 THEN 'pending' WHEN 2 THEN 'running'
                  ELSE CASE WHEN failed THEN 'errored' ELSE 'completed' END END AS to_state,
           v, t0 + (v - 1) * (40 + j % 900) AS at_ms,
           CASE WHEN v = 1 THEN 0 ELSE 1 END AS attempt,
           CASE WHEN v = 1 THEN '' ELSE 'worker-' || CAST(j % 8 AS VARCHAR) END AS worker,
           CASE WHEN v = 3 AND failed THEN 'ValueError' ELSE '' END AS error,
           CASE WHEN v = 3 AND failed THEN 'd' || CAST(j % 7 AS VARCHAR) ELSE '' END AS digest,
           CASE WHEN v = 3 AND failed THEN 'bench: bad input ' || CAST(j % 7 AS VARCHAR) ELSE '' END
             AS message,
           CAST(0 AS BIGINT) AS run_at, 'bench' AS origin,
           CASE WHEN v = 1 THEN t0 ELSE 0 END AS accepted_at
"""
"""The columns of ``jqruntime.stores.history.EVENT_COLUMNS`` for event ``v`` (1..3) of a job of
:func:`_jobs_sql`."""


def fill_history(setup: Setup, rows: int, progress: Progress) -> dict[str, int]:
    """Write ``rows`` events (three per job) and the jobs' ``current`` rows under ``setup.history``."""
    task = progress.add_task(f"{rows:,} history rows (DuckDB)", total=2)
    jobs, end = max(1, rows // 3), now_ms()
    per_batch = max(1, jobs // (HISTORY_DAYS * BATCHES_PER_DAY))
    open_from = max(0, jobs - OPEN_SEGMENTS * per_batch)
    events, current = setup.history / EVENTS_DIR, setup.history / CURRENT_DIR
    events.mkdir(parents=True)
    current.mkdir(parents=True)
    tag = f"{setup.tag}-q"
    con = duckdb.connect(":memory:")
    try:
        con.execute(f"CREATE TEMP VIEW hjobs AS {_jobs_sql(setup, jobs, end)}")
        con.execute(f"""
            COPY (
              {_EVENT_SELECT},
                     CAST(epoch_ms(t0 + (v - 1) * (40 + j % 900)) AS DATE) AS day,
                     {_lit(tag)} || '-' || CAST(j // {per_batch} AS VARCHAR) AS batch
              FROM hjobs CROSS JOIN (SELECT CAST(range AS BIGINT) AS v FROM range(1, 4))
            ) TO {_lit(str(events))} (FORMAT parquet, PARTITION_BY (day, batch))
        """)
        progress.advance(task)
        con.execute(f"""
            COPY (
              {_EVENT_SELECT}, t0 AS first_at,
                     CASE WHEN j >= {open_from}
                          THEN 'b' || {_lit(tag)} || '-' || CAST(j // {per_batch} AS VARCHAR)
                          ELSE 'c' || {_lit(tag)} || '-compacted' END AS seg
              FROM hjobs CROSS JOIN (SELECT CAST(3 AS BIGINT) AS v)
            ) TO {_lit(str(current))} (FORMAT parquet, PARTITION_BY (seg))
        """)
        progress.advance(task)
    finally:
        con.close()
    return {
        "history_events": jobs * 3,
        "history_jobs": jobs,
        "event_folders": sum(1 for _ in events.glob("day=*/batch=*")),
        "current_segments": sum(1 for _ in current.glob("seg=*")),
    }


# --- requests ----------------------------------------------------------------------------------------


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, str, float]:
    """Status, ``X-Jobq-Error`` and the ms until the whole body was read (status 0: no answer in time)."""
    headers = {"Accept": "text/html", "Authorization": f"Bearer {TOKEN}"}
    started = time.perf_counter()
    try:
        async with session.get(url, headers=headers, allow_redirects=False) as r:
            await r.read()
            return r.status, r.headers.get("X-Jobq-Error", ""), (time.perf_counter() - started) * 1000
    except (TimeoutError, aiohttp.ClientError) as exc:
        return 0, type(exc).__name__, (time.perf_counter() - started) * 1000


async def measure(setup: Setup, sizes: Sizes, queue: str, job_id: str, progress: Progress) -> list[PageTimes]:
    """Serve the dashboard over ``setup`` and request every page of :data:`PAGES`."""
    settings = WebSettings.model_validate({"port": 0, "read_tokens": [SecretStr(f"bench:{TOKEN}")]})
    per_page = sizes.warmups + sizes.requests
    task = progress.add_task("page requests", total=len(PAGES) * per_page)
    out: list[PageTimes] = []
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with (
        WebService(settings, setup.sources()) as service,
        aiohttp.ClientSession(timeout=timeout) as session,
    ):
        for page in PAGES:
            times = PageTimes(page, page.format(q=queue, id=job_id, hid=ARCHIVED_ID))
            for i in range(per_page):
                status, code, ms = await _get(session, service.url + times.path)
                times.statuses.append(status)
                times.codes.append("" if status == 200 else code)
                if i >= sizes.warmups and status == 200:
                    times.times_ms.append(ms)
                progress.advance(task)
                if status == 404 and code == "not_found":  # no such page yet: once is enough
                    progress.advance(task, per_page - i - 1)
                    break
            out.append(times)
    return out


# --- the run -----------------------------------------------------------------------------------------


async def _fill_and_measure(
    setup: Setup, sizes: Sizes, progress: Progress
) -> tuple[list[PageTimes], dict[str, Any]]:
    facts: dict[str, Any] = {}
    started = time.monotonic()
    planned = await fill_redis(setup, sizes.jobs, progress)
    facts["fill_redis_s"] = round(time.monotonic() - started, 1)
    facts["jobs_per_state"] = {s: sum(p[s] for p in planned.values()) for s, _ in STATES}
    ensure(setup.sources().kafka, job_topics([setup.topic], sides=False))
    facts["schedules"] = await add_schedules(setup)
    started = time.monotonic()
    facts |= await asyncio.to_thread(fill_history, setup, sizes.history_rows, progress)
    facts["fill_history_s"] = round(time.monotonic() - started, 1)
    with redis.Redis.from_url(setup.url) as client:
        facts["redis_used_memory_mb"] = round(int(client.info("memory")["used_memory"]) / 2**20)
    largest = setup.queue(QUEUES[0][0])
    pages = await measure(setup, sizes, largest, "j00000000", progress)
    return pages, facts


def run(
    quick: bool = False,
    *,
    sizes: Sizes | None = None,
    endpoints: Endpoints | None = None,
    jobs: int | None = None,
    history_rows: int | None = None,
    requests: int | None = None,
) -> WebReport:
    """``sizes`` (default :data:`FULL`, ``quick``: :data:`QUICK`), ``jobs`` / ``history_rows`` /
    ``requests`` replacing its own when given; ``endpoints``: run on those servers (Redis database
    :data:`SHARED_DB`, cleaned up afterwards) instead of a throw-away stack."""
    sizes = sizes or (QUICK if quick else FULL)
    given = {"jobs": jobs, "history_rows": history_rows, "requests": requests}
    sizes = replace(sizes, **{k: v for k, v in given.items() if v is not None})
    if sizes.jobs < len(QUEUES) * 100 or sizes.history_rows < 3 or sizes.requests < 1:
        raise ValueError(f"sizes too small: {sizes} (at least {len(QUEUES) * 100} jobs, 3 rows, 1 request)")
    report = WebReport("web", {**asdict(sizes), "target_ms": TARGET_MS})
    console = Console(stderr=True, width=max(120, shutil.get_terminal_size((120, 24)).columns))
    started = time.monotonic()
    with _setup(endpoints) as setup, Progress(console=console) as progress:
        pages, facts = asyncio.run(_fill_and_measure(setup, sizes, progress))
    report.params |= facts
    report.pages = pages
    for p in pages:
        if p.status == "ok":
            report.add(f"{p.page} p50", "ms", [p.quantile(0.5)])
            report.add(f"{p.page} p95", "ms", [p.quantile(0.95)])
            report.add(f"{p.page} max", "ms", [max(p.times_ms)])
    report.notes += _notes(report, sizes, time.monotonic() - started)
    report.artifacts["pages.png"] = lambda path: _plot(report, path)
    console.print(report.table())
    return report


def _notes(report: WebReport, sizes: Sizes, elapsed_s: float) -> list[str]:
    ok = [p for p in report.pages if p.status == "ok"]
    under = [p for p in ok if p.under_target]
    lines = [
        f"{sizes.jobs:,} jobs in Redis ({report.params.get('jobs_per_state')}), {sizes.history_rows:,} "
        f"history rows; {sizes.warmups} warm-up + {sizes.requests} measured requests per page, one at a "
        f"time; run took {elapsed_s:.0f} s",
        f"{len(under)} of {len(ok)} answering pages have p95 < {TARGET_MS:g} ms",
    ]
    for p in report.pages:
        if p.status == "missing":
            lines.append(f"{p.page}: missing (404 not_found: the page is not written yet)")
        elif p.status == "failed":
            counts = {s: p.statuses.count(s) for s in sorted(set(p.statuses))}
            codes = sorted({c for c in p.codes if c})
            lines.append(f"{p.page}: FAILED, statuses {counts}, codes {codes}")
        elif not p.under_target:
            lines.append(f"{p.page}: p95 {p.quantile(0.95):.0f} ms, over the {TARGET_MS:g} ms target")
    return lines


def _plot(report: WebReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pages = report.pages
    p50 = [0.0 if p.status != "ok" else p.quantile(0.5) for p in pages]
    p95 = [0.0 if p.status != "ok" else p.quantile(0.95) for p in pages]
    xs = list(range(len(pages)))
    fig, ax = plt.subplots(figsize=(11, 4.8))
    ax.bar([x - 0.2 for x in xs], p50, 0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], p95, 0.4, label="p95")
    ax.axhline(TARGET_MS, color="red", linestyle="--", linewidth=1, label=f"{TARGET_MS:g} ms target")
    labels = [p.page if p.status == "ok" else f"{p.page}\n({p.status})" for p in pages]
    ax.set_xticks(xs, labels, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("ms to the full body")
    if max([*p95, 0.0]) > 10 * TARGET_MS:
        ax.set_yscale("log")
    p = report.params
    ax.set_title(f"jobq web pages at {p['jobs']:,} jobs in Redis and {p['history_rows']:,} history rows")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
