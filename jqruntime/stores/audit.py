"""The one audit path: every action an operator takes — a dashboard action or sign-in, a gateway admin
call, a CLI repair — is an :class:`AuditEntry` recorded by :meth:`AuditTrail.record`.

* **Redis** (what the dashboard's audit page reads): a stream capped at :data:`MAX_ENTRIES`
  (approximately: Redis trims whole nodes). The write is awaited and a failure raises, so no action goes
  unrecorded without its caller (the dashboard request, the gateway call, the CLI) seeing an error.
* **Kafka** (what an admin of Redis cannot erase): the same entry, as JSON keyed by its stream id, on the
  audit topic (``JOBQ_AUDIT_TOPIC``, declared in :mod:`jqcore.topics`: retained by time, never compacted).
  It is sent in the background by an idempotent ``acks=all`` producer that retries for
  ``JOBQ_AUDIT_SHIP_TIMEOUT_MS``; a record Kafka did not confirm is counted
  (``jobq_audit_shipped_total{outcome="failed"}``) and logged, never allowed to fail or slow the action:
  the Redis record is kept either way.
"""

from __future__ import annotations

import asyncio
import getpass
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import orjson
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jqcore import metrics
from jqcore.errors import BackendUnavailable, JobqError
from jqcore.extras import require
from jqcore.keys import AUDIT_KEY
from jqcore.log import get_logger
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import AuditSettings
from jqengine import RedisClient, text

if TYPE_CHECKING:  # the server extra's (Kafka); loaded when the first entry is shipped
    from jqruntime.kafka import AsyncProducer

__all__ = ["MAX_ENTRIES", "AuditEntry", "AuditTrail", "cli_who", "read"]

log = get_logger("jqruntime.stores.audit")

MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class AuditEntry:
    at_ms: int
    who: str
    """The person or program: the token's name on the dashboard and gateway, the OS user (or
    ``JOBQ_AUDIT_WHO``) for the CLI, ``anonymous`` for a failed sign-in."""
    action: str
    """e.g. ``queue.pause``, ``jobs.retry``, ``session.login``, ``gate.PUT /v1/queues/{queue}``,
    ``cli.replay``."""
    target: str
    """What it acted on: a queue, a job, a topic, a filter written as a query string, a client address."""
    count: int
    """How many jobs (or records) it changed (as far as it got when it failed)."""
    outcome: str = "ok"
    """``ok``, or the error that stopped it (``code: message``)."""
    id: str = ""
    """The Redis stream id (set when recorded; also the Kafka record's key)."""
    token: str = ""
    """The name of the token the action came with (empty for the CLI)."""
    queues: str = ""
    """The queues (or globs) it acted on, space-separated; ``*``: every queue; empty: none (a sign-in).
    The dashboard shows a token held to some queues only the entries all of whose queues it may use."""
    details: str = ""
    """What changed, secret-free and short (the fields a configuration change set, the kinds a batch
    named, the switch a replacement lifted)."""

    def visible_to(self, allows: Callable[[str], bool], every: bool) -> bool:
        """Whether a token that ``allows`` some queues (``every``: all) may see this entry: every queue it
        names must be one of the token's; an entry naming none (or every queue) only to a token of all."""
        if every:
            return True
        named = self.queues.split()
        return bool(named) and "*" not in named and all(allows(q) for q in named)

    def as_dict(self) -> dict[str, str | int]:
        return asdict(self)


def cli_who(settings: AuditSettings) -> str:
    """Who a CLI command is recorded as: ``JOBQ_AUDIT_WHO``, else the OS user."""
    if settings.who:
        return settings.who
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        return f"uid-{os.getuid()}"


class AuditTrail:
    """Records entries in Redis (awaited) and on the Kafka audit topic (background). ``kafka`` None: Redis
    only (a process with no Kafka at all; every jobq service passes its Kafka settings)."""

    def __init__(
        self, client: RedisClient, kafka: KafkaSettings | None, settings: AuditSettings | None = None
    ) -> None:
        if kafka is not None:
            require("the audit trail's Kafka topic", "server")
        self.client = client
        self.kafka = kafka
        self.settings = settings if settings is not None else load(AuditSettings)
        self._producer: AsyncProducer | None = None
        self._pending: set[asyncio.Task[None]] = set()

    @property
    def topic(self) -> str:
        return self.settings.topic

    async def record(self, entry: AuditEntry) -> AuditEntry:
        """Append ``entry`` to the Redis stream (raises when Redis refuses; BackendUnavailable when it does
        not answer) and hand it to Kafka; returns it with its stream id."""
        fields = {k: str(v) for k, v in entry.as_dict().items() if k != "id"}
        try:
            raw = await self.client.xadd(AUDIT_KEY, fields, maxlen=MAX_ENTRIES, approximate=True)  # type: ignore[arg-type]
        except (RedisConnectionError, RedisTimeoutError) as exc:  # a 503 for a caller, not a 500
            raise BackendUnavailable(f"audit: Redis unreachable: {exc}") from exc
        entry = replace(entry, id=text(raw))
        if self.kafka is not None:
            task = asyncio.create_task(self._ship(entry))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        return entry

    def _producer_for(self, kafka: KafkaSettings) -> AsyncProducer:
        from jqruntime.kafka import AsyncProducer

        if self._producer is None:
            self._producer = AsyncProducer(
                kafka, acks="all", delivery_timeout_ms=self.settings.ship_timeout_ms
            )
        return self._producer

    async def _ship(self, entry: AuditEntry) -> None:
        from jqruntime.kafka import Record

        assert self.kafka is not None
        record = Record(self.topic, orjson.dumps(entry.as_dict()), entry.id.encode())
        try:
            await self._producer_for(self.kafka).produce(record)
        except JobqError as exc:
            metrics.AUDIT_SHIPPED.labels("failed").inc()
            log.warning("audit record not shipped to Kafka", topic=self.topic, id=entry.id, error=exc.message)
        else:
            metrics.AUDIT_SHIPPED.labels("ok").inc()

    async def drain(self, timeout_s: float = 10.0) -> None:
        """Wait (at most ``timeout_s``) for the records still on their way to Kafka."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=timeout_s)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Drain, then close the producer (the Redis client is the caller's)."""
        await self.drain(timeout_s)
        if self._producer is not None:
            await asyncio.to_thread(self._producer.close, timeout_s)
            self._producer = None


async def read(
    client: RedisClient, count: int = 100, before: str | None = None, since_ms: int | None = None
) -> list[AuditEntry]:
    """The newest ``count`` entries (before stream id ``before``, exclusive; recorded at ``since_ms`` or
    later), newest first."""
    top = f"({before}" if before else "+"
    bottom = f"{since_ms}-0" if since_ms is not None else "-"
    rows = await client.xrevrange(AUDIT_KEY, top, bottom, count=count) or []
    out = []
    for entry_id, raw in rows:
        f = {text(k): text(v) for k, v in (raw or {}).items()}
        out.append(
            AuditEntry(
                at_ms=int(f.get("at_ms", "0")),
                who=f.get("who", ""),
                action=f.get("action", ""),
                target=f.get("target", ""),
                count=int(f.get("count", "0")),
                outcome=f.get("outcome", "ok"),
                id=text(entry_id or ""),
                token=f.get("token", ""),
                queues=f.get("queues", ""),
                details=f.get("details", ""),
            )
        )
    return out
