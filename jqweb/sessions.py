"""The dashboard's server-side sessions and its sign-in throttle (Redis, shared by every dashboard process).

Signing in makes a random session id (``secrets.token_urlsafe(32)``); the cookie holds only that id, and
Redis holds only its SHA-256 (the session's *ref*: what ``jobq web sessions list`` shows and ``revoke``
takes), so neither the token nor a usable id is ever stored. A session ends when

* it was not used for ``session_idle_s`` (the key's TTL, renewed by each request),
* it is ``session_max_s`` old (absolute: checked against its creation time, and the TTL never outlives it),
* its browser signs out, or it is revoked (``jobq web sessions revoke``),
* its token is no longer configured, or its token's secret was replaced since the sign-in (checked on
  every request by the caller: the session keeps the token's *generation*,
  :func:`jqruntime.tokens.generation`, a one-way tag of the token's digest, compared with the token of that
  name configured now; the admin flag too comes from the configuration of now, not the one at sign-in).

Failed token matches (sign-ins and ``Authorization: Bearer``) are counted per client address and token
prefix, and in all, in fixed windows (:class:`Throttle`); past either limit the sign-in form and Bearer
requests answer 429 with ``Retry-After`` until the window ends, before any token is compared.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from jqcore.clock import now_ms
from jqcore.keys import LOGIN_FAILURES_ALL_KEY, WEB_SESSIONS_KEY, login_failures_key, web_session_key
from jqengine import RedisClient, text

__all__ = [
    "PREFIX_CHARS",
    "Session",
    "SessionStore",
    "Throttle",
    "expires_in_ms",
    "prefix_tag",
    "ref_of",
    "select",
]

MIN_REF = 8
"""The shortest ref prefix ``revoke`` accepts (a shorter one could name several sessions by accident)."""
PREFIX_CHARS = 4
"""How much of a presented token keys the throttle: enough that operators' random tokens rarely share a
key (so one guesser does not lock the others out), little enough that the right token mistyped gives away
at most 4 of its characters (~24 bits, as a hash that is cheap to invert: no more is claimed)."""


def prefix_tag(presented: str) -> str:
    """The throttle's key part for a presented token: a hash of its first :data:`PREFIX_CHARS` characters."""
    head = presented.strip()[:PREFIX_CHARS]
    return hashlib.sha256(b"jobq.login-prefix\0" + head.encode()).hexdigest()[:16]


def ref_of(session_id: str) -> str:
    """The session's ref: the SHA-256 (hex) of its id, the only form Redis and the CLI see."""
    return hashlib.sha256(session_id.encode()).hexdigest()


def expires_in_ms(created_ms: int, now: int, idle_s: float, max_s: float) -> int:
    """How long a session used at ``now`` may live on: the idle expiry, cut at the absolute one (≤ 0:
    it is over)."""
    return min(int(idle_s * 1000), created_ms + int(max_s * 1000) - now)


@dataclass(frozen=True)
class Session:
    ref: str
    who: str
    """The name of the token it signed in with."""
    admin: bool
    """Whether the token was an admin token at sign-in (the caller checks today's configuration)."""
    created_ms: int
    seen_ms: int
    """When it was last used (its TTL says: the idle expiry minus what is left)."""
    generation: str = ""
    """The :func:`~jqruntime.tokens.generation` of the token's secret at sign-in (``""``: a session made
    before sessions kept it, which no token matches)."""


def select(sessions: Iterable[Session], target: str | None) -> list[Session]:
    """The sessions ``revoke`` ends: ``None`` every one; else those of the token named ``target``, or the
    one whose ref starts with ``target`` (at least :data:`MIN_REF` characters)."""
    every = list(sessions)
    if target is None:
        return every
    by_name = [s for s in every if s.who == target]
    if by_name:
        return by_name
    if len(target) >= MIN_REF:
        return [s for s in every if s.ref.startswith(target.lower())]
    return []


class SessionStore:
    def __init__(self, client: RedisClient, idle_s: float, max_s: float) -> None:
        self.client = client
        self.idle_s = idle_s
        self.max_s = max_s

    async def create(self, who: str, admin: bool, generation: str = "") -> str:
        """A new session for the token named ``who`` whose secret has ``generation``
        (:meth:`jqruntime.tokens.TokenSet.generation_of`); returns its id (the cookie's value)."""
        session_id = secrets.token_urlsafe(32)
        ref, now = ref_of(session_id), now_ms()
        key = web_session_key(ref)
        # (no MULTI: the keys are in different Cluster slots; a session left without its TTL still ends at
        # its absolute expiry, checked on use)
        async with self.client.pipeline(transaction=False) as pipe:
            admin_flag = "1" if admin else "0"
            pipe.hset(
                key, mapping={"who": who, "admin": admin_flag, "created_ms": str(now), "gen": generation}
            )
            pipe.pexpire(key, expires_in_ms(now, now, self.idle_s, self.max_s))
            pipe.zadd(WEB_SESSIONS_KEY, {ref: now})
            pipe.zremrangebyscore(WEB_SESSIONS_KEY, "-inf", now - int(self.max_s * 1000))  # past any expiry
            await pipe.execute()
        return session_id

    async def use(self, session_id: str) -> Session | None:
        """The live session of this id, its idle expiry renewed; None when there is none (expired, signed
        out, revoked, or never made)."""
        ref, now = ref_of(session_id), now_ms()
        key = web_session_key(ref)
        raw = await self.client.hgetall(key)
        found = self._parse(ref, raw, now)
        if found is None:
            return None
        left = expires_in_ms(found.created_ms, now, self.idle_s, self.max_s)
        if left <= 0:
            await self.end([ref])
            return None
        await self.client.pexpire(key, left)  # no-op when it was deleted meanwhile: never revives one
        return found

    def _parse(self, ref: str, raw: dict[bytes | str, bytes | str] | None, seen: int) -> Session | None:
        f = {text(k): text(v) for k, v in (raw or {}).items()}
        if not f.get("who") or not f.get("created_ms", "").isdigit():
            return None
        return Session(ref, f["who"], f.get("admin") == "1", int(f["created_ms"]), seen, f.get("gen", ""))

    async def end(self, refs: Iterable[str]) -> int:
        """End these sessions; returns how many were live."""
        refs = list(refs)
        if not refs:
            return 0
        async with self.client.pipeline(transaction=False) as pipe:
            for r in refs:  # one DEL per key: they are in different Cluster slots
                pipe.delete(web_session_key(r))
            pipe.zrem(WEB_SESSIONS_KEY, *refs)
            replies = await pipe.execute()
        return sum(int(n) for n in replies[:-1])

    async def list(self) -> list[Session]:
        """Every live session, oldest first (the index forgets the ones that expired)."""
        refs = [text(r) for r in await self.client.zrange(WEB_SESSIONS_KEY, 0, -1)]
        if not refs:
            return []
        now = now_ms()
        async with self.client.pipeline(transaction=False) as pipe:
            for ref in refs:
                pipe.hgetall(web_session_key(ref))
                pipe.pttl(web_session_key(ref))
            replies = await pipe.execute()
        out, gone = [], []
        for i, ref in enumerate(refs):
            raw, ttl = replies[2 * i], int(replies[2 * i + 1])
            seen = now - max(0, int(self.idle_s * 1000) - ttl) if ttl > 0 else now
            found = self._parse(ref, raw, seen)
            if found is None or ttl == -2:
                gone.append(ref)
            else:
                out.append(found)
        if gone:
            await self.client.zrem(WEB_SESSIONS_KEY, *gone)
        return out


class Throttle:
    """Failed token matches (sign-ins and ``Authorization: Bearer``), counted in fixed windows of
    ``window_s`` shared by every dashboard process: at most ``limit`` per (client address, token prefix) —
    the first :data:`PREFIX_CHARS` characters of the token presented, kept only as a hash — and at most
    ``limit_all`` from everyone. Past either, :meth:`retry_after_s` says how long to wait, and the caller
    refuses before it compares any token (so even the right token waits: no guess is answered)."""

    def __init__(self, client: RedisClient, limit: int, window_s: int, limit_all: int) -> None:
        self.client = client
        self.limit = limit
        self.window_s = window_s
        self.limit_all = limit_all

    def _keys(self, address: str, presented: str) -> tuple[str, str]:
        return login_failures_key(address, prefix_tag(presented)), LOGIN_FAILURES_ALL_KEY

    async def retry_after_s(self, address: str, presented: str) -> int:
        """0 when ``address`` may try ``presented`` now; else the seconds until it may."""
        keys = self._keys(address, presented)
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.get(key)
                pipe.ttl(key)
            own, own_ttl, every, every_ttl = await pipe.execute()
        wait = 0
        for key, count, ttl, limit in (
            (keys[0], own, own_ttl, self.limit),
            (keys[1], every, every_ttl, self.limit_all),
        ):
            if count is None or int(count) < limit:
                continue
            if int(ttl) < 0:  # the EXPIRE after the INCR was lost: the window starts now
                await self.client.expire(key, self.window_s, nx=True)
                ttl = self.window_s
            wait = max(wait, int(ttl), 1)
        return wait

    async def failed(self, address: str, presented: str) -> None:
        """One more failed match of ``presented`` from ``address``."""
        async with self.client.pipeline(transaction=False) as pipe:
            for key in self._keys(address, presented):  # (two keys: two Cluster slots, no MULTI)
                pipe.incr(key)
                pipe.expire(key, self.window_s, nx=True)
            await pipe.execute()
