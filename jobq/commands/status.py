"""``jobq status``: one screen for the whole pipeline (``--json`` for machines, ``--watch`` to follow).

Kafka: per topic and partition the end offset, the relay group's committed offset, the lag in records
and in seconds (age of the oldest unrelayed record). Consul: who holds each topic's lock and since when.
Redis: every queue's depth per state, oldest pending age, dead letters; canary health per partition;
how many gateways and worker pools announced themselves in the last 20 s.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

import consul
import orjson
import typer
from confluent_kafka import Consumer, TopicPartition
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from jqcore import keys, membership
from jqcore.clock import now_ms
from jqcore.consulconn import consul_client
from jqcore.cronstore import CronStore, overview
from jqcore.history import HistoryStore
from jqcore.presence import count_alive
from jqcore.redisconn import connect
from jqcore.routing import RoutingSettings
from jqcore.settings import ConsulSettings, CronSettings, HistorySettings, KafkaSettings, RedisSettings, load
from jqcore.state.engine import Engine
from jqrelay.settings import RelaySettings

__all__ = ["collect", "status"]


def _kafka(kafka: KafkaSettings, topics: list[str], group_prefix: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for topic in topics:
        group = f"{group_prefix}.{topic}"
        c = Consumer(
            {**kafka.client_config(), "group.id": group, "enable.auto.commit": False, "log_level": 0}
        )
        try:
            md = c.list_topics(topic, timeout=5).topics.get(topic)
            if md is None or md.error is not None:
                rows.append({"topic": topic, "partition": None, "problem": "topic missing"})
                continue
            parts = [TopicPartition(topic, p) for p in sorted(md.partitions)]
            for tp in c.committed(parts, timeout=5):
                low, high = c.get_watermark_offsets(tp, timeout=5)
                done = tp.offset if tp.offset >= 0 else low
                lag = max(0, high - done)
                rows.append(
                    {
                        "topic": topic,
                        "partition": tp.partition,
                        "end": high,
                        "committed": done,
                        "lag": lag,
                        "lag_s": _lag_seconds(c, tp, done) if lag else 0.0,
                    }
                )
        finally:
            c.close()
    return rows


PAST_DUE_MS = 1000
"""A job the timers should have moved this long ago counts as past due (no scheduler keeps its queue?)."""


def _lag_seconds(c: Consumer, tp: TopicPartition, offset: int) -> float | None:
    """Age of the oldest record not yet relayed (its Kafka timestamp)."""
    c.assign([TopicPartition(tp.topic, tp.partition, offset)])
    for msg in c.consume(1, 2.0):
        if msg.error() is None:
            _, ts = msg.timestamp()
            return round(max(0.0, time.time() - ts / 1000), 1)
    return None


def _locks(consul_settings: ConsulSettings, topics: list[str], kv_prefix: str) -> list[dict[str, Any]]:
    token = consul_settings.token.get_secret_value() if consul_settings.token else None
    c = consul.Consul(
        host=consul_settings.host, port=consul_settings.port, scheme=consul_settings.scheme, token=token
    )
    rows = []
    for topic in topics:
        _, entry = c.kv.get(f"{kv_prefix}/locks/{topic}")
        row: dict[str, Any] = {"topic": topic, "holder": None, "since_s": None, "fence": None}
        if entry and entry.get("Session"):
            try:
                value = orjson.loads(entry.get("Value") or b"{}")
            except orjson.JSONDecodeError:
                value = {"holder": (entry.get("Value") or b"").decode()}
            row.update(
                holder=value.get("holder"),
                since_s=round(time.time() - value["since"], 1) if "since" in value else None,
                fence=entry.get("LockIndex"),
            )
        rows.append(row)
    return rows


def _events_cell(q: dict[str, Any]) -> str:
    """Unshipped events against the queue's cap (yellow past half: Kafka or the shippers are behind)."""
    cap, waiting = q.get("events_cap", 0), q.get("events_backlog", 0)
    if not cap:
        return "off"
    text = f"{waiting}/{cap}"
    return f"[yellow]{text}[/]" if waiting * 2 >= cap else text


async def _redis(redis: RedisSettings) -> dict[str, Any]:
    client = connect(redis)
    try:
        engine = Engine(client)
        queues = []
        for q in await engine.queues():
            d = await engine.depth(q)
            stats = await engine.queue_stats(q)
            names = ("handed_back", "duplicates", "reopened", "events_dropped")
            counted = {k: stats.get(k, 0) for k in names}
            past_due = await engine.past_due(q, PAST_DUE_MS)
            backlog = (await engine.events_backlog([q]))[q]
            events_cap = (await engine.queue_config(q)).events_cap
            queues.append(
                {
                    "queue": q,
                    **d.as_dict(),
                    **counted,
                    "past_due": past_due,
                    "events_backlog": backlog,
                    "events_cap": events_cap,
                }
            )
        raw = await client.hgetall(keys.CANARY_HEALTH_KEY)
        canary = {
            (k.decode() if isinstance(k, bytes) else k): orjson.loads(v) for k, v in sorted(raw.items())
        }
        return {
            "queues": queues,
            "canary": canary,
            "gateways": await count_alive(client, "gate"),
            "workers": await count_alive(client, "worker"),
            "schedulers": await membership.groups(client),
        }
    finally:
        await client.aclose()


async def _cron(consul_settings: ConsulSettings, cron: CronSettings) -> list[dict[str, Any]]:
    client = consul_client(consul_settings)
    try:
        return await overview(CronStore(client, cron.kv_prefix), now_ms())
    finally:
        await client.http._session.close()


def collect() -> dict[str, Any]:
    routing, relay = load(RoutingSettings), load(RelaySettings)
    topics = relay.topics or routing.topics()
    out: dict[str, Any] = {"at": round(time.time(), 3), "topics": topics}
    for name, fn in (
        ("kafka", lambda: _kafka(load(KafkaSettings), topics, relay.group_prefix)),
        ("locks", lambda: _locks(load(ConsulSettings), topics, relay.kv_prefix)),
        ("redis", lambda: asyncio.run(_redis(load(RedisSettings)))),
        ("cron", lambda: asyncio.run(_cron(load(ConsulSettings), load(CronSettings)))),
        ("history", lambda: _history(load(HistorySettings))),
    ):
        try:
            out[name] = fn()
        except Exception as exc:  # one backend down must not hide the others
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def render(s: dict[str, Any]) -> Group:
    return Group(
        _kafka_table(s.get("kafka")),
        _locks_table(s.get("locks")),
        *_redis_tables(s.get("redis")),
        _cron_table(s.get("cron")),
        _history_line(s.get("history")),
    )


def _history(settings: HistorySettings) -> dict[str, Any]:
    """What the history tables hold (``jobq history run`` builds them): jobs, events, the newest event."""
    root = settings.root
    if not root.is_dir():
        return {"path": str(root), "present": False}
    rows = HistoryStore(root).query("SELECT count(*), max(at_ms) FROM current").rows
    jobs, latest = rows[0] if rows else (0, None)
    return {"path": str(root), "present": True, "jobs": jobs, "latest_event_at": latest}


def _history_line(h: Any) -> str:
    if not isinstance(h, dict):
        return ""
    if "error" in h:
        return f"[red]History unreadable:[/] {h['error']}"
    if not h.get("present"):
        return f"History: no tables at {h['path']} (`jobq history run` builds them from the events topic)"
    latest = h.get("latest_event_at")
    age = f", newest event {time.time() - latest / 1000:.0f} s ago" if latest else ""
    return f"History ({h['path']}): {h['jobs']} jobs{age}  (`jobq history JOB_ID`)"


def _cron_table(cron: Any) -> Any:
    if not isinstance(cron, list):
        return f"[red]Cron schedules unreadable (Consul):[/] {cron}"
    t = Table(title="Cron schedules (Consul)")
    for col in ("name", "schedule", "queue", "state", "last run", "next run", "fires", "dropped"):
        t.add_column(col, no_wrap=col == "name")
    for r in cron:
        t.add_row(
            r["name"],
            r["schedule"],
            r["queue"],
            "[yellow]paused[/]" if r["paused"] else "active",
            _clock(r["last_slot_ms"]),
            _clock(r["next_slot_ms"]),
            str(r["fires"]),
            f"[yellow]{r['dropped']}[/]" if r["dropped"] else "0",
        )
    return t


def _clock(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) if ms else ""


def _kafka_table(kafka: Any) -> Table:
    t = Table(title="Kafka → relay (lag per partition)", expand=False)
    for col in ("topic", "partition", "end", "committed", "lag", "lag s"):
        t.add_column(col, justify="right" if col not in ("topic",) else "left")
    if isinstance(kafka, list):
        for r in kafka:
            t.add_row(
                r["topic"],
                str(r.get("partition")),
                *(str(r.get(k, "")) for k in ("end", "committed", "lag", "lag_s")),
            )
    else:
        t.add_row("[red]unreachable[/]", "", "", "", "", str(kafka))
    return t


def _locks_table(locks: Any) -> Table:
    t = Table(title="Relay locks (Consul)")
    for col in ("topic", "holder", "held for s", "fence"):
        t.add_column(col)
    if isinstance(locks, list):
        for r in locks:
            holder = r["holder"] or "[red]nobody[/]"
            t.add_row(r["topic"], holder, str(r["since_s"] or ""), str(r["fence"] or ""))
    else:
        t.add_row("[red]unreachable[/]", str(locks), "", "")
    return t


def _schedulers_table(schedulers: dict[str, dict[str, str]]) -> Any:
    if not schedulers:
        return (
            "[red]No scheduler instance is alive:[/] delayed jobs, retries and expired leases wait "
            "(start `jobq scheduler`)."
        )
    t = Table(title="Schedulers (instances per group, heartbeats in Redis)")
    for col in ("group", "instance", "keeps"):
        t.add_column(col)
    for group, members in schedulers.items():
        for name, note in members.items():
            t.add_row(group, name, note)
    return t


def _redis_tables(redis: Any) -> list[Any]:
    parts: list[Any] = []
    if isinstance(redis, dict) and "queues" in redis:
        seen = f"gateways: {len(redis['gateways'])}   worker pools: {len(redis['workers'])}"
        t = Table(title=f"Queues (Redis)   {seen}")
        for col in (
            "queue",
            "pending",
            "delayed",
            "far",
            "running",
            "blocked",
            "dead",
            "finished",
            "handed back",
            "dup dropped",
            "oldest pending s",
            "past due",
            "events unshipped",
            "events dropped",
        ):
            if col == "queue":  # never cut a queue name to "demo.de…": the numbers wrap instead
                width = max([len(q["queue"]) for q in redis["queues"]] + [5])
                t.add_column(col, no_wrap=True, min_width=width)
            else:
                t.add_column(col, justify="right")
        for q in redis["queues"]:
            age = q["oldest_pending_age_ms"]
            dead = q["errored"]
            t.add_row(
                q["queue"],
                str(q["pending"]),
                str(q["delayed"]),
                str(q.get("far", 0)),
                str(q["running"]),
                str(q["blocked"]),
                f"[red]{dead}[/]" if dead else "0",
                str(q["finished"]),
                f"[yellow]{q['handed_back']}[/]" if q.get("handed_back") else "0",
                str(q.get("duplicates", 0)),
                f"{age / 1000:.1f}" if age is not None else "",
                f"[red]{q['past_due']}[/]" if q.get("past_due") else "0",
                _events_cell(q),
                f"[red]{q['events_dropped']}[/]" if q.get("events_dropped") else "0",
            )
        parts.append(t)
        parts.append(_schedulers_table(redis.get("schedulers", {})))
        t = Table(title="Canary (last heartbeat per partition)")
        for col in ("partition", "health", "total ms", "gate ms", "relay ms", "worker ms", "age s"):
            t.add_column(col)
        for part, r in redis["canary"].items():
            ms = r.get("ms") or {}
            health = "[green]ok[/]" if r.get("ok") else f"[red]{str(r.get('problem'))[:48]}[/]"
            age = f"{time.time() - r['at'] / 1000:.0f}" if "at" in r else ""
            t.add_row(part, health, *(str(ms.get(k, "")) for k in ("total", "gate", "relay", "worker")), age)
        parts.append(t)
    else:
        parts.append(f"[red]Redis unreachable:[/] {redis}")
    return parts


def status(
    json: Annotated[bool, typer.Option("--json", help="Print one JSON document (for machines).")] = False,
    watch: Annotated[float, typer.Option(help="Refresh every WATCH seconds (0: print once).")] = 0.0,
) -> None:
    """Show the pipeline: Kafka lag per partition, relay lock holders, queue depths, canary health.

    Reads the same settings as the services (JOBQ_KAFKA_*, JOBQ_REDIS_*, CONSUL_HTTP_ADDR, JOBQ_ROUTES);
    `eval "$(jobq stack env)"` points it at the local stack.
    """
    console = Console()
    if json:
        console.print_json(orjson.dumps(collect()).decode())
        return
    if not watch:
        console.print(render(collect()))
        return
    with Live(render(collect()), console=console, refresh_per_second=1) as live:
        while True:
            time.sleep(watch)
            live.update(render(collect()))
