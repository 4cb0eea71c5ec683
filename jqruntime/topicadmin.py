"""The cluster held to jobq's topic declaration (:mod:`jqcore.topics`), through Kafka's admin API.

:func:`inspect` compares the cluster with a declaration (one metadata request and one describe of the
configs), :func:`ensure` is a service's start-up (create what it owns when allowed, refuse on any
contradiction with one line per problem naming the fix) and :func:`apply` is ``jobq topics create``
(create everything, fix configs in place with an incremental alter; a replication factor cannot be
raised in place).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from jqcore.errors import BackendUnavailable
from jqcore.settings.kafka import KafkaSettings
from jqcore.topics import (
    CREATE,
    Inspection,
    Observed,
    Problem,
    TopicsInvalid,
    TopicSpec,
    diff,
    replication_for,
)
from jqruntime.kafka import CONSUME_WAIT_S

__all__ = ["Applied", "apply", "ensure", "inspect"]


def inspect(kafka: KafkaSettings, specs: Sequence[TopicSpec], timeout_s: float = 10.0) -> Inspection:
    """The cluster's view of ``specs``: one metadata request, one describe of the existing ones' configs."""
    return _inspect(_admin(kafka), kafka, specs, timeout_s)


def _inspect(
    admin: AdminClient, kafka: KafkaSettings, specs: Sequence[TopicSpec], timeout_s: float
) -> Inspection:
    brokers, seen = _describe(admin, [s.name for s in specs], timeout_s)
    rf = replication_for(kafka.replication, brokers)
    problems = [p for s in specs for p in diff(s, seen.get(s.name), rf)]
    return Inspection(brokers, rf, seen, problems)


def ensure(
    kafka: KafkaSettings,
    owns: Sequence[TopicSpec],
    uses: Sequence[TopicSpec] = (),
    timeout_s: float = 10.0,
) -> list[str]:
    """A service's start-up check: the topics it ``owns`` are created when missing (if
    ``JOBQ_KAFKA_CREATE_TOPICS`` allows it, else a refusal), those it only ``uses`` are checked when they
    exist; any contradiction raises :class:`TopicsInvalid` with one line per problem. Returns the names
    created."""
    specs = list({s.name: s for s in [*owns, *uses]}.values())
    owned = {s.name for s in owns}
    admin = _admin(kafka)
    found = _inspect(admin, kafka, specs, timeout_s)
    missing = [s for s in specs if s.name in owned and s.name not in found.seen]
    lines = [p.line for p in found.problems if p.code != "missing"]
    if missing and not kafka.create_topics:
        lines += [
            f"topic {s.name!r} ({s.role}) does not exist and JOBQ_KAFKA_CREATE_TOPICS is false: {CREATE}"
            for s in missing
        ]
    if lines:
        raise TopicsInvalid("\n".join(lines))
    return _create(admin, missing, found, timeout_s)


@dataclass(frozen=True, slots=True)
class Applied:
    """What ``jobq topics create`` did: topics created, configs altered, problems left (not fixable in
    place)."""

    replication: int
    created: list[str]
    altered: dict[str, dict[str, str]]
    left: list[Problem]


def apply(kafka: KafkaSettings, specs: Sequence[TopicSpec], timeout_s: float = 30.0) -> Applied:
    """Create every missing topic of ``specs``, set every wrong config in place (incremental alter) and
    return what is left (a replication factor below the declared one)."""
    admin = _admin(kafka)
    found = _inspect(admin, kafka, specs, timeout_s)
    missing = [s for s in specs if s.name not in found.seen]
    created = _create(admin, missing, found, timeout_s)
    fixes: dict[str, dict[str, str]] = {}
    for p in found.problems:
        if p.fix:
            fixes.setdefault(p.topic, {}).update(p.fix)
    _alter(admin, fixes, timeout_s)
    if fixes:  # brokers apply a change a moment after the controller took it: answer once it shows
        _settled(admin, [s for s in specs if s.name in fixes], found.replication, timeout_s)
    left = [p for p in found.problems if not p.fix and p.code != "missing"]
    return Applied(found.replication, created, fixes, left)


def _settled(admin: AdminClient, specs: Sequence[TopicSpec], replication: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, seen = _describe(admin, [s.name for s in specs], timeout_s)
        if not any(p.fix for s in specs for p in diff(s, seen.get(s.name), replication)):
            return
        time.sleep(0.1)
    raise BackendUnavailable("Kafka took the new topic configs but does not show them yet: run it again")


ANSWER_GRACE_S = 5.0
"""How much longer than its request's own timeout an admin call's answer is awaited: librdkafka fails a
request at its timeout, and that failure (not a bare ``TimeoutError`` of the wait racing it) says why."""


def _admin(kafka: KafkaSettings) -> AdminClient:
    return AdminClient({**kafka.client_config(), "log_level": 0})


def _describe(admin: AdminClient, names: Sequence[str], timeout_s: float) -> tuple[int, dict[str, Observed]]:
    deadline = time.monotonic() + timeout_s
    while True:  # short waits only (see jqruntime.kafka.CONSUME_WAIT_S): long ones were seen to hang
        try:
            md = admin.list_topics(timeout=CONSUME_WAIT_S)
            break
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                raise BackendUnavailable(f"no metadata from Kafka: {exc}", code="kafka_unavailable") from exc
    present = [n for n in names if n in md.topics and md.topics[n].error is None]
    configs = _configs(admin, present, deadline)
    seen = {}
    for n in present:
        parts = md.topics[n].partitions
        rf = min((len(p.replicas) for p in parts.values()), default=0)
        seen[n] = Observed(n, rf, len(parts), configs.get(n, {}))
    return len(md.brokers), seen


def _configs(admin: AdminClient, names: Sequence[str], deadline: float) -> dict[str, dict[str, str]]:
    """Each topic's configs. A topic created a moment ago may be in one broker's metadata and still unknown
    to the broker asked: asked again until ``deadline``."""
    out: dict[str, dict[str, str]] = {}
    left = list(names)
    while left:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in left]
        wait = max(1.0, deadline - time.monotonic())
        left = []
        for res, fut in admin.describe_configs(resources, request_timeout=wait).items():
            try:
                entries = fut.result(wait + ANSWER_GRACE_S)
            except TimeoutError:
                raise BackendUnavailable(
                    f"Kafka did not describe topic {res.name!r} within {wait:g} s", code="kafka_unavailable"
                ) from None
            except KafkaException as exc:
                unknown = exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                if unknown and time.monotonic() < deadline:
                    left.append(res.name)
                    continue
                raise BackendUnavailable(
                    f"describing topic {res.name!r} failed: {exc}", code="kafka_unavailable"
                ) from exc
            out[res.name] = {k: e.value for k, e in entries.items() if e.value is not None}
        if left:
            time.sleep(0.05)
    return out


def _create(admin: AdminClient, specs: Sequence[TopicSpec], found: Inspection, timeout_s: float) -> list[str]:
    if not specs:
        return []
    replication = found.replication
    if replication > found.brokers:
        raise TopicsInvalid(
            f"cannot create {', '.join(repr(s.name) for s in specs)}: JOBQ_KAFKA_REPLICATION={replication} "
            f"but the Kafka cluster has {found.brokers} broker(s) up: lower the setting or start the brokers"
        )
    new = [NewTopic(s.name, s.partitions, replication, config=s.config(replication)) for s in specs]
    created = []
    for name, fut in admin.create_topics(new, operation_timeout=timeout_s).items():
        try:
            fut.result(timeout_s + ANSWER_GRACE_S)
            created.append(name)
        except TimeoutError:
            raise BackendUnavailable(
                f"Kafka did not answer the creation of topic {name!r} within {timeout_s:g} s",
                code="kafka_unavailable",
            ) from None
        except KafkaException as exc:
            code = exc.args[0].code()
            if code == KafkaError.TOPIC_ALREADY_EXISTS:  # another service was first
                continue
            if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:  # a role that may not create topics (ACLs)
                if _appears(admin, name, timeout_s):  # ... raced the one that may (a scheduler, a relay)
                    continue
                raise BackendUnavailable(
                    f"topic {name!r} does not exist, this service may not create it ({exc}) and no other "
                    f"did within {timeout_s:g} s: {CREATE}",
                    code="kafka_unavailable",
                ) from exc
            raise BackendUnavailable(
                f"creating topic {name!r} failed: {exc}", code="kafka_unavailable"
            ) from exc
    return created


def _appears(admin: AdminClient, name: str, timeout_s: float) -> bool:
    """Whether topic ``name`` shows in Kafka's metadata within ``timeout_s`` (created by another service)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(KafkaException):
            topic = admin.list_topics(name, timeout=CONSUME_WAIT_S).topics.get(name)
            if topic is not None and topic.error is None:
                return True
        time.sleep(0.2)
    return False


def _alter(admin: AdminClient, fixes: Mapping[str, Mapping[str, str]], timeout_s: float) -> None:
    if not fixes:
        return
    resources = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in conf.items()
            ],
        )
        for topic, conf in fixes.items()
    ]
    for res, fut in admin.incremental_alter_configs(resources, request_timeout=timeout_s).items():
        try:
            fut.result(timeout_s + ANSWER_GRACE_S)
        except TimeoutError:
            raise BackendUnavailable(
                f"Kafka did not change the configs of topic {res.name!r} within {timeout_s:g} s",
                code="kafka_unavailable",
            ) from None
        except KafkaException as exc:
            raise BackendUnavailable(
                f"changing the configs of topic {res.name!r} failed: {exc}", code="kafka_unavailable"
            ) from exc
