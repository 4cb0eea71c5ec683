"""The CLI's repair commands on the audit trail (:mod:`jqruntime.stores.audit`): ``jobq replay``, ``jobq
rebuild``, ``jobq graph cancel|retry`` and ``jobq web sessions revoke`` are recorded after they ran — also
when they failed, with how far they got — as who = ``JOBQ_AUDIT_WHO`` or the OS user.

A record Redis refused is an error the operator sees (exit status 2 when the repair itself succeeded);
the Kafka copy is waited for at most ``JOBQ_AUDIT_SHIP_TIMEOUT_MS`` and a failure there only counted and
logged, as everywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import typer
from rich.console import Console
from rich.markup import escape

from jqcore.clock import now_ms
from jqcore.errors import JobqError
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import AuditSettings
from jqcore.settings.servers import RedisSettings
from jqengine import connect
from jqruntime.stores.audit import AuditEntry, AuditTrail, cli_who

__all__ = ["Note", "audited"]


@dataclass
class Note:
    """What the command says about its run: how many jobs it changed, and the outcome if not ``ok``."""

    count: int = 0
    outcome: str = "ok"


async def _record(entry: AuditEntry, settings: AuditSettings) -> None:
    client = connect(load(RedisSettings))
    trail = AuditTrail(client, load(KafkaSettings), settings)
    try:
        await trail.record(entry)
    finally:
        await trail.close(settings.ship_timeout_ms / 1000)
        await client.aclose()


@contextmanager
def audited(action: str, target: str) -> Iterator[Note]:
    """Run the ``with`` body as the repair ``action`` on ``target``, then record it (``cli.<action>``)."""
    note = Note()
    failed = False
    try:
        yield note
    except typer.Exit as exc:
        failed = bool(exc.exit_code)
        if failed and note.outcome == "ok":
            note.outcome = f"exit {exc.exit_code}"
        raise
    except JobqError as exc:
        failed = True
        note.outcome = f"{exc.code}: {exc.message}"
        raise
    except BaseException as exc:
        failed = True
        note.outcome = f"error: {type(exc).__name__}: {exc}"
        raise
    finally:
        settings = load(AuditSettings)
        entry = AuditEntry(now_ms(), cli_who(settings), f"cli.{action}", target, note.count, note.outcome)
        try:
            asyncio.run(_record(entry, settings))
        except Exception as exc:
            Console(stderr=True).print(
                f"[red]error[/] (audit_failed): the {action} ran but its audit record was not written: "
                f"{escape(str(exc))}"
            )
            if not failed:
                raise typer.Exit(2) from exc
