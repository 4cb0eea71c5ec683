"""Who is alive in a group of interchangeable processes, and which of them owns what.

Scheduler instances split the queues among themselves this way (docs/scheduler.md says why Redis and not
Consul): each member writes a heartbeat into ``jobq:members:<group>`` every ``beat_s``, stamped with
Redis's own clock (``TIME``, so hosts' clocks never matter), and drops members silent for ``stale_s``.
Every member then computes the same owner for each item by rendezvous hashing over the same member list:
no coordinator, no lock, and when a member joins or leaves only the items it wins or held move. A member
stopped gracefully leaves at once; one killed is dropped after ``stale_s``. Between two beats members
may briefly disagree; the work they split must therefore be safe to do twice (every scheduler step is
one atomic, idempotent script).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from jqcore.keys import MEMBER_GROUPS_KEY, member_notes_key, members_key
from jqengine import RedisClient, text

__all__ = ["Membership", "group_sizes", "groups", "live_members", "owned_by", "owner", "server_ms"]


def _score(member: str, item: str) -> int:
    digest = hashlib.blake2b(f"{member}\0{item}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(item: str, members: Sequence[str]) -> str | None:
    """The member that owns ``item`` (highest rendezvous score; ties broken by name), None without any."""
    if not members:
        return None
    return max(members, key=lambda m: (_score(m, item), m))


def owned_by(member: str, members: Sequence[str], items: Iterable[str]) -> list[str]:
    """The items of ``items`` that ``member`` owns among ``members``."""
    return [item for item in items if owner(item, members) == member]


def deal_evenly(items: Sequence[str], members: Sequence[str]) -> dict[str, str]:
    """Each item's member, rendezvous-like but even: the (member, item) pairs are taken by descending
    score, an item going to the first member still below ``ceil(items / members)``. Every member computes
    the same deal from the same lists; a member gone moves its items and few others. For a few units of
    similar weight (the schedule topic's partitions), where plain rendezvous once dealt 5, 1 and 0 of 6."""
    if not members:
        return {}
    cap = -(-len(items) // len(members))
    load = dict.fromkeys(members, 0)
    dealt: dict[str, str] = {}
    for _, member, item in sorted(((_score(m, i), m, i) for i in items for m in members), reverse=True):
        if item not in dealt and load[member] < cap:
            dealt[item] = member
            load[member] += 1
    return dealt


class Membership:
    """One member's heartbeat in a group, and the group's live members as of the last beat."""

    def __init__(self, client: RedisClient, group: str, name: str, *, stale_s: float = 3.0) -> None:
        self.client, self.group, self.name = client, group, name
        self.key, self.notes_key = members_key(group), member_notes_key(group)
        self.stale_ms = int(stale_s * 1000)
        self.members: list[str] = []

    async def beat(self, note: str = "") -> list[str]:
        """Record this member alive now (with ``note``, shown by ``jobq status``), drop the stale ones,
        return every live member (sorted)."""
        now = await server_ms(self.client)
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(self.key, {self.name: now})
        pipe.zremrangebyscore(self.key, "-inf", now - self.stale_ms - 1)
        pipe.zrange(self.key, 0, -1)
        pipe.hset(self.notes_key, self.name, note)
        pipe.sadd(MEMBER_GROUPS_KEY, self.group)
        replies = await pipe.execute()
        self.members = sorted(text(m) for m in replies[2])
        return self.members

    async def leave(self) -> None:
        """Leave the group now (the others re-deal at their next beat)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(self.key, self.name)
        pipe.hdel(self.notes_key, self.name)
        await pipe.execute()


async def live_members(client: RedisClient, group: str, stale_s: float = 3.0) -> list[str]:
    """The live members of ``group`` as a reader sees them (``jobq status``), without joining it."""
    since = await server_ms(client) - int(stale_s * 1000)
    found: list[Any] = await client.zrangebyscore(members_key(group), since, "+inf")
    return sorted(text(m) for m in found)


async def groups(client: RedisClient, stale_s: float = 3.0) -> dict[str, dict[str, str]]:
    """Every group with live members: group → live member → its last note (``jobq status``)."""
    out: dict[str, dict[str, str]] = {}
    for group in sorted(text(g) for g in await client.smembers(MEMBER_GROUPS_KEY)):
        alive = await live_members(client, group, stale_s)
        if alive:
            notes: dict[Any, Any] = await client.hgetall(member_notes_key(group))
            said = {text(k): text(v) for k, v in notes.items()}
            out[group] = {m: said.get(m, "") for m in alive}
    return out


async def group_sizes(client: RedisClient, stale_s: float = 3.0) -> dict[str, int]:
    """Every group ever recorded → its live members now (0: a group nobody keeps any more)."""
    since = await server_ms(client) - int(stale_s * 1000)
    names = sorted(text(g) for g in await client.smembers(MEMBER_GROUPS_KEY))
    return {group: int(await client.zcount(members_key(group), since, "+inf")) for group in names}


async def server_ms(client: RedisClient) -> int:
    """Redis's clock in milliseconds (``TIME``; on a Cluster any node's)."""
    reply: Any = await client.time()
    if isinstance(reply, dict):  # a Cluster answers per node
        reply = next(iter(reply.values()))
    return int(reply[0]) * 1000 + int(reply[1]) // 1000
