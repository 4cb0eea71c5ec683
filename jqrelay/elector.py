"""Leadership of one topic through a Consul session and a KV lock, as an explicit state machine.

::

                      start()
                         │
                         ▼
      ┌──────────▶ CANDIDATE ──── session + KV acquire ok ───▶ LEADER (term: fence, trusted_until)
      │            │      ▲                                      │  │
      │  acquire   │      │ lock released / key gone             │  │ renew ok: trusted_until moves on
      │  refused   ▼      │ (blocking query on the key)          │  └──────────────┐
      │          WAITING ─┘                                      │                 │
      │                                                          │ renew refused,  │
      └──────────────────────────── LOST ◀───────────────────────┘ key taken, or   │
                                   (stop relaying at once;        trust expired ◀─┘
                                    new session next round)
                         stop(): any state ──▶ STOPPED (release the lock, destroy the session)

A **term** starts when the acquire succeeds. Its **fence** is the key's ``LockIndex``, which Consul
increments on every successful acquire, so a later holder always has a larger fence; every write the
relay makes into Redis carries it and the engine refuses older fences.

**Trust window.** Consul never invalidates a session sooner than its TTL after the last renewal it
received, so a renewal *sent* at ``t`` proves leadership until at least ``t + ttl``. The holder trusts
its term only until ``t + ttl × trust_fraction`` (default 2/3) and renews every ``ttl / 3``; when the
trust window closes without a successful renewal (a partition, a paused process) the term is over
*before* Consul could have handed the lock to someone else. :meth:`Elector.trusted_term` is what callers
check before every batch. Lock-delay on the session keeps a new holder out for a while after an
invalidation, which covers in-flight writes of the old one in addition to the fence.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import consul
import consul.aio
import orjson

from jqcore.aio import cancel_and_wait, wait_event
from jqcore.log import get_logger
from jqruntime.lifecycle import Service

__all__ = ["Elector", "ElectorConfig", "Role", "Term", "describe"]

log = get_logger("jqrelay.elector")

Clock = Callable[[], float]


class Role(enum.Enum):
    CANDIDATE = "candidate"
    WAITING = "waiting"
    LEADER = "leader"
    LOST = "lost"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Term:
    """One period of leadership."""

    key: str
    session: str
    fence: int
    started_at: float


@dataclass(frozen=True, slots=True)
class ElectorConfig:
    ttl_s: int = 15
    """Session TTL (Consul accepts 10-86400 s)."""
    lock_delay_s: int = 5
    trust_fraction: float = 2 / 3
    wait_s: int = 5
    """Blocking-query wait while another process holds the lock (kept far below the HTTP timeout)."""
    retry_s: float = 1.0


class Elector(Service):
    """Campaign for ``key`` as ``holder`` until stopped; expose the current trusted term."""

    def __init__(
        self,
        client: consul.aio.Consul,
        key: str,
        holder: str,
        config: ElectorConfig | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        super().__init__()
        self.client, self.key, self.holder = client, key, holder
        self.config = config or ElectorConfig()
        self.clock = clock
        self.role = Role.CANDIDATE
        self._term: Term | None = None
        self._trusted_until = 0.0
        self._session: str | None = None
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._step_down = asyncio.Event()
        self.error: str | None = None
        """Why the last campaign step failed (Consul unreachable), until the lock is held or waited for."""

    # ---- what callers use ---------------------------------------------------------------------
    def trusted_term(self) -> Term | None:
        """The current term if this process may act as leader right now, else None."""
        if self.role is Role.LEADER and self._term is not None and self.clock() < self._trusted_until:
            return self._term
        return None

    def step_down(self) -> None:
        """End the current term now (the engine refused its fence: someone newer writes); campaign again."""
        if self.role is Role.LEADER:
            self._step_down.set()

    @property
    def trusted_until(self) -> float:
        return self._trusted_until

    async def wait_role(self, *roles: Role, timeout_s: float | None = None) -> Role:
        """Wait until the elector is in one of ``roles``; return it."""

        async def until() -> Role:
            async with self._changed:
                await self._changed.wait_for(lambda: self.role in roles)
                return self.role

        async with asyncio.timeout(timeout_s):
            return await until()

    # ---- lifecycle ----------------------------------------------------------------------------
    async def _start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"elector:{self.key}")

    async def _stop(self) -> None:
        await cancel_and_wait(self._task)
        await self._resign(Role.STOPPED)

    # ---- the machine --------------------------------------------------------------------------
    async def _set_role(self, role: Role) -> None:
        if role is not self.role:
            log.info(
                "elector role", key=self.key, holder=self.holder, role=role.value, previous=self.role.value
            )
        self.role = role
        if role in (Role.LEADER, Role.WAITING):
            self.error = None
        async with self._changed:
            self._changed.notify_all()

    async def _run(self) -> None:
        index: int | None = None
        while True:
            try:
                if await self._campaign():
                    await self._lead()
                    await self._set_role(Role.LOST)
                    await self._resign()
                    continue
                await self._set_role(Role.WAITING)
                index = await self._wait_for_release(index)
                await self._set_role(Role.CANDIDATE)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Consul unreachable: stay out of leadership, try again
                log.warning("elector error", key=self.key, error=repr(exc))
                self.error = repr(exc)
                await self._resign(Role.CANDIDATE)
                await asyncio.sleep(self.config.retry_s)

    async def _campaign(self) -> bool:
        if self._session is None:
            self._session = await self.client.session.create(
                name=f"jqrelay:{self.holder}",
                ttl=self.config.ttl_s,
                lock_delay=self.config.lock_delay_s,
                behavior="release",
            )
        sent = self.clock()
        value = orjson.dumps({"holder": self.holder, "since": round(time.time(), 3)}).decode()
        acquired = await self.client.kv.put(self.key, value, acquire=self._session)
        _, entry = await self.client.kv.get(self.key) if acquired else (None, None)
        if not entry or entry.get("Session") != self._session:
            await self._resign()  # an unrenewed session would expire while we wait; start fresh
            return False
        self._term = Term(self.key, self._session, int(entry["LockIndex"]), sent)
        self._trusted_until = sent + self.config.ttl_s * self.config.trust_fraction
        await self._set_role(Role.LEADER)
        return True

    async def _lead(self) -> None:
        """Renew every ttl/3; return when the term is over (session or key lost, or trust expired)."""
        next_renewal = self.clock() + self.config.ttl_s / 3
        self._step_down.clear()
        while True:
            if await wait_event(self._step_down, max(0.0, next_renewal - self.clock())):
                return
            outcome = await self._renew()
            if outcome is True:
                next_renewal = self.clock() + self.config.ttl_s / 3
            elif outcome is False or self.clock() >= self._trusted_until:
                return
            else:  # Consul did not answer: keep trying while the trust window is open
                next_renewal = self.clock() + self.config.retry_s

    async def _renew(self) -> bool | None:
        """One renewal: True (still leader), False (term over), None (no answer, unknown)."""
        assert self._session is not None
        sent = self.clock()
        try:
            renewed = await self.client.session.renew(self._session)
            _, entry = await self.client.kv.get(self.key)
        except consul.NotFound:
            self._session = None
            return False
        except Exception as exc:
            log.warning("session renew failed", key=self.key, error=repr(exc))
            return None
        if not renewed:
            self._session = None
            return False
        if not entry or entry.get("Session") != self._session:
            return False
        self._trusted_until = max(self._trusted_until, sent + self.config.ttl_s * self.config.trust_fraction)
        return True

    async def _wait_for_release(self, index: int | None) -> int | None:
        """Block (Consul blocking query) until the key changes; return the index to wait from next."""
        new_index, entry = await self.client.kv.get(self.key, index=index, wait=f"{self.config.wait_s}s")
        if entry is None or not entry.get("Session"):
            return None
        return int(new_index) if new_index is not None else None

    async def _resign(self, role: Role | None = None) -> None:
        """Stop trusting the term, take ``role`` (logged while the lock is still held: a log read in order
        shows a holder's term ending before the next one's begins), then release the lock and the session."""
        session, self._session, self._term = self._session, None, None
        self._trusted_until = 0.0
        if role is not None:
            await self._set_role(role)
        if session is None:
            return
        with contextlib.suppress(Exception):
            await self.client.kv.put(self.key, self.holder, release=session)
        with contextlib.suppress(Exception):
            await self.client.session.destroy(session)


def describe(elector: Elector) -> dict[str, Any]:
    """A status row for ``jobq status`` and ``/metrics``-style views."""
    term = elector.trusted_term()
    return {
        "key": elector.key,
        "holder": elector.holder,
        "role": elector.role.value,
        "fence": term.fence if term else None,
        "trusted_for_s": max(0.0, elector.trusted_until - elector.clock()) if term else 0.0,
    }
