"""What a record read from Kafka must be to enter Redis: the rules every reader of a jobs topic applies
(the relay, ``jobq rebuild``, ``jobq replay``), so a producer allowed to write one topic gets no more than
the jobs of that topic's queues.

* **Kinds under** ``jobq.`` (:data:`RESERVED_PREFIX`) are jobq's own. No producer may send one — the
  gateway, cron schedules and the Spark sink refuse them (:func:`reserved_problem`; the canary's heartbeat
  into a canary queue is the one exception) — except a task graph that a gateway checked node by node
  against its caller's token: its record carries the gateway's
  signature (:data:`SIGNATURE_HEADER`, an HMAC of the record's bytes with the deployment's graph key, kept
  in Consul by :mod:`jqruntime.stores.config`). Any other ``jobq.*`` record is refused, a signed graph
  whose nodes name a queue the routing does not allow too.
* **A job of a graph node** (an envelope with ``graph``) is made by the engine when the graph releases the
  node, never read from Kafka: a record carrying one is refused (it would report into another tenant's
  graph).
* Every other record's queue must route to the topic it was read from (the relay's ``misrouted`` check).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence

from jqcore.envelope import RESERVED_PREFIX, Envelope
from jqcore.errors import GraphInvalid
from jqcore.graphs import spec_of
from jqcore.routing import CANARY_KIND, CANARY_PREFIX, QueueNotAllowed, QueueUnrouted, RoutingSettings

__all__ = [
    "GRAPH_KEY_BYTES",
    "RESERVED_PREFIX",
    "SIGNATURE_HEADER",
    "Admission",
    "carries_signature",
    "reserved_problem",
    "sign",
    "signed",
]

SIGNATURE_HEADER = "jobq-sig"
GRAPH_KEY_BYTES = 32


def reserved_problem(kind: str, queue: str = "") -> str | None:
    """Why a producer may not send ``kind`` into ``queue`` (None: it may). The canary's heartbeat job
    (:data:`~jqcore.routing.CANARY_KIND`) is the one jobq kind a producer sends, into a canary queue."""
    if not kind.startswith(RESERVED_PREFIX) or (kind == CANARY_KIND and queue.startswith(CANARY_PREFIX)):
        return None
    return f"kinds under {RESERVED_PREFIX!r} are jobq's own (a task graph goes to POST /v1/graphs)"


def sign(key: bytes, value: bytes) -> bytes:
    """The signature a gateway puts on a graph record it checked (:data:`SIGNATURE_HEADER`)."""
    return hmac.new(key, value, hashlib.sha256).hexdigest().encode()


Headers = Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None
"""A record's headers as confluent-kafka gives them."""


def _pairs(headers: Headers) -> Iterable[tuple[str, str | bytes | None]]:
    return headers.items() if isinstance(headers, Mapping) else headers or ()


def carries_signature(headers: Headers) -> bool:
    """Whether a record claims a gateway's signature (a reader then needs the graph key)."""
    return any(name == SIGNATURE_HEADER for name, _ in _pairs(headers))


def signed(key: bytes, value: bytes, headers: Headers) -> bool:
    """Whether ``value`` carries a valid signature of ``key`` (constant-time compare)."""
    for name, given in _pairs(headers):
        if name == SIGNATURE_HEADER and given is not None:
            raw = given.encode() if isinstance(given, str) else given
            return hmac.compare_digest(raw, sign(key, value))
    return False


ROUTED_CACHE_MAX = 10_000
"""Queue names whose route an :class:`Admission` remembers (they come from producers: bounded)."""


class Admission:
    """The rules above for the records of one ``topic``: ``routing`` None is a topic no route names (its
    queues are not checked); a graph is admitted when signed with one of ``keys`` (none: no graph, a
    reader without the deployment's key; a relay passes every key it has held, so a record signed
    before the key was made anew still enters). ``problem`` gives why a record may not enter, else None;
    ``misrouted`` and ``unsigned`` count the refusals for a queue routed elsewhere and for a missing or
    bad signature (a key made anew: read it again)."""

    def __init__(self, topic: str, routing: RoutingSettings | None, keys: Iterable[bytes]) -> None:
        self.topic, self.routing, self.keys = topic, routing, tuple(keys)
        self._routed: dict[str, str | None] = {}
        self.misrouted = self.unsigned = 0

    def problem(self, env: Envelope, value: bytes, headers: Headers) -> str | None:
        if env.graph is not None:
            return "graph_field_refused: a graph node's job is made by its graph, never read from Kafka"
        if reserved_problem(env.kind, env.queue) is not None:
            why = self._graph(env, value, headers)
            if why is not None:
                return why
        return self._route(env.queue)

    def _graph(self, env: Envelope, value: bytes, headers: Headers) -> str | None:
        if not any(signed(key, value, headers) for key in self.keys):
            self.unsigned += 1
            return f"kind_reserved: {env.kind!r} is jobq's own and the record carries no gateway signature"
        try:
            spec = spec_of(env)
        except GraphInvalid as exc:
            return f"{exc.code}: {exc.message}"
        if spec.queue != env.queue:
            return f"graph_invalid: the graph's queue {spec.queue!r} is not its record's {env.queue!r}"
        allows = self.routing.allows if self.routing is not None else None
        refused = sorted({n.queue for n in spec.all_nodes() if allows is not None and not allows(n.queue)})
        if refused:
            return f"queue_not_allowed: the graph names queues this deployment does not serve: {refused[:5]}"
        return None

    def _route(self, queue: str) -> str | None:
        if self.routing is None:
            return None
        if queue not in self._routed:
            if len(self._routed) >= ROUTED_CACHE_MAX:
                self._routed.clear()
            try:
                self._routed[queue] = self.routing.route(queue)[0]
            except QueueNotAllowed:
                self._routed[queue] = ""
            except QueueUnrouted:
                self._routed[queue] = None
        routed = self._routed[queue]
        if routed == self.topic:
            return None
        self.misrouted += 1
        where = f"is routed to {routed}" if routed else "has no route" if routed is None else "is not allowed"
        return f"misrouted: queue {queue[:200]!r} {where}, not {self.topic}"
