"""``jobq cron``: cron and periodic schedules (kept in Consul KV, fired by ``jobq scheduler``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import orjson
import typer
from rich.console import Console
from rich.table import Table

from jqcore.clock import now_ms
from jqcore.cron import check_name, parse_schedule
from jqcore.errors import CronInvalid, CronNotFound, FieldError
from jqcore.settings.common import load
from jqcore.settings.pipeline import CronSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqengine import Engine, connect
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores.cron import CronStore, fire_now, overview

__all__ = ["app"]

app = typer.Typer(
    help="Cron and periodic schedules: kept in Consul KV (JOBQ_CRON_KV_PREFIX), fired by `jobq scheduler`.",
    no_args_is_help=True,
)
T = TypeVar("T")


def _run(action: Callable[[CronStore], Awaitable[T]]) -> T:
    async def go() -> T:
        client = consul_client(load(ConsulSettings))
        try:
            return await action(CronStore(client, load(CronSettings).kv_prefix))
        finally:
            await close_consul(client)

    return asyncio.run(go())


def _when(ms: int | None) -> str:
    if not ms:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The schedule's name (1-64 of A-Z a-z 0-9 . _ -).")],
    queue: Annotated[str, typer.Option(help="Queue the jobs go to.")],
    kind: Annotated[str, typer.Option(help="Kind of the jobs.")],
    cron: Annotated[
        str | None, typer.Option(help="Cron expression, e.g. '*/5 * * * *', '0 9 * * mon-fri', '@daily'.")
    ] = None,
    tz: Annotated[str, typer.Option(help="Time zone of --cron (IANA name).")] = "UTC",
    every: Annotated[
        int | None, typer.Option(min=1, help="Or a fixed interval in seconds (instead of --cron).")
    ] = None,
    args: Annotated[str, typer.Option(help="The jobs' args, as JSON.")] = "null",
    misfire: Annotated[
        str, typer.Option(help="After a downtime: skip (default), once (one job), catch_up (each slot).")
    ] = "skip",
    catch_up_max: Annotated[int, typer.Option(min=1, help="Most missed slots fired by catch_up.")] = 10,
    grace: Annotated[float, typer.Option(min=0, help="Seconds a late slot still fires under skip.")] = 60.0,
    priority: Annotated[int | None, typer.Option(help="The jobs' priority (lower first).")] = None,
    max_attempts: Annotated[int | None, typer.Option(min=1, help="The jobs' attempts.")] = None,
    paused: Annotated[bool, typer.Option(help="Add it paused.")] = False,
) -> None:
    """Add or replace a schedule; its first slot comes after now."""
    try:
        job_args: Any = orjson.loads(args)
    except orjson.JSONDecodeError as exc:
        raise CronInvalid(FieldError("args", f"not JSON: {exc}")) from None
    schedule = parse_schedule(
        {
            "name": name,
            "queue": queue,
            "kind": kind,
            "cron": cron,
            "tz": tz,
            "every_s": every,
            "args": job_args,
            "misfire": misfire,
            "catch_up_max": catch_up_max,
            "grace_s": grace,
            "priority": priority,
            "max_attempts": max_attempts,
            "paused": paused,
        }
    )
    stored = _run(lambda store: store.put(schedule, now_ms()))
    Console().print(f"schedule [bold]{stored.name}[/]: {stored.describe()} → {stored.queue} ({stored.kind})")


@app.command("list")
def list_(json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Every schedule with its last and next run."""
    rows = _run(lambda store: overview(store, now_ms()))
    console = Console()
    if json:
        console.print_json(orjson.dumps(rows).decode())
        return
    t = Table(title="Cron schedules")
    for col in ("name", "schedule", "queue", "kind", "misfire", "state", "last run", "next run", "fires"):
        t.add_column(col, no_wrap=col == "name")
    for r in rows:
        state = "[yellow]paused[/]" if r["paused"] else "active"
        t.add_row(
            r["name"],
            r["schedule"],
            r["queue"],
            r["kind"],
            r["misfire"],
            state,
            _when(r["last_slot_ms"]),
            _when(r["next_slot_ms"]),
            str(r["fires"]),
        )
    console.print(t)


def _must(name: str, found: T | None) -> T:
    if found is None:
        raise CronNotFound(f"no cron schedule named {name!r} (see `jobq cron list`)")
    return found


@app.command("pause")
def pause(name: Annotated[str, typer.Argument(help="The schedule.")]) -> None:
    """Stop firing a schedule (its slots while paused are not misfires)."""
    check_name(name)
    _must(name, _run(lambda store: store.set_paused(name, True, now_ms())))
    Console().print(f"schedule {name} paused")


@app.command("resume")
def resume(name: Annotated[str, typer.Argument(help="The schedule.")]) -> None:
    """Fire a paused schedule again, from its next slot on."""
    check_name(name)
    _must(name, _run(lambda store: store.set_paused(name, False, now_ms())))
    Console().print(f"schedule {name} resumed")


@app.command("remove")
def remove(name: Annotated[str, typer.Argument(help="The schedule.")]) -> None:
    """Delete a schedule and its state (jobs it already enqueued stay)."""
    check_name(name)
    if not _run(lambda store: store.delete(name)):
        _must(name, None)
    Console().print(f"schedule {name} removed")


@app.command("trigger")
def trigger(name: Annotated[str, typer.Argument(help="The schedule.")]) -> None:
    """Enqueue one job of the schedule now (id ``cron:<name>:<now ms>:manual``), paused or not."""
    check_name(name)
    schedule = _must(name, _run(lambda store: store.get(name)))

    async def go() -> list[str]:
        client = connect(load(RedisSettings))
        try:
            return await fire_now(Engine(client), schedule, [now_ms()], manual=True)
        finally:
            await client.aclose()

    (job_id,) = asyncio.run(go())
    Console().print(f"enqueued {job_id} into {schedule.queue}")
