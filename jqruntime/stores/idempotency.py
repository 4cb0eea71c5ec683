"""The gateway's idempotency records: one small string per ``Idempotency-Key`` (its body's hash), kept for
``JOBQ_GATE_IDEMPOTENCY_TTL_S`` (``docs/gateway.md``), over a plain Redis client."""

from __future__ import annotations

from jqcore.keys import idempotency_key
from jqengine import RedisClient

__all__ = ["remember"]


async def remember(client: RedisClient, digest: str, body_hash: str, ttl_s: int) -> str | None:
    """Store ``body_hash`` under an idempotency key unless one is there: None when stored, else the body hash
    stored before (None too if it expired in between)."""
    if await client.set(idempotency_key(digest), body_hash, nx=True, ex=ttl_s):
        return None
    previous = await client.get(idempotency_key(digest))
    return previous.decode() if isinstance(previous, bytes) else previous
