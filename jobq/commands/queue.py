"""``jobq queue ls|show|rate|pause|resume|purge``: the queues, through the gateway with ``JOBQ_TOKEN``
(:mod:`jobq.commands.remote`): a token limited to some queues sees and changes only those."""

from __future__ import annotations

import asyncio
import fnmatch
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from jobq.commands.remote import EXIT_NOT_OK, confirm, format_duration, print_json, run
from jqengine import QueueConfig
from jqruntime.client import JobqClient

__all__ = ["app"]

app = typer.Typer(
    help="Queues: list them with their depths, show one's settings, set its rate limit, pause, resume, purge"
    " its waiting jobs.",
    no_args_is_help=True,
)

Json = Annotated[bool, typer.Option("--json", help="One JSON document, for scripts.")]
Queue = Annotated[str, typer.Argument(help="The queue.")]
LOOKUPS_AT_ONCE = 8
"""Queues ``ls`` asks the gateway about at once."""
PURGE_CALL = 10_000
"""Jobs one purge call cancels at most (the route's own limit)."""
WAITING = ("pending", "delayed", "far")


async def _infos(jq: JobqClient, pattern: str) -> list[dict[str, Any]]:
    names = [q for q in (await jq.request("GET", "/v1/queues"))["queues"] if fnmatch.fnmatchcase(q, pattern)]
    gate = asyncio.Semaphore(LOOKUPS_AT_ONCE)

    async def one(name: str) -> dict[str, Any]:
        async with gate:
            return await jq.queue(name)

    return list(await asyncio.gather(*(one(n) for n in names)))


def _age(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 1000:.1f}s" if ms < 60_000 else format_duration(ms // 1000 * 1000)


@app.command("ls")
def ls(
    pattern: Annotated[str, typer.Argument(help="Only queues matching this glob (billing.*).")] = "*",
    as_json: Json = False,
) -> None:
    """The queues (those the token may see) with their depths, paused ones flagged."""
    infos = run(lambda jq: _infos(jq, pattern))
    if as_json:
        print_json({"queues": infos})
        return
    if not infos:
        Console().print("no queue" + ("" if pattern == "*" else f" matches {pattern!r}"))
        return
    table = Table()
    table.add_column("queue", no_wrap=True)
    for col in ("state", "pending", "delayed", "far", "running", "parked", "dead", "oldest pending"):
        table.add_column(col, justify="left" if col == "state" else "right")
    for info in infos:
        config, depth = info["config"], info["depth"]
        state = "[yellow]paused[/]" if config.get("paused") else "active"
        if config.get("enqueue_blocked"):
            state += " [red]blocked[/]"
        table.add_row(
            escape(info["queue"]),
            state,
            *(str(depth.get(k, 0)) for k in ("pending", "delayed", "far", "running", "blocked", "errored")),
            _age(depth.get("oldest_pending_age_ms")),
        )
    Console().print(table)


def _value(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


@app.command("show")
def show(queue: Queue, as_json: Json = False) -> None:
    """A queue's settings (those not at their defaults marked *), its topic and its depth per state."""
    info = run(lambda jq: jq.queue(queue))
    if as_json:
        print_json(info)
        return
    defaults = QueueConfig().as_dict()
    console = Console()
    config, depth = info["config"], info["depth"]
    state = "paused" if config.get("paused") else "active"
    console.print(f"queue [bold]{escape(queue)}[/] ({state}) → topic {escape(str(info.get('topic')))}")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    for key, value in config.items():
        shown = _value(value)
        if key.endswith("_ms") and isinstance(value, int) and value:
            shown += f" ({format_duration(value)})"
        mark = " *" if key in defaults and defaults[key] != value else ""
        grid.add_row(key, escape(shown) + mark)
    console.print(grid)
    console.print(
        "depth: "
        + ", ".join(f"{k} {v}" for k, v in depth.items() if k not in ("by_filter",) and v is not None)
    )
    rate = info.get("rate")
    console.print("rate: " + (escape(rate["limit"]) if rate else "unknown (Consul did not answer)"))


@app.command("rate")
def rate(
    queue: Queue,
    limit: Annotated[
        str | None,
        typer.Argument(
            help="50/s, 3000/m, 100/h, '50/s burst 200', paused, unlimited; none: show the limit in force."
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Show or set a queue's live rate limit (kept in Consul; every relay applies it within a second).
    Jobs over the rate, and every job while ``paused``, wait in order in the topic's holding lane in Kafka;
    the topic's other queues keep flowing. (``jobq queue pause`` is another thing: jobs already in Redis do
    not start.)"""
    if limit is None:
        info = run(lambda jq: jq.queue(queue))
        shown = info.get("rate")
    else:
        said = limit
        info = run(
            lambda jq: jq.request("PATCH", f"/v1/queues/{queue}", json={"rate": said}, idempotent=True)
        )
        shown = info.get("rate")
    if as_json:
        print_json({"queue": queue, "rate": shown})
    elif shown is None:
        typer.echo(f"queue {queue}: rate limit unknown (Consul did not answer)")
        raise typer.Exit(EXIT_NOT_OK)
    else:
        typer.echo(f"queue {queue}: rate {shown['limit']}")


def _pause(queue: str, paused: bool, as_json: bool) -> None:
    info = run(
        lambda jq: jq.request("PATCH", f"/v1/queues/{queue}", json={"paused": paused}, idempotent=True)
    )
    if as_json:
        print_json(info)
    elif paused:
        typer.echo(f"queue {queue} paused: no job starts; enqueues are still accepted (`jobq queue resume`)")
    else:
        typer.echo(f"queue {queue} resumed")


@app.command("pause")
def pause(queue: Queue, as_json: Json = False) -> None:
    """Stop jobs from starting in a queue (running ones finish; enqueues are still accepted)."""
    _pause(queue, True, as_json)


@app.command("resume")
def resume(queue: Queue, as_json: Json = False) -> None:
    """Let a paused queue's jobs start again."""
    _pause(queue, False, as_json)


@app.command("purge")
def purge(
    queue: Queue,
    reason: Annotated[
        str, typer.Option(help="Kept with each canceled job.")
    ] = "purged with jobq queue purge",
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do it without asking (required without a terminal).")
    ] = False,
    as_json: Json = False,
) -> None:
    """Cancel every job waiting in a queue (pending, delayed, far-future), after naming how many.

    Each is kept as canceled with the reason. Running jobs finish; jobs a kill switch parked stay; dead
    letters are `jobq dead purge`'s. At most the count confirmed is canceled, so jobs enqueued after the
    question are not."""
    depth = run(lambda jq: jq.queue(queue))["depth"]
    count = sum(int(depth.get(state) or 0) for state in WAITING)
    parts = ", ".join(f"{depth.get(s) or 0} {s}" for s in WAITING)
    if count == 0:
        if as_json:
            print_json({"queue": queue, "canceled": 0, "by_state": dict.fromkeys(WAITING, 0), "remaining": 0})
        else:
            typer.echo(f"queue {queue}: no job waiting")
        return
    confirm(f"cancel the {count} job(s) waiting in {queue} ({parts})?", yes=yes, count=count)

    async def go(jq: JobqClient) -> dict[str, Any]:
        total: dict[str, Any] = {"queue": queue, "canceled": 0, "by_state": dict.fromkeys(WAITING, 0)}
        while total["canceled"] < count:
            body = {"limit": min(PURGE_CALL, count - total["canceled"]), "reason": reason}
            done = await jq.request("POST", f"/v1/queues/{queue}/purge", json=body)
            total["canceled"] += done["canceled"]
            for state, n in done["by_state"].items():
                total["by_state"][state] = total["by_state"].get(state, 0) + n
            total["remaining"] = done["remaining"]
            if not done["canceled"]:
                break
        return total

    total = run(go)
    if as_json:
        print_json(total)
    else:
        by = ", ".join(f"{n} {s}" for s, n in total["by_state"].items())
        typer.echo(
            f"queue {queue}: canceled {total['canceled']} job(s) ({by}); {total['remaining']} waiting now"
        )
    if total["canceled"] < count and total["remaining"]:
        raise typer.Exit(EXIT_NOT_OK)
