"""``jobq web``: run the dashboard (its own process; ``jobq gate --web`` serves it under ``/ui``);
``jobq web sessions list|revoke``: the dashboard's sign-in sessions (``jqweb.sessions``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.table import Table

from jqcore.clock import now_ms
from jqcore.extras import require
from jqcore.log import configure
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import AuditSettings
from jqcore.settings.servers import RedisSettings
from jqengine import connect
from jqruntime.stores.audit import AuditEntry, AuditTrail, cli_who
from jqweb.sessions import MIN_REF, Session, SessionStore, select
from jqweb.settings import WebSettings

__all__ = ["app"]

app = typer.Typer()
sessions_app = typer.Typer(help="The dashboard's sign-in sessions (in Redis).", no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")


@app.callback(invoke_without_command=True)
def web(
    ctx: typer.Context,
    port: Annotated[int | None, typer.Option(help="Listen port (default JOBQ_WEB_PORT, 28090).")] = None,
    host: Annotated[
        str | None, typer.Option(help="Listen address (default JOBQ_WEB_HOST, 127.0.0.1).")
    ] = None,
) -> None:
    """Run the web dashboard: the pipeline from HTTP to execution, seen and repaired.

    Pages: overview (24 h rates, alerts, canaries), topics (lag, relay locks and fences, live rate limits),
    queues, jobs (search live and archived, bulk actions), a job's timeline, dead letters, schedules,
    graphs, workers and the audit log. Tokens: JOBQ_WEB_READ_TOKENS (see) and JOBQ_WEB_ADMIN_TOKENS (act);
    a browser signs in once and gets a server-side session (`jobq web sessions`). Kafka, Consul, Redis
    and the history from the services' settings (`eval "$(jobq stack env)"`).
    """
    if ctx.invoked_subcommand is not None:
        return
    require("jobq web", "server", "web")
    from jqweb.main import run

    configure()
    overrides = {k: v for k, v in {"port": port, "host": host}.items() if v is not None}
    run(load(WebSettings, **overrides))


def _store() -> tuple[SessionStore, WebSettings]:
    settings = load(WebSettings)
    return SessionStore(
        connect(load(RedisSettings)), settings.session_idle_s, settings.session_max_s
    ), settings


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _row(s: Session) -> dict[str, str | int | bool]:
    return {
        "id": s.ref[:16],
        "who": s.who,
        "admin": s.admin,
        "created_ms": s.created_ms,
        "seen_ms": s.seen_ms,
    }


@sessions_app.command("list")
def list_sessions(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Every live dashboard session: its id (a prefix of the SHA-256 of the cookie's value, never the
    value), the token's name, admin or not, when it signed in and when it was last used."""

    async def go() -> list[Session]:
        store, _ = _store()
        try:
            return await store.list()
        finally:
            await store.client.aclose()

    found = asyncio.run(go())
    if as_json:
        typer.echo(orjson.dumps({"sessions": [_row(s) for s in found]}).decode())
        return
    table = Table("id", "who", "admin", "signed in (UTC)", "last used (UTC)")
    for s in found:
        table.add_row(s.ref[:16], s.who, "yes" if s.admin else "no", _clock(s.created_ms), _clock(s.seen_ms))
    Console().print(table)
    Console().print(f"{len(found)} live session(s)")


@sessions_app.command("revoke")
def revoke(
    target: Annotated[
        str | None,
        typer.Argument(
            help=f"A token's name (all its sessions) or a session id (at least {MIN_REF} characters)."
        ),
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="End every session (everyone signs in again).")
    ] = False,
) -> None:
    """End dashboard sessions now (the browser is sent to sign in again); audited as ``session.revoke``
    with who = JOBQ_AUDIT_WHO or the OS user. To lock a token out for good, also remove it from the
    dashboard's tokens: a session of a token no longer configured is refused anyway."""
    if (target is None) == (not every):
        raise typer.BadParameter(
            "name a token or a session id, or pass --all (not both)", param_hint="TARGET"
        )

    async def go() -> int:
        store, _ = _store()
        audit_settings = load(AuditSettings)
        trail = AuditTrail(store.client, load(KafkaSettings), audit_settings)
        try:
            chosen = select(await store.list(), None if every else target)
            ended = await store.end([s.ref for s in chosen])
            what = "*" if every else str(target)
            entry = AuditEntry(now_ms(), cli_who(audit_settings), "session.revoke", what, ended)
            await trail.record(entry)
            return ended
        finally:
            await trail.close(10.0)
            await store.client.aclose()

    ended = asyncio.run(go())
    Console().print(f"revoked {ended} session(s)")
    if not ended and not every:
        Console(stderr=True).print(
            f"[yellow]no live session matches {target!r}[/] (see `jobq web sessions list`)"
        )
        raise typer.Exit(1)
