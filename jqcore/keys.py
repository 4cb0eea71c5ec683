"""Redis keys outside the queues (no hash tag: no script touches them), in one place. Queue and graph keys
are the engine's own: :mod:`jqcore.state.keys` (only ``jqcore.state`` formats them; everyone else asks the
engine).

Written with a plain client by their owners: the canary's health hash (:data:`CANARY_HEALTH_KEY`), process
presence (:func:`presence_key`), the scheduler's membership (:func:`members_key`), stage counters
(:func:`stages_key`), the queues' rate samples (:func:`series_key`, the dashboard's 24 h charts) and the
dashboard's audit log (:data:`AUDIT_KEY`).
"""

from __future__ import annotations

__all__ = [
    "AUDIT_KEY",
    "CANARY_HEALTH_KEY",
    "MEMBER_GROUPS_KEY",
    "member_notes_key",
    "members_key",
    "presence_key",
    "series_key",
    "stages_key",
]

CANARY_HEALTH_KEY = "jobq:canary:health"
"""Hash: ``<topic>/<partition>`` → JSON of the last canary probe (written by the canary, read by status)."""


PRESENCE_KEY = "jobq:presence:{role}"
"""Sorted set per role (``gate``, ``worker``): member = process name, score = last heartbeat (ms)."""


def presence_key(role: str) -> str:
    return PRESENCE_KEY.format(role=role)


MEMBER_GROUPS_KEY = "jobq:member-groups"
"""SET of the member groups that ever beat (``jobq status`` lists them)."""


def members_key(group: str) -> str:
    """ZSET of a group's live members (scheduler instances), score = last heartbeat (Redis server ms)."""
    return f"jobq:members:{group}"


def member_notes_key(group: str) -> str:
    """HASH member → what it reported at its last beat (a scheduler: how many queues it keeps)."""
    return f"jobq:members:{group}:notes"


def stages_key(topic: str) -> str:
    """Hash of a topic's stage counters (produced by gateways; read, written, duplicate, dead... by the
    relay), summed over every process, for ``jobq reconcile``."""
    return f"jobq:stages:{topic}"


def series_key(queue: str) -> str:
    """ZSET of the queue's counter samples (score: sample time in ms; ``jqcore.series``)."""
    return f"jobq:series:{queue}"


AUDIT_KEY = "jobq:audit"
"""STREAM of the dashboard's actions (who, what, how many jobs; ``jqweb.audit``), capped."""
