"""Every Redis key of jobq, in one place. Nothing else formats a key.

All keys of a queue share the hash tag ``{<queue>}`` (``jobq:{emails}:ready``), so every multi-key script
runs on Redis Cluster. Scripts receive the queue's prefix as ``KEYS[1]`` and derive the per-job and
per-index keys below from it (BullMQ does the same); those derived names are listed here too, and
:class:`QueueKeys` builds them for Python readers, so the Lua and Python sides cannot drift apart.

Per queue ``jobq:{q}:``

========================  ======  ============================================================
``ready``                 ZSET    pending jobs claimable now, score = priority (lower first)
``delayed``               ZSET    invisible jobs, score = run_at (ms)
``running``               ZSET    claimed jobs, score = lease deadline (ms)
``done``                  ZSET    terminal jobs, score = when GC may remove them (ms)
``dead``                  ZSET    errored jobs (the dead-letter list), score = when they died (ms)
``job:<id>``              HASH    one job: envelope bytes, state, attempt, token, history, version
``idx:<k>=<v>``           ZSET    pending jobs with ``meta[k] == v`` for declared filter keys
``xhead``                 HASH    exclusive queues: exclusivity value → the job allowed to run
``xq:<value>``            ZSET    exclusive queues: jobs waiting behind that value's head
``parked:<kind>``         ZSET    jobs set aside while their kind is at its concurrency limit
``kindrun``               HASH    kind → jobs of that kind running now
``kinds``                 HASH    ``<kind>|limit``, ``<kind>|attempts``, ``<kind>|delivery``
``config``                HASH    queue configuration (see ``jqcore.state.config``)
``counts``                HASH    ``blocked``: jobs waiting on an exclusivity value or a kind slot
``stats``                 HASH    monotonic counters (enqueued, duplicates, completed, …)
``fences``                HASH    fence source (topic) → newest fence seen
``wake``                  LIST    wake-up tokens for waiting workers (kept short)
``sched``                 LIST    wake-up token for the scheduler (an earlier due time appeared)
========================  ======  ============================================================

Global (never touched by a script, so they need no hash tag): ``jobq:queues`` (SET of queue names),
``jobq:kinds`` (HASH: job-type defaults applied to new queues).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KINDS_KEY", "QUEUES_KEY", "QueueKeys"]

QUEUES_KEY = "jobq:queues"
KINDS_KEY = "jobq:kinds"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue."""

    queue: str

    @property
    def prefix(self) -> str:
        return f"jobq:{{{self.queue}}}:"

    def _k(self, name: str) -> str:
        return self.prefix + name

    @property
    def ready(self) -> str:
        return self._k("ready")

    @property
    def delayed(self) -> str:
        return self._k("delayed")

    @property
    def running(self) -> str:
        return self._k("running")

    @property
    def done(self) -> str:
        return self._k("done")

    @property
    def dead(self) -> str:
        return self._k("dead")

    @property
    def config(self) -> str:
        return self._k("config")

    @property
    def kinds(self) -> str:
        return self._k("kinds")

    @property
    def kindrun(self) -> str:
        return self._k("kindrun")

    @property
    def counts(self) -> str:
        return self._k("counts")

    @property
    def stats(self) -> str:
        return self._k("stats")

    @property
    def fences(self) -> str:
        return self._k("fences")

    @property
    def wake(self) -> str:
        return self._k("wake")

    @property
    def sched(self) -> str:
        return self._k("sched")

    @property
    def xhead(self) -> str:
        return self._k("xhead")

    def job(self, job_id: str) -> str:
        return self._k(f"job:{job_id}")

    def index(self, key: str, value: str) -> str:
        return self._k(f"idx:{key}={value}")

    def waiting(self, excl: str) -> str:
        return self._k(f"xq:{excl}")

    def parked(self, kind: str) -> str:
        return self._k(f"parked:{kind}")

    def script_keys(self) -> list[str]:
        """``KEYS`` for every script: the prefix first (derived keys), then the fixed keys it touches."""
        return [self.prefix, self.ready, self.delayed, self.running, self.done, self.config]


def idempotency_key(digest: str) -> str:
    """The gateway's record of one ``Idempotency-Key`` (its body hash), outside every queue's slot."""
    return f"jobq:idem:{digest}"


CANARY_HEALTH_KEY = "jobq:canary:health"
"""Hash: ``<topic>/<partition>`` → JSON of the last canary probe (written by the canary, read by status)."""


PRESENCE_KEY = "jobq:presence:{role}"
"""Sorted set per role (``gate``, ``worker``): member = process name, score = last heartbeat (ms)."""


def presence_key(role: str) -> str:
    return PRESENCE_KEY.format(role=role)


def stages_key(topic: str) -> str:
    """Hash of a topic's stage counters (produced by gateways; read, written, duplicate, dead... by the
    relay), summed over every process, for ``jobq reconcile``."""
    return f"jobq:stages:{topic}"
