"""Redis keys outside the queues (no hash tag: no script touches them), in one place. Queue and graph keys
are the engine's own: :mod:`jqengine.keys` (only ``jqengine`` formats them; everyone else asks the
engine).

Written with a plain client by their owners (one rule for every non-queue key): the canary's health hash
(:data:`CANARY_HEALTH_KEY`), process presence (:func:`presence_key`), the scheduler's membership
(:func:`members_key`), stage counters (:func:`stages_key`), the queues' rate samples (:func:`series_key`,
the dashboard's 24 h charts), the audit trail (:data:`AUDIT_KEY`, ``jqruntime.stores.audit``), the
relays' shared queue memory samples, topic fences and held queues (:data:`QUEUE_MEMORY_KEY`,
:data:`RELAY_FENCES_KEY`, :data:`RELAY_HELD_KEY`), the gateway's idempotency records
(:func:`idempotency_key`), the far tier's scan markers (:func:`far_scanned_key`, :func:`far_scanning_key`),
the push-dispatch configurations (:data:`DISPATCH_KEY`) and the dashboard's sessions and sign-in
throttle (:func:`web_session_key`, :data:`WEB_SESSIONS_KEY`, :func:`login_failures_key`,
:data:`LOGIN_FAILURES_ALL_KEY`; ``jqweb.sessions``).
"""

from __future__ import annotations

__all__ = [
    "AUDIT_KEY",
    "CANARY_HEALTH_KEY",
    "DISPATCH_KEY",
    "LOGIN_FAILURES_ALL_KEY",
    "MEMBER_GROUPS_KEY",
    "QUEUE_MEMORY_KEY",
    "RELAY_FENCES_KEY",
    "RELAY_HELD_KEY",
    "WEB_SESSIONS_KEY",
    "control_key",
    "far_scanned_key",
    "far_scanning_key",
    "idempotency_key",
    "login_failures_key",
    "member_notes_key",
    "members_key",
    "presence_key",
    "presence_record_key",
    "series_key",
    "stages_key",
    "web_session_key",
]

CANARY_HEALTH_KEY = "jobq:canary:health"
"""Hash: ``<topic>/<partition>`` → JSON of the last canary probe (written by the canary, read by status)."""


DISPATCH_KEY = "jobq:dispatch:by-queue"
"""Hash: ``<queue>|<kind>`` (``*|<kind>``: every queue) → JSON of that push-dispatch configuration
(``jqruntime.stores.dispatch``; written by the gateway's ``PUT /v1/kinds/{kind}``, read by the dispatchers
and the gateway's callbacks). The kind-only hash ``jobq:dispatch`` of earlier builds is not read."""


PRESENCE_KEY = "jobq:presence:{role}"
"""Sorted set per role (``worker``, ``relay``, ``gate``...): member = process name, score = last heartbeat
(ms)."""


def presence_key(role: str) -> str:
    return PRESENCE_KEY.format(role=role)


def presence_record_key(role: str, name: str) -> str:
    """HASH beside a live process's heartbeat: what it is (host, pid, start, version, what it serves, busy
    and total slots, jobs processed, its state; each field a JSON value) and, for a claiming process
    (worker pools, dispatchers, HTTP workers), ``q:<queue>`` → when it last claimed from that queue (ms);
    expires with the process's memory (``jqruntime.stores.presence``)."""
    return f"{PRESENCE_KEY.format(role=role)}:{name}"


def control_key(role: str, name: str) -> str:
    """String per process asked to change course (JSON: ``quiet`` or ``stop``, by whom, for which start),
    read at its heartbeat (``jqruntime.stores.presence``)."""
    return f"jobq:control:{role}:{name}"


MEMBER_GROUPS_KEY = "jobq:member-groups"
"""SET of the member groups that ever beat (``jobq status`` lists them)."""


def members_key(group: str) -> str:
    """ZSET of a group's live members (scheduler instances), score = last heartbeat (Redis server ms)."""
    return f"jobq:members:{group}"


def member_notes_key(group: str) -> str:
    """HASH member → what it reported at its last beat (a scheduler: how many queues it keeps)."""
    return f"jobq:members:{group}:notes"


QUEUE_MEMORY_KEY = "jobq:relay:qmem"
"""Hash: queue → ``<bytes>:<ms>``, the last estimate of the queue's memory by any relay process and when
(``jqrelay.budgets``: every process counts the same big queues for the fair share)."""

RELAY_FENCES_KEY = "jobq:relay:fences"
"""Sorted set: topic → the newest relay term's fence (``ZADD GT``): a stale holder that wrote nothing fenced
in a batch (it set every record aside) learns it is stale before it commits (``jqrelay.lane``)."""

RELAY_HELD_KEY = "jobq:relay:held"
"""Hash: topic → JSON of the queues its lock holder holds in the topic's holding lane (reason, since,
records, oldest, drain rate), rewritten each second; a display cache (the truth is in Kafka) read by
``jobq status``, the dashboard and ``GET /v1/queues/{queue}``."""


def stages_key(topic: str) -> str:
    """Hash of a topic's stage counters (produced by gateways; read, written, duplicate, dead... by the
    relay), summed over every process, for ``jobq reconcile``."""
    return f"jobq:stages:{topic}"


def series_key(queue: str) -> str:
    """ZSET of the queue's counter samples (score: sample time in ms; ``jqruntime.stores.series``)."""
    return f"jobq:series:{queue}"


AUDIT_KEY = "jobq:audit"
"""STREAM of the audit trail: dashboard actions and sign-ins, gateway admin calls, CLI repairs (who, token,
what, how many jobs, outcome; ``jqruntime.stores.audit``), capped; each entry is also on the Kafka audit
topic."""

WEB_SESSIONS_KEY = "jobq:web:sessions"
"""ZSET of the dashboard's sessions: member = the session's ref (SHA-256 of its id), score = created (ms);
entries older than the absolute expiry are dropped when a session is made."""


def web_session_key(ref: str) -> str:
    """HASH of one dashboard session (``who``, ``admin``, ``created_ms``, ``gen``: its token's generation),
    keyed by the SHA-256 of its id (the cookie's value is not in Redis); its TTL is the idle expiry, renewed
    by each request."""
    return f"jobq:web:session:{ref}"


def login_failures_key(address: str, prefix_tag: str) -> str:
    """STRING counting failed dashboard token matches (sign-ins and Bearer) from one client address with
    tokens of one prefix (``prefix_tag``: a hash of their first characters) in the current window (TTL)."""
    return f"jobq:web:login-failures:{address}:{prefix_tag}"


LOGIN_FAILURES_ALL_KEY = "jobq:web:login-failures-all"
"""STRING counting every failed dashboard token match in the current window (TTL): the global budget."""


def idempotency_key(digest: str) -> str:
    """The gateway's record of one ``Idempotency-Key`` (its body hash)."""
    return f"jobq:idem:{digest}"


def far_scanned_key(topic: str, partition: int) -> str:
    """Set once a scheduler instance wrote (or found) every index entry of a schedule-topic partition in this
    Redis: a missing key (Redis lost, FLUSHALL) makes the owner write them again from its memory."""
    return f"jobq:far:indexed:{topic}/{partition}"


def far_scanning_key(topic: str, partition: int) -> str:
    """Set when the owner starts writing a schedule-topic partition's index entries: it marks the partition
    scanned only if this is still there (a Redis lost meanwhile took it)."""
    return f"jobq:far:indexing:{topic}/{partition}"
