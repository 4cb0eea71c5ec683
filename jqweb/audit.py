"""The operators' audit log: every action taken through the dashboard (who, what, on what, how many jobs,
when), in a Redis stream capped at :data:`MAX_ENTRIES` (approximately: Redis trims whole nodes).

An action is written after it ran, with what it did (``count``) and whether it failed; a failed write of
the log fails the request, so no action goes unrecorded without the operator seeing an error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from jqcore.keys import AUDIT_KEY
from jqcore.redisconn import RedisClient

__all__ = ["MAX_ENTRIES", "AuditEntry", "read", "record"]

MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class AuditEntry:
    at_ms: int
    who: str
    action: str
    """e.g. ``queue.pause``, ``jobs.retry``, ``rate.set``."""
    target: str
    """What it acted on: a queue, a job, a topic, a filter written as a query string."""
    count: int
    """How many jobs (or records) it changed."""
    outcome: str = "ok"
    """``ok``, or the error that stopped it."""
    id: str = ""

    def as_dict(self) -> dict[str, str | int]:
        return asdict(self)


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


async def record(client: RedisClient, entry: AuditEntry) -> str:
    fields = {k: str(v) for k, v in entry.as_dict().items() if k != "id"}
    raw = await client.xadd(AUDIT_KEY, fields, maxlen=MAX_ENTRIES, approximate=True)  # type: ignore[arg-type]
    return _s(raw)


async def read(client: RedisClient, count: int = 100, before: str | None = None) -> list[AuditEntry]:
    """The newest ``count`` entries (before stream id ``before``, exclusive), newest first."""
    top = f"({before}" if before else "+"
    rows = await client.xrevrange(AUDIT_KEY, top, "-", count=count) or []
    out = []
    for entry_id, raw in rows:
        f = {_s(k): _s(v) for k, v in (raw or {}).items()}
        out.append(
            AuditEntry(
                at_ms=int(f.get("at_ms", "0")),
                who=f.get("who", ""),
                action=f.get("action", ""),
                target=f.get("target", ""),
                count=int(f.get("count", "0")),
                outcome=f.get("outcome", "ok"),
                id=_s(entry_id or ""),
            )
        )
    return out
