"""The keys of queues and task graphs: the engine's own (``jqengine`` is the only package that formats
them; keys outside queues are in :mod:`jqcore.keys`).

All keys of a queue share the hash tag ``{<queue>}`` (``jobq:{emails}:ready``), so every multi-key script
runs on Redis Cluster. The Lua contract (BullMQ's): every key a script touches at a fixed name is passed
in its ``KEYS``, in the order of :data:`KEY_NAMES` (each script takes the subset it touches, declared once
in ``jqengine.scripts``; :meth:`QueueKeys.for_script` builds the list). What each of those keys holds is
written once, in :data:`KEY_DOCS` (a graph's: :data:`GRAPH_KEY_DOCS`), and generated from there into the
header of every script that takes it (``-- KEYS[i] <name> <TYPE> <what>``). The per-job and per-index keys
cannot be known in advance: scripts build them from the queue's prefix (``KEYS[1]``, same slot) and each
script's header lists the families it builds. :class:`QueueKeys` makes the same names for Python, and
``tests/state/test_lua_contract.py`` holds the Lua headers, the Python declarations and this module equal.

Built from a queue's prefix ``jobq:{q}:`` (the families of the scripts' ``-- derived:`` lines)

========================  ======  ============================================================
``job:<id>``              HASH    one job: envelope bytes, state, attempt, token, history, version
``idx:<k>=<v>``           ZSET    pending jobs with ``meta[k] == v`` for declared filter keys
``fcur:<sha1>``           STRING  a filtered claim's cursor: ``<score> <id>`` of the last index entry
                                  it read (sha1 of the sorted pairs; expires a day after its last use)
``xq:<value>``            ZSET    exclusive queues: jobs waiting behind that value's head
``parked:<kind>``         ZSET    jobs set aside while their kind is at its concurrency limit
``switched:<name>``       ZSET    jobs a kill switch parked, score = priority (``switch_lift.lua``)
``fair:<value>``          ZSET    fair queues: one value's ready jobs, score = priority
``fairtat:<value>``       STRING  fair queues: a rated value's theoretical arrival time (GCRA; it
                                  expires once the value's burst is whole again: ``lua/lib/fair_take.lua``)
``inbox:<waiter>``        LIST    jobs claimed for that waiting pool by a hand-off (JSON arrays)
========================  ======  ============================================================

A task graph's keys (``jobq:graph:{<graph id>}:``, one slot per graph; :class:`GraphKeys`) are all passed
in its scripts' ``KEYS``, in :data:`GRAPH_KEY_NAMES` order.

Only ``jqengine`` (the engine) reads or writes these: everyone else asks the engine.

Global (never touched by a script, so they need no hash tag): ``jobq:queues`` (SET of queue names),
``jobq:kinds`` (HASH: job-type defaults applied to new queues). Beside the queues, kept by the engine: the
relay's replication checks (:func:`synced_key`, expiring in a minute). The keys services keep beside the
queues with a plain client (the far tier's scan markers, the gateway's idempotency records, presence,
stage counters...) are named in :mod:`jqcore.keys`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, NamedTuple, get_args

__all__ = [
    "ENDED_GRAPHS_KEY",
    "GRAPHS_KEY",
    "GRAPH_KEY_DOCS",
    "GRAPH_KEY_NAMES",
    "KEY_DOCS",
    "KEY_NAMES",
    "KINDS_KEY",
    "QUEUES_KEY",
    "SWITCHES_KEY",
    "GraphKeyName",
    "GraphKeys",
    "KeyDoc",
    "KeyName",
    "QueueKeys",
    "synced_key",
]

KeyName = Literal[
    "prefix",
    "ready",
    "delayed",
    "far",
    "running",
    "done",
    "dead",
    "config",
    "kinds",
    "kindrun",
    "fairring",
    "fairrun",
    "fairtime",
    "counts",
    "stats",
    "xhead",
    "fences",
    "wake",
    "waiters",
    "sched",
    "events",
    "gdone",
]
"""The name of a queue key a script receives in ``KEYS`` (``prefix``: the prefix derived keys are built
from, not a key itself)."""

KEY_NAMES: tuple[KeyName, ...] = get_args(KeyName)
"""The one order of script ``KEYS``: a script's declaration lists the names it touches in this order."""

GraphKeyName = Literal[
    "graph",
    "nodes",
    "kids",
    "parents",
    "nstate",
    "pending",
    "gen",
    "results",
    "errors",
    "times",
    "rel",
    "gevents",
]
"""The name of a graph key a graph script receives in ``KEYS``."""
GRAPH_KEY_NAMES: tuple[GraphKeyName, ...] = get_args(GraphKeyName)


class KeyDoc(NamedTuple):
    """What a key passed in a script's ``KEYS`` is: the one text of it, which every script header that
    takes the key repeats, generated (``-- KEYS[i] <name> <type> <what>``: ``jqengine.scripts``)."""

    type: str
    """Its Redis type (``''`` for ``prefix``: not a key)."""
    what: str
    """What it holds."""


KEY_DOCS: Mapping[KeyName, KeyDoc] = MappingProxyType(
    {
        "prefix": KeyDoc("", '"jobq:{q}:", the prefix derived keys are built from (same slot; not a key)'),
        "ready": KeyDoc("ZSET", "pending jobs claimable now, score = priority (lower first)"),
        "delayed": KeyDoc("ZSET", "invisible jobs, score = run_at (ms)"),
        "far": KeyDoc("HASH", "far-future jobs kept in Kafka's schedule topic: id -> run_at (ms)"),
        "running": KeyDoc("ZSET", "claimed jobs, score = lease deadline (ms)"),
        "done": KeyDoc("ZSET", "terminal jobs, score = when GC removes them (ms)"),
        "dead": KeyDoc("ZSET", "errored jobs (the dead-letter list), score = when they died (ms)"),
        "config": KeyDoc("HASH", "queue configuration (jqengine.models.QueueConfig), created_at, switches"),
        "kinds": KeyDoc("HASH", "per-kind options: <kind>|limit, |attempts, |delivery, |prio, |noresult"),
        "kindrun": KeyDoc("HASH", "kind -> jobs of that kind running"),
        "fairring": KeyDoc("ZSET", "fair queues: fair_key values with ready jobs, score = pass"),
        "fairrun": KeyDoc("HASH", "fair queues: a value with a fair_limits entry -> its jobs running"),
        "fairtime": KeyDoc("ZSET", "fair queues: values out of the ring for their rate, score = next start"),
        "counts": KeyDoc(
            "HASH", "blocked: jobs waiting behind an exclusivity value or parked (kind limit, switch)"
        ),
        "stats": KeyDoc(
            "HASH", "lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)"
        ),
        "xhead": KeyDoc("HASH", "exclusivity value -> the job allowed to run"),
        "fences": KeyDoc("HASH", "fence source -> newest fence seen"),
        "wake": KeyDoc("LIST", "wake tokens for waiting workers (at most 64)"),
        "waiters": KeyDoc(
            "HASH", 'pools waiting for a hand-off: id -> "slots|lease_ms|deadline|token prefix|worker"'
        ),
        "sched": KeyDoc("LIST", "wake token for the scheduler (an earlier due time appeared)"),
        "events": KeyDoc(
            "STREAM", "lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)"
        ),
        "gdone": KeyDoc(
            "HASH",
            "cross-slot outbox: the outcomes of graph nodes' and tail children's jobs (job id -> JSON),"
            " tail children to enqueue ('>' child id -> JSON)",
        ),
    }
)
"""What each key of :data:`KEY_NAMES` holds (one entry per name)."""

GRAPH_KEY_DOCS: Mapping[GraphKeyName, KeyDoc] = MappingProxyType(
    {
        "graph": KeyDoc("HASH", "the graph: id, queue, state, options, counts per node state, version"),
        "nodes": KeyDoc("HASH", "node -> its definition (JSON: queue, kind, args, options, feed, parents)"),
        "kids": KeyDoc("HASH", 'node -> its children, one "<child> <policy>" a line'),
        "parents": KeyDoc("HASH", 'node -> its parents, one "<parent> <policy>" a line'),
        "nstate": KeyDoc("HASH", "node -> state (waiting, ready, completed, failed, canceled, skipped)"),
        "pending": KeyDoc("HASH", "node -> parents not finished yet"),
        "gen": KeyDoc("HASH", "node -> run generation (a graph retry runs a node again as gen + 1)"),
        "results": KeyDoc("HASH", "node -> result (JSON bytes)"),
        "errors": KeyDoc(
            "HASH", "node -> JSON {state, error, attempt, at, ...} of a node that did not complete"
        ),
        "times": KeyDoc("HASH", "<node>|r released, <node>|f finished (ms)"),
        "rel": KeyDoc("SET", "nodes released, not confirmed in their queues yet"),
        "gevents": KeyDoc("STREAM", "graph transitions not shipped to Kafka yet"),
    }
)
"""What each key of :data:`GRAPH_KEY_NAMES` holds."""


GRAPHS_KEY = "jobq:graphs"
"""ZSET of graphs not finished yet: graph id → when submitted (ms); the scheduler's repair reads it."""
ENDED_GRAPHS_KEY = "jobq:graphs:ended"
"""ZSET of the graphs that ended most recently: graph id → when the scheduler swept it from
:data:`GRAPHS_KEY` (ms), the newest ``ENDED_GRAPHS_KEPT`` kept (the dashboard lists them)."""

QUEUES_KEY = "jobq:queues"
KINDS_KEY = "jobq:kinds"
SWITCHES_KEY = "jobq:switches"
"""HASH of the kill switches in force: name → JSON (:mod:`jqengine.switchrules`); its field ``.`` is no
switch: the mark that the switches Consul keeps were put back (``RESTORED_FIELD``)."""


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
    def fairring(self) -> str:
        return self._k("fairring")

    @property
    def fairrun(self) -> str:
        return self._k("fairrun")

    @property
    def fairtime(self) -> str:
        return self._k("fairtime")

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
    def waiters(self) -> str:
        return self._k("waiters")

    def inbox(self, waiter: str) -> str:
        return self._k(f"inbox:{waiter}")

    @property
    def sched(self) -> str:
        return self._k("sched")

    @property
    def events(self) -> str:
        return self._k("events")

    @property
    def gdone(self) -> str:
        return self._k("gdone")

    @property
    def far(self) -> str:
        return self._k("far")

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

    def named(self, name: KeyName) -> str:
        """The key called ``name`` (see :data:`KeyName`)."""
        return self.prefix if name == "prefix" else self._k(name)

    def for_script(self, names: Sequence[KeyName]) -> list[str]:
        """The ``KEYS`` of a script that declares ``names`` (in :data:`KEY_NAMES` order)."""
        return [self.named(name) for name in names]


@dataclass(frozen=True, slots=True)
class GraphKeys:
    """The keys of one task graph (hash tag: the graph id)."""

    graph_id: str

    @property
    def prefix(self) -> str:
        return f"jobq:graph:{{{self.graph_id}}}:"

    def named(self, name: GraphKeyName) -> str:
        return self.prefix + name

    def for_script(self, names: Sequence[GraphKeyName]) -> list[str]:
        return [self.named(name) for name in names]

    def all(self) -> list[str]:
        return [self.named(name) for name in GRAPH_KEY_NAMES]


def synced_key(key: str) -> str:
    """A tiny key in ``key``'s slot that a replication check writes before its ``WAIT``
    (:mod:`jqengine.replication`): the same hash tag, or the whole key as the tag when it has none."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    tag = key[start + 1 : end] if end > start + 1 else key
    return f"jobq:synced:{{{tag}}}"
