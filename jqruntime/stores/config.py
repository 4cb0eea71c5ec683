"""Queue configurations and job types' options in Consul KV: the durable copy of what Redis holds.

Redis holds what is in force (the scripts read it there); this copy survives a Redis loss, and
``jobq rebuild`` restores it (:func:`restore`) before any job goes back. It is written by what changes
them for operators, after Redis took the change: the gateway (``PUT``/``PATCH /v1/queues/{q}``,
``PUT /v1/kinds/{kind}``) and the dashboard (pause, resume, settings). Keys, under the Consul KV root
(``JOBQ_CRON_KV_PREFIX``, the cron schedules' too):

* ``<prefix>/queue-config/<queue>``: the queue's :class:`~jqengine.QueueConfig` as JSON;
* ``<prefix>/kind-config/<kind>/<queue>``: a job type's options in one queue;
* ``<prefix>/kind-config/<kind>/*``: its options for every queue (writing it drops the kind's per-queue
  keys: in Redis too, options for every queue override what each queue had).

Not kept here: a kind's push-dispatch configuration (its ``auth`` value is a secret Redis keeps in
clear), options a worker pool registers from its code (it registers them again when it starts).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import consul.aio
import orjson

from jqcore.admission import GRAPH_KEY_BYTES
from jqcore.errors import BackendUnavailable
from jqcore.settings.servers import ConsulSettings
from jqengine import Engine, QueueConfig
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores.cron import CONSUL_ERRORS

__all__ = ["EVERY_QUEUE", "ConfigStore", "KindEntry", "Restored", "restore"]

EVERY_QUEUE = "*"
"""The scope of a job type's options for every queue (no queue is named ``*``)."""
KIND_FIELDS = ("concurrency", "max_attempts", "delivery", "priority", "ignore_result")
"""The options of :meth:`jqengine.Engine.configure_kind` kept per kind and scope."""
QUEUE_FIELDS = frozenset(f.name for f in dataclasses.fields(QueueConfig))


@dataclass(frozen=True, slots=True)
class KindEntry:
    """A job type's options in one scope (a queue, or :data:`EVERY_QUEUE`), and when Consul took them."""

    kind: str
    scope: str
    options: dict[str, Any]
    index: int = 0
    """Consul's ModifyIndex: the order the changes were made in."""


class ConfigStore:
    def __init__(self, client: consul.aio.Consul, prefix: str = "jobq") -> None:
        self.client, self.prefix = client, prefix.rstrip("/")

    async def _call(self, what: str, coro: Any) -> Any:
        try:
            return await coro
        except CONSUL_ERRORS as exc:
            raise BackendUnavailable(f"Consul {what}: {exc!r}", code="consul_unavailable") from exc

    async def graph_key(self, known: bytes | None = None) -> bytes:
        """The deployment's graph key (``jqcore.admission``): made once, by whoever needs it first (a
        check-and-set on a missing key: two makers agree on the first one written). ``known`` is the key
        the caller already holds: if Consul lost it (an agent that came back empty), that key is put back
        rather than a new one made, so the graphs signed with it and not yet relayed stay valid."""
        key = f"{self.prefix}/keys/graphs"
        for _ in range(2):
            _, found = await self._call("get", self.client.kv.get(key))
            if found is not None and found.get("Value"):
                return bytes.fromhex(found["Value"].decode())
            made = known.hex() if known else secrets.token_hex(GRAPH_KEY_BYTES)
            await self._call("put", self.client.kv.put(key, made, cas=0))
        raise BackendUnavailable(
            "Consul: the graph key was neither found nor made", code="consul_unavailable"
        )

    async def put_queue(self, queue: str, config: QueueConfig) -> None:
        """Keep ``config`` as ``queue``'s configuration."""
        value = orjson.dumps(config.as_dict()).decode()
        await self._call("put", self.client.kv.put(f"{self.prefix}/queue-config/{queue}", value))

    async def put_kind(self, kind: str, queues: Sequence[str] | None, **options: Any) -> None:
        """Keep a job type's options (``KIND_FIELDS``) for ``queues`` (None: every queue)."""
        value = orjson.dumps({k: options.get(k) for k in KIND_FIELDS}).decode()
        folder = f"{self.prefix}/kind-config/{kind}/"
        if queues is None:
            await self._call("delete", self.client.kv.delete(folder, recurse=True))
        for scope in [EVERY_QUEUE] if queues is None else queues:
            await self._call("put", self.client.kv.put(folder + scope, value))

    async def queue_configs(self) -> tuple[dict[str, QueueConfig], list[str]]:
        """Every kept queue configuration, and the keys that could not be read (written by hand)."""
        root = f"{self.prefix}/queue-config/"
        out: dict[str, QueueConfig] = {}
        bad: list[str] = []
        for entry in await self._list(root):
            queue = entry["Key"][len(root) :]
            if not queue or "/" in queue:  # a folder key (made in Consul's UI)
                continue
            try:
                out[queue] = _queue_config(orjson.loads(entry.get("Value") or b"null"))
            except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
                bad.append(entry["Key"])
        return out, bad

    async def queue_configs_of(self, queues: Sequence[str]) -> tuple[dict[str, QueueConfig], list[str]]:
        """The kept configurations of ``queues`` (one read each), and the keys that could not be read."""
        out: dict[str, QueueConfig] = {}
        bad: list[str] = []
        for queue in queues:
            key = f"{self.prefix}/queue-config/{queue}"
            _, entry = await self._call("get", self.client.kv.get(key))
            if entry is None:
                continue
            try:
                out[queue] = _queue_config(orjson.loads(entry.get("Value") or b"null"))
            except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
                bad.append(key)
        return out, bad

    async def kind_entries(self) -> tuple[list[KindEntry], list[str]]:
        """Every kept job type's options, in the order they were written, and the unreadable keys."""
        root = f"{self.prefix}/kind-config/"
        out: list[KindEntry] = []
        bad: list[str] = []
        for entry in await self._list(root):
            kind, _, scope = entry["Key"][len(root) :].partition("/")
            if not kind or not scope or "/" in scope:  # a folder key (made in Consul's UI)
                continue
            try:
                doc = orjson.loads(entry.get("Value") or b"null")
                options = {k: doc.get(k) for k in KIND_FIELDS}
                options["delivery"] = options["delivery"] or "at_least_once"
                options["ignore_result"] = bool(options["ignore_result"])
            except (orjson.JSONDecodeError, AttributeError):
                bad.append(entry["Key"])
                continue
            out.append(KindEntry(kind, scope, options, int(entry.get("ModifyIndex") or 0)))
        return sorted(out, key=lambda e: e.index), bad

    async def _list(self, root: str) -> list[dict[str, Any]]:
        _, entries = await self._call("list", self.client.kv.get(root, recurse=True))
        return list(entries or [])


def _queue_config(doc: dict[str, Any]) -> QueueConfig:
    """A kept configuration (fields a newer or older jobq does not know are left out / defaulted)."""
    known = {k: v for k, v in doc.items() if k in QUEUE_FIELDS}
    if "filter_keys" in known:
        known["filter_keys"] = tuple(known["filter_keys"])
    return QueueConfig(**known)


@dataclass
class Restored:
    """What :func:`restore` wrote into Redis (a dry run: would write)."""

    queues: list[str] = field(default_factory=list)
    """Queues whose configuration came back from Consul."""
    kinds: list[str] = field(default_factory=list)
    """``<kind>@<queue>`` (``<kind>@*``: every queue) whose options came back."""
    kept: int = 0
    """Entries Redis still had (Redis's own is in force: left alone)."""
    unreadable: list[str] = field(default_factory=list)
    """Consul keys that could not be read (not restored)."""


async def _kept(
    store: ConfigStore, only: Sequence[str] | None
) -> tuple[dict[str, QueueConfig], list[KindEntry], list[str]]:
    """The kept queue configurations and kind entries (of ``only``'s queues alone, when given), and the
    keys that could not be read."""
    queues, bad_queues = await (store.queue_configs() if only is None else store.queue_configs_of(only))
    entries, bad_kinds = await store.kind_entries()
    if only is not None:
        entries = [e for e in entries if e.scope in only]
    return queues, entries, bad_queues + bad_kinds


async def restore(store: ConfigStore, engine: Engine | None, only: Sequence[str] | None = None) -> Restored:
    """Write into Redis the kept configurations and options Redis lacks (``engine`` None: a dry run,
    nothing written): every-queue kind options first, then the queue configurations (a configured queue
    gets those defaults), then per-queue kind options, each group in the order Consul took them. What
    Redis still has is left alone: it is what is in force. ``only``: these queues' own settings alone
    (their configurations and their kinds' options for them, not the every-queue options) — what a relay
    restores before it writes to a queue Redis has no configuration of."""
    report = Restored()
    queues, entries, report.unreadable = await _kept(store, only)
    named = sorted(set(queues) | {e.scope for e in entries if e.scope != EVERY_QUEUE})
    if engine is not None:
        configured = await engine.reads.configured(named)
        present = await engine.reads.kinds(named)
    else:
        configured, present = set(), {}

    def has(entry: KindEntry) -> bool:
        found = present.get(entry.kind)
        if found is None:
            return False
        return found["defaults"] is not None if entry.scope == EVERY_QUEUE else entry.scope in found["queues"]

    every = [e for e in entries if e.scope == EVERY_QUEUE]
    per_queue = [e for e in entries if e.scope != EVERY_QUEUE]
    missing_every = [e for e in every if not has(e)]
    missing_queues = [q for q in sorted(queues) if q not in configured]
    missing_per_queue = [e for e in per_queue if not has(e)]
    report.kept = len(entries) + len(queues) - len(missing_every + missing_per_queue) - len(missing_queues)
    for e in missing_every:
        report.kinds.append(f"{e.kind}@{e.scope}")
        if engine is not None:
            await engine.admin.configure_kind(e.kind, queues=None, **e.options)
    for queue in missing_queues:
        report.queues.append(queue)
        if engine is not None:
            await engine.admin.configure_queue(queue, queues[queue])
    for e in missing_per_queue:
        report.kinds.append(f"{e.kind}@{e.scope}")
        if engine is not None:
            await engine.admin.configure_kind(e.kind, queues=[e.scope], **e.options)
    return report


async def read_graph_key(settings: ConsulSettings, prefix: str) -> bytes:
    """The graph key, for a tool that reads Kafka records once (``jobq replay``, ``jobq rebuild``)."""
    client = consul_client(settings)
    try:
        return await ConfigStore(client, prefix).graph_key()
    finally:
        await close_consul(client)
