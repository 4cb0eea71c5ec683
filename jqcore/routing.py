"""Queue → Kafka topic routing, shared by every producer (gateway, Spark, canary, CLI) and the relay.

Routes are an ordered list of ``fnmatch`` patterns over queue names; the first match names the topic
(``jobs.<group>``, the brief's queue groups) and the acks the gateway waits for. A queue no route
matches goes to ``default_topic``; with ``default_topic`` empty such a queue is refused (``queue_unrouted``),
so a typo never creates work nobody relays. Topics are never created from user input: they exist (created
by ``jobq topics create`` or the operator) or the produce fails with a clear error.

``JOBQ_ROUTES`` holds the list as JSON::

    [{"queues": "emails*", "topic": "jobs.emails"},
     {"queues": "clicks", "topic": "jobs.analytics", "acks": "leader"}]
"""

from __future__ import annotations

import fnmatch
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.envelope import CANARY_KIND, CANARY_PREFIX
from jqcore.errors import JobqError
from jqcore.settings.common import CommaList, JsonText
from jqcore.topics import SIDE_SUFFIXES

__all__ = [
    "CANARY_KIND",
    "CANARY_PREFIX",
    "DEFAULT_TOPIC",
    "QueueNotAllowed",
    "QueueUnrouted",
    "Route",
    "RoutingSettings",
]

DEFAULT_TOPIC = "jobs.default"
Acks = Literal["all", "leader"]


class QueueUnrouted(JobqError):
    """No route sends this queue to a topic (and there is no default topic)."""

    code = "queue_unrouted"
    http_status = 404


class QueueNotAllowed(QueueUnrouted):
    """The queue matches none of ``JOBQ_QUEUES_ALLOWED``: nobody may create it."""

    code = "queue_not_allowed"
    http_status = 403


class Route(BaseModel):
    queues: str = Field(min_length=1)
    """fnmatch pattern over queue names."""
    topic: str = Field(pattern=r"^[A-Za-z0-9._-]{1,249}$")
    acks: Acks = "all"
    """``all`` (durable, the default) or ``leader`` (lower latency; a leader failure may lose the write)."""

    @field_validator("topic")
    @classmethod
    def _not_a_side(cls, topic: str) -> str:
        return _job_topic(topic)


def _job_topic(topic: str) -> str:
    """A job topic's name may not end as the relay's side topics do (``.retry``, ``.dead``, ``.held``):
    such a name is another job topic's side."""
    if topic.endswith(SIDE_SUFFIXES):
        raise ValueError(f"a job topic may not end with {', '.join(SIDE_SUFFIXES)} (the relay's own topics)")
    return topic


class RoutingSettings(BaseSettings):
    """Queue → Kafka topic routing (``JOBQ_ROUTES``, ``JOBQ_DEFAULT_*``), read by every producer and the
    relay."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_", extra="ignore")

    routes: Annotated[list[Route], JsonText] = Field(default_factory=list)
    """Routes as JSON, ``[{"queues": fnmatch pattern, "topic": name, "acks": "all" or "leader"}, ...]``; the
    first match names a queue's topic. Set it to give queues topics of their own (isolation, partitions,
    acks)."""
    default_topic: str = DEFAULT_TOPIC
    """Topic for queues no route matches; empty refuses them (``queue_unrouted``). Empty it when every queue
    must be routed on purpose."""
    default_acks: Acks = "all"
    """Acks the gateway waits for on the default topic (``leader``: lower latency; a leader failure may
    lose the write)."""
    queues_allowed: CommaList = Field(default_factory=list)
    """Queue name globs (comma-separated, e.g. ``billing.*,emails``) a job may name; empty: every queue a
    route or the default topic takes. A queue outside them is refused by every producer (403
    ``queue_not_allowed`` at the gateway) and dead-lettered by the relay (``misrouted``): a client cannot
    create queues (each one scheduler work, metric series and dashboard rows) by naming them."""

    def route(self, queue: str) -> tuple[str, Acks]:
        """(topic, acks) for ``queue``; raises :class:`QueueUnrouted` (:class:`QueueNotAllowed` for a queue
        outside ``queues_allowed``). ``canary.<topic>`` queues go to
        ``<topic>`` (the heartbeat canary reaches every topic this way)."""
        if queue.startswith(CANARY_PREFIX) and queue[len(CANARY_PREFIX) :] in self.topics():
            return queue[len(CANARY_PREFIX) :], "all"
        if not self.allows(queue):
            raise QueueNotAllowed(
                f"queue {queue!r} is not one of the queues allowed here (JOBQ_QUEUES_ALLOWED:"
                f" {', '.join(self.queues_allowed)})"
            )
        for r in self.routes:
            if fnmatch.fnmatchcase(queue, r.queues):
                return r.topic, r.acks
        if not self.default_topic:
            raise QueueUnrouted(f"no route sends queue {queue!r} to a topic (see JOBQ_ROUTES)")
        return self.default_topic, self.default_acks

    def allows(self, queue: str) -> bool:
        """Whether ``queue`` is one of ``queues_allowed`` (every queue when that is empty)."""
        return not self.queues_allowed or any(fnmatch.fnmatchcase(queue, g) for g in self.queues_allowed)

    @field_validator("default_topic")
    @classmethod
    def _default_not_a_side(cls, topic: str) -> str:
        return _job_topic(topic) if topic else topic

    def topics(self) -> list[str]:
        """Every topic a producer may write (what the relay and the canary cover)."""
        names = [r.topic for r in self.routes]
        if self.default_topic:
            names.append(self.default_topic)
        return list(dict.fromkeys(names))
