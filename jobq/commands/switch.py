"""``jobq switch``: kill switches — stop a poison kind (or tenant, or queue) from starting anywhere,
without a deploy; lift them when the fix is out. Each switch in force is kept in Consul too (JOBQ_CONSUL_*,
under JOBQ_CRON_KV_PREFIX), so it survives Redis losing its data (:mod:`jqruntime.stores.config`)."""

from __future__ import annotations

import getpass
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, TypeVar

import orjson
import typer
from rich.console import Console
from rich.table import Table

from jobq.engine_call import with_engine
from jqcore.settings.common import load
from jqcore.settings.pipeline import CronSettings
from jqcore.settings.servers import ConsulSettings
from jqengine import SWITCH_ACTIONS, Engine, Switch, SwitchInvalid
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores import config as kept

__all__ = ["app"]

app = typer.Typer(
    help="Kill switches: jobs matching one are not started (parked until it lifts, or dead-lettered).",
    no_args_is_help=True,
)
T = TypeVar("T")


def _with_kept(action: Callable[[kept.ConfigStore, Engine], Awaitable[T]]) -> T:
    """``action`` with the engine and Consul's copy of the switches (both closed after)."""

    async def go(engine: Engine) -> T:
        client = consul_client(load(ConsulSettings))
        try:
            return await action(kept.ConfigStore(client, load(CronSettings).kv_prefix), engine)
        finally:
            await close_consul(client)

    return with_engine(go)


def _pairs(values: list[str]) -> dict[str, str]:
    out = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep:
            raise SwitchInvalid(f"--meta takes key=value, not {value!r}")
        out[key] = val
    return out


@app.command("set")
def set_switch(
    name: Annotated[str, typer.Argument(help="The switch's name (1-64 of A-Z a-z 0-9 _ . -).")],
    queue: Annotated[str, typer.Option(help="A queue name or glob (billing.*); * = every queue.")] = "*",
    kind: Annotated[str, typer.Option(help="A job kind (exact); empty = every kind.")] = "",
    meta: Annotated[
        list[str] | None, typer.Option(help="key=value a job's meta must carry (repeat for more).")
    ] = None,
    action: Annotated[
        str, typer.Option(help=f"{' | '.join(SWITCH_ACTIONS)}: park (wait, no attempt spent) or dead-letter.")
    ] = "park",
) -> None:
    """Put a kill switch in force: from now on no claim starts a matching job (running jobs finish). It is
    kept in Consul too; Consul unreachable: in force, not kept (exit 1) — set it again."""
    pairs = _pairs(meta or [])

    async def go(store: kept.ConfigStore, engine: Engine) -> tuple[Switch, list[str]]:
        at = await engine.now()
        switch = Switch(name, action, queue, kind, pairs, set_at_ms=at, by=getpass.getuser())  # type: ignore[arg-type]
        return switch, await kept.set_switch(store, engine, switch)

    switch, queues = _with_kept(go)
    where = f"{len(queues)} queue(s) now: {', '.join(queues)}" if queues else "no queue yet (new ones get it)"
    Console().print(f"switch {switch.name} in force ({switch.action}) on {where}")


@app.command("lift")
def lift(name: Annotated[str, typer.Argument(help="The switch to lift.")]) -> None:
    """Lift a kill switch: the jobs it parked are pending again, in priority order. Consul's copy goes
    first: Consul unreachable lifts nothing (exit 1)."""
    moved = _with_kept(lambda store, engine: kept.lift_switch(store, engine, name))
    Console().print(f"switch {name} lifted; {moved} parked job(s) pending again")


@app.command("list")
def list_switches(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array, for scripts.")] = False,
) -> None:
    """The kill switches in force."""
    switches = with_engine(lambda engine: engine.admin.switches())
    if as_json:
        typer.echo(orjson.dumps([s.as_dict() for s in switches]).decode())
        return
    if not switches:
        Console().print("no kill switch in force")
        return
    table = Table()
    table.add_column("name", no_wrap=True)  # never cut to "poison-p…": the other columns wrap
    for col in ("action", "queue", "kind", "meta", "since", "by"):
        table.add_column(col)
    for s in switches:
        since = datetime.fromtimestamp(s.set_at_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        meta = ", ".join(f"{k}={v}" for k, v in s.meta.items())
        table.add_row(s.name, s.action, s.queue, s.kind or "*", meta, since, s.by)
    Console().print(table)
