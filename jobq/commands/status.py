"""``jobq status``: one screen for the whole pipeline (``--json`` for machines, ``--watch`` full-screen).

Kafka: per topic and partition the end offset, the relay group's committed offset, the lag in records
and in seconds (age of the oldest unrelayed record). Consul: who holds each topic's lock and since when.
Redis: every queue's depth per state, oldest pending age, dead letters; canary health per partition;
how many gateways and worker pools announced themselves in the last 20 s.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console, Group
from rich.table import Table

from jqweb import overview

__all__ = ["collect", "status"]


def _events_cell(q: dict[str, Any]) -> str:
    """Unshipped events against the queue's cap (yellow past half: Kafka or the shippers are behind)."""
    cap, waiting = q.get("events_cap", 0), q.get("events_backlog", 0)
    if not cap:
        return "off"
    text = f"{waiting}/{cap}"
    return f"[yellow]{text}[/]" if waiting * 2 >= cap else text


def collect(sources: overview.Sources | None = None) -> dict[str, Any]:
    """Every part of :func:`jqweb.overview.collect`, read with ``sources`` (default: the environment's
    settings)."""
    return asyncio.run(overview.collect(sources))


def render(s: dict[str, Any]) -> Group:
    return Group(
        _kafka_table(s.get("kafka")),
        _locks_table(s.get("locks")),
        *_redis_tables(s.get("redis")),
        _cron_table(s.get("cron")),
        _history_line(s.get("history")),
    )


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


def _switches_table(switches: list[dict[str, Any]]) -> Table:
    t = Table(title="[yellow]Kill switches in force[/] (`jobq switch lift NAME`)")
    for col in ("name", "action", "queue", "kind", "meta", "by"):
        t.add_column(col)
    for sw in switches:
        meta = ", ".join(f"{k}={v}" for k, v in sw["meta"].items())
        t.add_row(sw["name"], sw["action"], sw["queue"], sw["kind"] or "*", meta, sw.get("by", ""))
    return t


def _redis_tables(redis: Any) -> list[Any]:
    parts: list[Any] = []
    if isinstance(redis, dict) and "queues" in redis:
        seen = (
            f"gateways: {len(redis['gateways'])}   worker pools: {len(redis['workers'])}   "
            f"dispatchers: {len(redis.get('dispatchers', []))}   "
            f"dashboards: {len(redis.get('dashboards', []))}"
        )
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
        if redis.get("switches"):
            parts.append(_switches_table(redis["switches"]))
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
    watch: Annotated[
        float,
        typer.Option(
            help="Open a full-screen view refreshed every WATCH seconds (q quits, r refreshes now, "
            "p pauses; 0: print once).",
        ),
    ] = 0.0,
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
    from jobq.commands.status_tui import StatusApp  # textual loads only for the full-screen view

    StatusApp(every_s=watch).run()
