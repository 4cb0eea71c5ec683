"""What a queue-scoped token sees of the parts many teams share: the overview's and the topics page's
Kafka partitions, relay locks, rate limits, cron schedules and kill switches narrowed to its own queues and
the topics they are routed to, and the processes counted, not named. A token for every queue (or the
environment's admin/read lists) sees everything."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jqcore.routing import QueueUnrouted, RoutingSettings
from jqweb.security import Principal

__all__ = ["PROCESS_LISTS", "everything", "narrow", "own_topics", "unnamed"]

PROCESS_LISTS = ("gateways", "workers", "dispatchers", "http_workers", "dashboards")
"""The overview's lists of process names (host, pid, queues): a token held to some queues sees how many,
not whose — names say where other teams run."""


def unnamed(role: str, names: Any) -> Any:
    """``role 1``, ``role 2``, … in place of a list of process names (an error part stays as it is)."""
    return [f"{role} {i + 1}" for i in range(len(names))] if isinstance(names, list) else names


def everything(p: Principal) -> bool:
    """Whether the signed-in token may see every queue (and so every topic)."""
    return p.token is None or p.token.every_queue


def own_topics(p: Principal, routing: RoutingSettings, queues: Iterable[str], topics: list[str]) -> list[str]:
    """The topics of ``topics`` that carry at least one of the token's queues (of ``queues``, the known)."""
    if everything(p):
        return topics
    carried = set()
    for queue in queues:
        if p.allows_queue(queue):
            try:
                carried.add(routing.route(queue)[0])
            except QueueUnrouted:
                continue
    return [t for t in topics if t in carried]


def _rows(part: Any, key: str, allowed: Any) -> Any:
    """A list part's rows whose ``key`` passes ``allowed`` (an error part stays as it is)."""
    if not isinstance(part, list):
        return part
    return [r for r in part if isinstance(r, dict) and allowed(r.get(key, ""))]


def narrow(snap: dict[str, Any], p: Principal, topics: list[str]) -> dict[str, Any]:
    """The snapshot (``jqweb.overview.collect``) with only the token's queues and ``topics`` (its own,
    :func:`own_topics`)."""
    if everything(p):
        return snap
    shown, out = set(topics), dict(snap)
    out["topics"] = [t for t in snap.get("topics", []) if t in shown]
    for part in ("kafka", "locks"):
        if part in snap:
            out[part] = _rows(snap[part], "topic", shown.__contains__)
    if "cron" in snap:
        out["cron"] = _rows(snap["cron"], "queue", p.allows_queue)
    redis = snap.get("redis")
    if isinstance(redis, dict) and "queues" in redis:
        out["redis"] = {
            **redis,
            "queues": [r for r in redis["queues"] if p.allows_queue(r["queue"])],
            "switches": [sw for sw in redis.get("switches", []) if p.allows_queue(sw.get("queue", ""))],
            "held": [h for h in redis.get("held", []) if p.allows_queue(h["queue"])],
            **{role: unnamed(role, redis[role]) for role in PROCESS_LISTS if role in redis},
        }
    rates = snap.get("rates")
    if isinstance(rates, dict) and "error" not in rates:
        out["rates"] = {
            "topics": {t: v for t, v in rates.get("topics", {}).items() if t in shown},
            "queues": {q: v for q, v in rates.get("queues", {}).items() if p.allows_queue(q)},
        }
    return out
