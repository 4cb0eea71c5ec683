"""Every Kafka topic jobq uses, declared once with its settings, and the cluster held to them.

The declaration (:func:`declaration` and its parts) names each topic with its role, partitions and
configs; the replication factor is the cluster's business: ``JOBQ_KAFKA_REPLICATION``, by default
``min(3, brokers)`` read from the cluster's metadata, and ``min.insync.replicas`` = RF − 1 (at least 1), so
a topic keeps taking ``acks=all`` writes with one broker down and an acknowledged record is on two.

=========  ==============================  ==================================================
role       name                            cleanup
=========  ==============================  ==================================================
jobs       every routed topic              delete after 7 days
retry      ``<topic>.retry``               delete after 7 days
dead       ``<topic>.dead``                delete after 7 days
held       ``<topic>.held``                delete, ``retention.ms=-1``: the holding lane of a
                                           queue that steps aside (``docs/relay.md``); never
                                           compacted (a queue's records share a key), never
                                           by time (a record waits there until drained); the
                                           relay deletes what it drained
events     ``JOBQ_EVENTS_TOPIC``           delete after 7 days
schedule   ``JOBQ_FAR_TOPIC``              compact, ``retention.ms=-1``: a far-future job's only
                                           durable copy must never expire by time
audit      ``JOBQ_AUDIT_TOPIC``            delete after ``JOBQ_AUDIT_RETENTION_DAYS`` (365; 0:
                                           never), never compacted: every record has its own key,
                                           and compaction would let a tombstone erase one
=========  ==============================  ==================================================

:func:`diff` judges one topic against what the cluster says of it; :mod:`jqruntime.topicadmin` asks the
cluster (``inspect``), holds a service to its topics at start-up (``ensure``) and is ``jobq topics
create`` (``apply``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from jqcore.envelope import KAFKA_MAX_MESSAGE_BYTES
from jqcore.errors import ConfigError

if TYPE_CHECKING:
    from jqcore.settings.pipeline import AuditSettings, EventSettings, FarSettings

__all__ = [
    "AUDIT_PARTITIONS",
    "JOB_PARTITIONS",
    "RETENTION_MS",
    "Inspection",
    "Observed",
    "Problem",
    "Role",
    "TopicSpec",
    "TopicsInvalid",
    "audit_topic",
    "dead_topic",
    "declaration",
    "diff",
    "events_topic",
    "held_topic",
    "job_topics",
    "min_isr",
    "replication_for",
    "retry_topic",
    "schedule_topic",
]

JOB_PARTITIONS = 3
"""Partitions of a job topic (and its ``.retry``/``.dead``) when jobq creates it."""
RETENTION_MS = 7 * 86_400_000
"""Time retention of every topic but the schedule topic (the relay commits within seconds; the events
topic is what ``jobq rebuild`` reads back)."""
HELD_SEGMENT_MS = 3_600_000
"""A holding lane rolls a segment an hour, so the space of drained records (deleted by the relay below
what it drained) is returned within about an hour."""
MAX_BROKER_RF = 3
"""The default replication factor is ``min(MAX_BROKER_RF, brokers)``."""
CREATE = "run `jobq topics create`"

Role = Literal["jobs", "retry", "dead", "held", "events", "schedule", "audit"]
SIDE_SUFFIXES = (".retry", ".dead", ".held")
"""The topics the relay keeps beside each job topic: a job topic may not end so (a route naming
``jobs.x.held`` would be another topic's holding lane)."""


class TopicsInvalid(ConfigError):
    """An existing topic contradicts its declaration, or one a service needs is missing while services may
    not create topics (``JOBQ_KAFKA_CREATE_TOPICS=false``): the operator's to fix, one line per problem."""

    code = "topics_invalid"


def dead_topic(topic: str) -> str:
    """Malformed records and jobs the engine refuses for good, with the reason in headers."""
    return f"{topic}.dead"


def retry_topic(topic: str) -> str:
    """Jobs whose queue failed the write for a reason of its own (e.g. a damaged queue key): kept
    here, bytes unchanged, so the partition keeps flowing; re-relayed once the queue is repaired."""
    return f"{topic}.retry"


def held_topic(topic: str) -> str:
    """The holding lane: records of a queue that steps aside (paused, over its rate or its memory budget)
    wait here, in order, until the relay drains them into Redis (``jqrelay.lane``)."""
    return f"{topic}.held"


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One declared topic: its name, role and partitions (when jobq creates it)."""

    name: str
    role: Role
    partitions: int
    extra: Mapping[str, str] = field(default_factory=dict, compare=False)
    """More topic configs to create it with (e.g. ``unclean.leader.election.enable`` in a fault drill)."""

    @property
    def compacted(self) -> bool:
        return self.role == "schedule"

    @property
    def never_by_time(self) -> bool:
        """Its records must not expire by time: the schedule topic's and the holding lanes'."""
        return self.role in ("schedule", "held")

    def config(self, replication: int) -> dict[str, str]:
        """The topic configs jobq creates it with and holds it to (``replication``: the cluster's RF)."""
        lane = {"retention.bytes": "-1", "segment.ms": str(HELD_SEGMENT_MS)} if self.role == "held" else {}
        return {
            "cleanup.policy": "compact" if self.compacted else "delete",
            "retention.ms": "-1" if self.never_by_time else str(RETENTION_MS),
            "min.insync.replicas": str(min_isr(replication)),
            "max.message.bytes": str(KAFKA_MAX_MESSAGE_BYTES),  # the broker's default (~1 MiB) is too small
            **lane,
            **self.extra,
        }


def min_isr(replication: int) -> int:
    """``min.insync.replicas`` for a replication factor: RF − 1, at least 1."""
    return max(1, replication - 1)


def replication_for(setting: int | None, brokers: int) -> int:
    """The replication factor every topic gets and must have: the setting, else ``min(3, brokers)``."""
    return max(1, min(MAX_BROKER_RF, brokers)) if setting is None else setting


def job_topics(
    names: Iterable[str], partitions: int = JOB_PARTITIONS, *, sides: bool = True
) -> list[TopicSpec]:
    """Each job topic, with its ``.retry``, ``.dead`` and ``.held`` unless ``sides`` is false (the relay
    writes those; producers use only the job topics)."""
    out = []
    for name in dict.fromkeys(names):
        out.append(TopicSpec(name, "jobs", partitions))
        if sides:
            out += [
                TopicSpec(retry_topic(name), "retry", partitions),
                TopicSpec(dead_topic(name), "dead", partitions),
                TopicSpec(held_topic(name), "held", partitions),
            ]
    return out


def events_topic(events: EventSettings) -> TopicSpec:
    return TopicSpec(events.topic, "events", events.partitions)


def schedule_topic(far: FarSettings) -> TopicSpec:
    return TopicSpec(far.topic, "schedule", far.partitions)


AUDIT_PARTITIONS = 1
"""The audit topic's partitions: one keeps the records in order (a few records a minute need no more)."""


def audit_topic(audit: AuditSettings) -> TopicSpec:
    """The audit trail (:mod:`jqruntime.stores.audit`): kept ``retention_days`` (0: forever), by time only."""
    retention = str(audit.retention_days * 86_400_000) if audit.retention_days else "-1"
    return TopicSpec(audit.topic, "audit", AUDIT_PARTITIONS, {"retention.ms": retention})


def declaration(
    job_topic_names: Iterable[str],
    events: EventSettings,
    far: FarSettings,
    *,
    partitions: int = JOB_PARTITIONS,
    audit: AuditSettings | None = None,
) -> list[TopicSpec]:
    """Every topic of a deployment: the job topics (with their ``.retry``/``.dead``), the events topic,
    the audit topic and, when the far-future tier is on, the schedule topic."""
    from jqcore.settings.common import load
    from jqcore.settings.pipeline import AuditSettings  # settings a worker never builds: when asked

    specs = [*job_topics(job_topic_names, partitions), events_topic(events)]
    specs.append(audit_topic(audit if audit is not None else load(AuditSettings)))
    if far.enabled:
        specs.append(schedule_topic(far))
    return list({s.name: s for s in specs}.values())


@dataclass(frozen=True, slots=True)
class Observed:
    """An existing topic as the cluster describes it."""

    name: str
    replication: int
    """The smallest replica count of its partitions."""
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Problem:
    """One way a topic differs from its declaration: ``line`` names the topic, the problem and the fix;
    ``fix`` holds the configs an incremental alter sets (empty: not fixable in place)."""

    topic: str
    code: Literal["missing", "replication_low", "min_isr", "cleanup_policy", "retention"]
    line: str
    fix: Mapping[str, str] = field(default_factory=dict)


def diff(spec: TopicSpec, seen: Observed | None, replication: int) -> list[Problem]:
    """How ``seen`` (None: absent) contradicts ``spec`` on a cluster whose topics need ``replication``."""
    name = spec.name
    if seen is None:
        return [Problem(name, "missing", f"topic {name!r} ({spec.role}) does not exist: {CREATE}")]
    out: list[Problem] = []
    if seen.replication < replication:
        out.append(
            Problem(
                name,
                "replication_low",
                f"topic {name!r} ({spec.role}) has replication factor {seen.replication}, below "
                f"{replication} (JOBQ_KAFKA_REPLICATION, default min(3, brokers)): Kafka cannot raise it in "
                f"place; add replicas with kafka-reassign-partitions.sh",
            )
        )
    out += _min_isr(spec, seen, replication)
    policy = seen.config.get("cleanup.policy", "delete")
    if spec.compacted:
        never = {"cleanup.policy": "compact", "retention.ms": "-1"}
        if policy != "compact":
            why = "deletes old records" if "delete" in policy else "is not compacted"
            out.append(_config(spec, "cleanup_policy", f"has cleanup.policy={policy} ({why})", never))
    elif "compact" in policy:  # job records share keys (exclusivity values): compaction would drop jobs
        why = "compaction drops records that share a key"
        out.append(
            _config(
                spec, "cleanup_policy", f"has cleanup.policy={policy} ({why})", {"cleanup.policy": "delete"}
            )
        )
    if spec.never_by_time and (ms := seen.config.get("retention.ms", "-1")) != "-1":
        never = {"retention.ms": "-1", **({"cleanup.policy": "compact"} if spec.compacted else {})}
        out.append(_config(spec, "retention", f"has retention.ms={ms} (deletes by time)", never))
    if spec.role == "audit":  # shortening the audit topic's retention would erase its records
        want = int(spec.config(replication)["retention.ms"])
        have = int(seen.config.get("retention.ms", str(RETENTION_MS)))
        if (want == -1 and have != -1) or -1 < have < want:
            what = f"has retention.ms={have} (shorter than JOBQ_AUDIT_RETENTION_DAYS)"
            out.append(_config(spec, "retention", what, {"retention.ms": str(want)}))
    return out


def _min_isr(spec: TopicSpec, seen: Observed, replication: int) -> list[Problem]:
    """``min.insync.replicas`` must be at least RF − 1 of the declared RF (an acknowledged write is on that
    many brokers) and at most the topic's own RF − 1 (so one broker down leaves it writable)."""
    have = int(seen.config.get("min.insync.replicas", "1"))
    high = min_isr(seen.replication)
    low = min(min_isr(replication), high)  # a topic short of replicas is flagged for that already
    if low <= have <= high:
        return []
    why = "fewer replicas than RF − 1 confirm a write" if have < low else "one broker down stops its writes"
    want = low if have < low else high
    return [
        _config(
            spec, "min_isr", f"has min.insync.replicas={have} ({why})", {"min.insync.replicas": str(want)}
        )
    ]


def _config(
    spec: TopicSpec,
    code: Literal["cleanup_policy", "retention", "min_isr"],
    what: str,
    fix: Mapping[str, str],
) -> Problem:
    sets = ", ".join(f"{k}={v}" for k, v in fix.items())
    line = f"topic {spec.name!r} ({spec.role}) {what}: {CREATE} (sets {sets})"
    return Problem(spec.name, code, line, fix)


@dataclass(frozen=True, slots=True)
class Inspection:
    """A declaration against the cluster: its brokers, the replication factor topics need, the topics
    that exist and every problem (missing ones included)."""

    brokers: int
    replication: int
    seen: dict[str, Observed]
    problems: list[Problem]
