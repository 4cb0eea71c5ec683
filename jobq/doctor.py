"""``jobq doctor``'s checks: read a deployment once (:func:`examine`), then judge what was read.

Each ``check_*`` function takes the facts it needs and returns :class:`Finding` s, one line each: a
``problem`` (the command exits non-zero) or a ``warning`` (printed, exit 0). The facts come from the
deployment's own settings (the same environment its services read): Kafka topics against the declaration
(``jqcore/topics.py``), Redis's eviction policy and persistence, Consul's ACLs (an anonymous write is
tried and removed) and the relays' locks, clock offsets between this host, Redis (``TIME``), Consul (its
HTTP ``Date``, 1 s resolution) and the processes that heartbeat into Redis (their stamps), the gateways,
relays, schedulers and canaries alive (what ``jobq status`` reads) and the gateways' ``/readyz``, and the
tokens a non-loopback gateway or dashboard accepts. Kafka's clock is not measured (it would take a write).
"""

from __future__ import annotations

import asyncio
import email.utils
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
import consul
import orjson

from jobq.commands.stack import DEV_TOKEN, DEV_WEB_ADMIN, DEV_WEB_READ
from jqcore import keys
from jqcore.settings.common import load
from jqcore.settings.pipeline import AuditSettings, EventSettings, FarSettings
from jqcore.settings.servers import ConsulSettings
from jqcore.topics import Inspection, declaration
from jqengine import RedisClient, connect, text
from jqruntime.consulconn import consul_sync_client
from jqruntime.preflight import eviction_policies
from jqruntime.stores import membership
from jqruntime.stores.presence import count_alive
from jqruntime.tokens import MIN_SECRET_CHARS, is_loopback
from jqruntime.topicadmin import inspect
from jqweb.overview import CANARY_LATE_S, Sources, relay_locks
from jqweb.settings import WebSettings
from kafkagate.settings import GateSettings

__all__ = [
    "KNOWN_TOKENS",
    "MIN_TOKEN_CHARS",
    "Facts",
    "Finding",
    "check_alive",
    "check_clocks",
    "check_consul",
    "check_redis",
    "check_tokens",
    "check_topics",
    "examine",
    "judge",
]

KNOWN_TOKENS = frozenset(
    {DEV_TOKEN, DEV_WEB_ADMIN, DEV_WEB_READ, "change-me", "change-me-too", "dev-token", "changeme"}
    | {"bench-token", "faults-token", "processes-token", "token", "secret", "admin", "read", "password"}
)
"""Tokens published in this repository (the local stack's, docker-compose's old defaults, the tests' and
benchmarks') or guessable: never accepted off loopback."""
MIN_TOKEN_CHARS = MIN_SECRET_CHARS
"""A shorter token on a non-loopback gateway or dashboard is flagged (``secrets.token_urlsafe(24)``: 32); the
servers themselves refuse to start with one (``jqruntime.tokens``)."""
MAX_OFFSET_MS = 500.0
"""A clock further than this from Redis's is flagged (transitions run on Redis's clock; a gateway's fixes
the due time of the delayed jobs it accepts)."""

Level = Literal["problem", "warning"]


@dataclass(frozen=True, slots=True)
class Finding:
    level: Level
    check: str
    line: str

    def as_dict(self) -> dict[str, str]:
        return {"level": self.level, "check": self.check, "line": self.line}


@dataclass
class Facts:
    """What :func:`examine` read; a part it could not read is named in ``unreadable`` (part → error)."""

    topics: Inspection | None = None
    redis_config: dict[str, str] | None = None
    """``maxmemory-policy``, ``appendonly``, ``save`` (None: ``CONFIG GET`` refused)."""
    anonymous_write: bool | None = None
    consul_loopback: bool = True
    locks: list[dict[str, Any]] = field(default_factory=list)
    offsets_ms: dict[str, float] = field(default_factory=dict)
    """Clock → its offset from this host's in ms (``Redis``, ``Consul``, ``gate <name>`` ...)."""
    gateways: list[str] = field(default_factory=list)
    schedulers: dict[str, dict[str, str]] = field(default_factory=dict)
    canary: dict[str, dict[str, Any]] = field(default_factory=dict)
    ready: dict[str, str] = field(default_factory=dict)
    """Gateway URL → ``ok`` or why it is not ready."""
    tokens: list[tuple[str, str, str]] = field(default_factory=list)
    """(setting, address served, token) for every token a gateway or dashboard of these settings accepts."""
    unreadable: dict[str, str] = field(default_factory=dict)


def check_topics(found: Inspection | None) -> list[Finding]:
    if found is None:
        return []
    return [Finding("problem", "topics", p.line) for p in found.problems]


def check_redis(config: Mapping[str, str] | None) -> list[Finding]:
    if config is None:
        why = "Redis refuses CONFIG GET: its maxmemory-policy and persistence cannot be checked"
        return [Finding("warning", "redis", why)]
    out = []
    policy = config.get("maxmemory-policy", "noeviction")
    if policy != "noeviction":
        out.append(
            Finding(
                "problem",
                "redis",
                f"Redis has maxmemory-policy {policy}: it would evict jobs silently "
                f"(services refuse to start); set it to noeviction",
            )
        )
    if config.get("appendonly", "no") == "no" and not config.get("save", "").strip():
        out.append(
            Finding(
                "warning",
                "redis",
                "Redis persists nothing (AOF and RDB snapshots off): a restart loses every pending job "
                "(then `jobq rebuild`); set appendonly yes",
            )
        )
    return out


def check_consul(
    anonymous_write: bool | None, loopback: bool, locks: Sequence[Mapping[str, Any]]
) -> list[Finding]:
    out = []
    if anonymous_write:
        level: Level = "warning" if loopback else "problem"
        why = (
            "Consul accepts anonymous writes (ACLs off, or the anonymous token may write KV): whoever "
            "reaches it can take a relay's lock or change rate limits; enable ACLs with default deny"
        )
        out.append(Finding(level, "consul", why))
    for lock in locks:
        if not lock.get("holder"):
            out.append(
                Finding(
                    "problem",
                    "relays",
                    f"no relay holds the lock of topic {lock['topic']!r}: its jobs are not relayed "
                    f"(start `jobq relay`)",
                )
            )
    return out


def check_clocks(offsets_ms: Mapping[str, float], max_ms: float = MAX_OFFSET_MS) -> list[Finding]:
    """Every clock measured against this host's; a process's stamp against Redis's (``gate x`` ...)."""
    out = []
    for name, off in sorted(offsets_ms.items()):
        if abs(off) > max_ms:
            side = "ahead of" if off > 0 else "behind"
            out.append(
                Finding(
                    "problem",
                    "clocks",
                    f"{name}'s clock is {abs(off):.0f} ms {side} this host's (over {max_ms:.0f} ms): "
                    f"keep every clock synchronised (NTP)",
                )
            )
    return out


def check_alive(
    gateways: Sequence[str],
    schedulers: Mapping[str, Mapping[str, str]],
    canary: Mapping[str, Mapping[str, Any]],
    ready: Mapping[str, str],
    now_s: float | None = None,
) -> list[Finding]:
    now_s = time.time() if now_s is None else now_s
    out = []
    if not gateways:
        out.append(Finding("problem", "alive", "no gateway heartbeats in Redis: is `jobq gate` running?"))
    for url, state in sorted(ready.items()):
        if state != "ok":
            out.append(Finding("problem", "alive", f"gateway {url} is not ready: {state}"))
    if not schedulers:
        out.append(
            Finding(
                "problem",
                "alive",
                "no scheduler alive: delayed jobs, retries and expired leases wait (start `jobq scheduler`)",
            )
        )
    if not canary:
        out.append(Finding("warning", "alive", "no canary has reported (start `jobq canary`)"))
    for part, c in sorted(canary.items()):
        age = now_s - float(c.get("at", 0)) / 1000
        if not c.get("ok"):
            out.append(Finding("problem", "alive", f"canary of {part} failing: {c.get('problem')}"))
        elif age > CANARY_LATE_S:
            out.append(
                Finding(
                    "problem", "alive", f"canary of {part} silent for {age:.0f} s: is `jobq canary` running?"
                )
            )
    return out


def check_tokens(tokens: Iterable[tuple[str, str, str]]) -> list[Finding]:
    """Tokens a non-loopback gateway or dashboard accepts: none published, none short."""
    out = []
    for setting, address, token in tokens:
        if _loopback(address):
            continue
        if token in KNOWN_TOKENS:
            why = "a published development token"
        elif len(token) < MIN_TOKEN_CHARS:
            why = f"{len(token)} characters, under {MIN_TOKEN_CHARS}"
        else:
            continue
        hint = f"{token[:2]}…" if len(token) > 4 else "…"
        out.append(
            Finding(
                "problem",
                "tokens",
                f"{setting} holds a weak token ({hint}: {why}) on {address}; use e.g. "
                f"`python -c 'import secrets; print(secrets.token_urlsafe(24))'`",
            )
        )
    return out


def judge(facts: Facts) -> list[Finding]:
    """Every finding, problems first."""
    found = [Finding("problem", part, f"cannot read {part}: {err}") for part, err in facts.unreadable.items()]
    found += check_topics(facts.topics)
    found += check_redis(facts.redis_config) if "redis" not in facts.unreadable else []
    found += check_consul(facts.anonymous_write, facts.consul_loopback, facts.locks)
    found += check_clocks(facts.offsets_ms)
    if "redis" not in facts.unreadable:
        found += check_alive(facts.gateways, facts.schedulers, facts.canary, facts.ready)
    found += check_tokens(facts.tokens)
    return sorted(found, key=lambda f: f.level != "problem")


def _loopback(address: str) -> bool:
    return is_loopback(urlsplit(address if "//" in address else f"//{address}").hostname or "")


# ---- reading a deployment ------------------------------------------------------------------------------


async def examine(sources: Sources | None = None, gateways: Sequence[str] = ()) -> Facts:
    """Read every fact ``judge`` needs from the deployment these settings describe (``gateways``: URLs
    whose ``/readyz`` is asked; none: the local gateway of ``JOBQ_GATE_HOST``/``PORT``)."""
    s = sources or Sources()
    facts = Facts()
    gate, web = load(GateSettings), load(WebSettings)
    facts.tokens = _tokens(gate, web)
    urls = list(gateways) or [f"http://{_reachable(gate.host)}:{gate.port}"]
    specs = declaration(s.routing.topics(), load(EventSettings), load(FarSettings), audit=load(AuditSettings))
    client = connect(s.redis)
    try:
        parts = {
            "kafka": asyncio.to_thread(inspect, s.kafka, specs),
            "redis": _redis_facts(client, facts),
            "consul": asyncio.to_thread(_consul_facts, s, facts),
            "gateways": _ready(urls, facts),
        }
        results = await asyncio.gather(*parts.values(), return_exceptions=True)
    finally:
        await client.aclose()
    for name, got in zip(parts, results, strict=True):
        if isinstance(got, BaseException):
            facts.unreadable[name] = f"{type(got).__name__}: {got}"
        elif name == "kafka":
            facts.topics = got
    return facts


async def _redis_facts(client: RedisClient, facts: Facts) -> None:
    before = time.time()
    server_ms = await membership.server_ms(client)
    after = time.time()
    facts.offsets_ms["Redis"] = server_ms - (before + after) / 2 * 1000
    if await eviction_policies(client) is None:
        facts.redis_config = None
    else:
        got: Any = await client.config_get("maxmemory-policy")
        for name in ("appendonly", "save"):
            got = {**got, **(await client.config_get(name))}
        facts.redis_config = {text(k): text(v) for k, v in got.items()}
    facts.gateways = await count_alive(client, "gate")
    facts.schedulers = await membership.groups(client)
    raw = await client.hgetall(keys.CANARY_HEALTH_KEY)
    facts.canary = {text(k): orjson.loads(v) for k, v in raw.items()}
    for role in ("gate", "worker"):  # a heartbeat stamped ahead of Redis's clock: that host runs fast
        beats: Any = await client.zrange(keys.presence_key(role), 0, -1, withscores=True)
        for name, stamp in beats:
            ahead = stamp - server_ms
            if ahead > 0:
                facts.offsets_ms[f"{role} {text(name)}"] = ahead + facts.offsets_ms["Redis"]


def _consul_facts(s: Sources, facts: Facts) -> None:
    settings: ConsulSettings = s.consul
    facts.consul_loopback = _loopback(f"{settings.scheme}://{settings.host}:{settings.port}")
    # the deployment's TLS settings (CA, client certificate), no token: what anyone on the network could do
    with consul_sync_client(settings.model_copy(update={"token": None})) as anonymous:
        probe = f"{s.relay.kv_prefix}/doctor/anonymous-{secrets.token_hex(4)}"
        try:
            facts.anonymous_write = bool(anonymous.kv.put(probe, "jobq doctor"))
        except consul.ACLPermissionDenied:
            facts.anonymous_write = False
        if facts.anonymous_write:
            anonymous.kv.delete(probe)
        before = time.time()
        answer = anonymous.http.get(lambda r: r, "/v1/status/leader")
        after = time.time()
        date = answer.headers.get("Date") if hasattr(answer, "headers") else None
        if date:  # one-second resolution: flagged only beyond the threshold plus that second
            offset = email.utils.parsedate_to_datetime(date).timestamp() - (before + after) / 2
            if abs(offset) > 1.0:
                facts.offsets_ms["Consul"] = offset * 1000
    facts.locks = relay_locks(settings, s.topics(), s.relay)


async def _ready(urls: Sequence[str], facts: Facts) -> None:
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for url in urls:
            try:
                async with session.get(url.rstrip("/") + "/readyz") as r:
                    if r.status == 200:
                        facts.ready[url] = "ok"
                    else:
                        body = await r.text()
                        facts.ready[url] = f"{r.status} {body[:200]}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                facts.ready[url] = f"unreachable ({type(exc).__name__}: {exc})"


def _tokens(gate: GateSettings, web: WebSettings) -> list[tuple[str, str, str]]:
    out = []
    where = f"{gate.host}:{gate.port}"
    for t in gate.tokens:  # ``secret`` or ``secret:scopes``
        out.append(("JOBQ_GATE_TOKENS", where, t.get_secret_value().split(":", 1)[0]))
    where = f"{web.host}:{web.port}"
    for name, tokens in (
        ("JOBQ_WEB_READ_TOKENS", web.read_tokens),
        ("JOBQ_WEB_ADMIN_TOKENS", web.admin_tokens),
    ):
        for t in tokens:  # ``secret`` or ``name:secret``
            out.append((name, where, t.get_secret_value().rsplit(":", 1)[-1]))
    return out


def _reachable(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
