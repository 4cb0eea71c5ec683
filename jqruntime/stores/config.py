"""Queue configurations, job types' options and kill switches in Consul KV: the durable copy of what Redis
holds.

Redis holds what is in force (the scripts read it there); this copy survives a Redis loss, and
``jobq rebuild`` restores it (:func:`restore`) before any job goes back. It is written by what changes
them for operators, after Redis took the change: the gateway (``PUT``/``PATCH /v1/queues/{q}``,
``PUT /v1/kinds/{kind}``) and the dashboard (pause, resume, settings). Keys, under the Consul KV root
(``JOBQ_CRON_KV_PREFIX``, the cron schedules' too):

* ``<prefix>/queue-config/<queue>``: the queue's :class:`~jqengine.QueueConfig` as JSON;
* ``<prefix>/kind-config/<kind>/<queue>``: a job type's options in one queue;
* ``<prefix>/kind-config/<kind>/*``: its options for every queue (writing it drops the kind's per-queue
  keys: in Redis too, options for every queue override what each queue had);
* ``<prefix>/switches/<name>``: a kill switch in force (:class:`~jqengine.Switch` as JSON). Every route that
  sets or lifts one goes through :func:`set_switch` and :func:`lift_switch` (the gateway, ``jobq switch``):
  set in Redis first (in force at once), then kept; lifted here first, then in Redis — so Consul never
  keeps a switch Redis lifted, and a switch Consul has and Redis lacks was lost with Redis's data.

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
from jqcore.errors import BackendUnavailable, JobqError
from jqcore.settings.servers import ConsulSettings
from jqengine import Engine, QueueConfig, Switch, SwitchNotFound
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores.cron import CONSUL_ERRORS

__all__ = [
    "EVERY_QUEUE",
    "ConfigStore",
    "KindEntry",
    "Restored",
    "lift_switch",
    "restore",
    "restore_switches",
    "set_switch",
]

EVERY_QUEUE = "*"
"""The scope of a job type's options for every queue (no queue is named ``*``)."""
KIND_FIELDS = ("concurrency", "max_attempts", "delivery", "priority", "ignore_result")
"""The options of :meth:`jqengine.Engine.configure_kind` kept per kind and scope."""
QUEUE_FIELDS = frozenset(f.name for f in dataclasses.fields(QueueConfig))
SWITCH_FIELDS = frozenset(f.name for f in dataclasses.fields(Switch))


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

    async def put_switch(self, switch: Switch) -> None:
        """Keep ``switch`` (in force in Redis already: :func:`set_switch`)."""
        await self._call("put", self.client.kv.put(f"{self.prefix}/switches/{switch.name}", switch.to_json()))

    async def kept_switch(self, name: str) -> Switch | None:
        """The kept switch of that name (None: none kept, or not readable)."""
        if not Switch.valid_name(name):  # no such key (and not one Consul would take)
            return None
        _, entry = await self._call("get", self.client.kv.get(f"{self.prefix}/switches/{name}"))
        return None if entry is None else _switch(entry)

    async def drop_switch(self, name: str) -> bool:
        """Keep switch ``name`` no more; whether one was kept."""
        if not Switch.valid_name(name):
            return False
        key = f"{self.prefix}/switches/{name}"
        _, entry = await self._call("get", self.client.kv.get(key))
        if entry is None:
            return False
        await self._call("delete", self.client.kv.delete(key))
        return True

    async def switches(self) -> tuple[list[Switch], list[str]]:
        """Every kept switch, and the keys that could not be read (written by hand)."""
        out: list[Switch] = []
        bad: list[str] = []
        for entry in await self._list(f"{self.prefix}/switches/"):
            switch = _switch(entry)
            if switch is None:
                bad.append(entry["Key"])
            else:
                out.append(switch)
        return out, bad

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


def _switch(entry: dict[str, Any]) -> Switch | None:
    """A kept switch; None for a value that is none (a folder key, a value written by hand)."""
    try:
        doc = orjson.loads(entry.get("Value") or b"null")
        return Switch(**{k: v for k, v in doc.items() if k in SWITCH_FIELDS})
    except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError, JobqError):
        return None


async def set_switch(store: ConfigStore, engine: Engine, switch: Switch) -> list[str]:
    """Put ``switch`` in force (:meth:`jqengine.admin.Admin.set_switch`: at once, in Redis), then keep it;
    the known queues it applies to. Consul unreachable raises ``consul_unavailable`` with the switch in
    force but not kept (Redis losing its data would lose it): send it again."""
    queues = await engine.admin.set_switch(switch)
    try:
        await store.put_switch(switch)
    except BackendUnavailable as exc:
        raise BackendUnavailable(
            f"kill switch {switch.name!r} is in force, but Consul did not keep it (it would not survive Redis"
            f" losing its data): set it again — {exc.message}",
            code="consul_unavailable",
        ) from exc
    return queues


async def lift_switch(store: ConfigStore, engine: Engine, name: str) -> int:
    """Keep switch ``name`` no more, then lift it in Redis (:meth:`jqengine.admin.Admin.lift_switch`); the
    jobs it parked that are pending again. In that order, a lift Consul did not take (unreachable:
    ``consul_unavailable``) changed nothing, and a lifted switch never comes back from Consul's copy. A
    switch Consul kept and Redis lost (a wipe not yet restored) is lifted too (no job moved);
    :class:`~jqengine.SwitchNotFound` when neither has it."""
    kept = await store.drop_switch(name)
    try:
        return await engine.admin.lift_switch(name)
    except SwitchNotFound:
        if kept:
            return 0
        raise


def _queue_config(doc: dict[str, Any]) -> QueueConfig:
    """A kept configuration (fields a newer or older jobq does not know are left out / defaulted)."""
    known = {k: v for k, v in doc.items() if k in QUEUE_FIELDS}
    if "filter_keys" in known:
        known["filter_keys"] = tuple(known["filter_keys"])
    return QueueConfig(**known)


@dataclass
class Restored:
    """What :func:`restore` wrote into Redis (a dry run: would write)."""

    switches: list[str] = field(default_factory=list)
    """Kill switches put back in force (Redis lost them with its data)."""
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


async def restore_switches(store: ConfigStore, engine: Engine | None) -> tuple[list[str], list[str]]:
    """The kill switches, before a queue is configured in Redis (then it gets them; the relay, ``jobq
    rebuild`` and the gateway's queue configuration call this first): once after Redis lost its data — those
    Consul keeps and Redis lacks go back in force; those Redis has and Consul lacks (set before switches
    were kept, or while Consul did not answer) are kept from now on. Until Redis lost them, what it holds is
    in force: nothing is read. The names put back (a dry run: every kept one) and the unreadable keys."""
    if engine is not None and await engine.admin.switches_restored():
        return [], []
    kept, bad = await store.switches()
    if engine is None:
        return sorted(s.name for s in kept), bad
    names = {s.name for s in kept}
    for switch in await engine.admin.switches():
        if switch.name not in names:
            await store.put_switch(switch)
    return await engine.admin.restore_switches(kept), bad


async def restore(store: ConfigStore, engine: Engine | None, only: Sequence[str] | None = None) -> Restored:
    """Write into Redis the kept configurations and options Redis lacks (``engine`` None: a dry run,
    nothing written): every-queue kind options first, then the queue configurations (a configured queue
    gets those defaults), then per-queue kind options, each group in the order Consul took them. What
    Redis still has is left alone: it is what is in force. ``only``: these queues' own settings alone
    (their configurations and their kinds' options for them, not the every-queue options) — what a relay
    restores before it writes to a queue Redis has no configuration of. The kill switches come back
    before all of that, the first time after Redis lost them (:func:`restore_switches`)."""
    report = Restored()
    report.switches, report.unreadable = await restore_switches(store, engine)
    queues, entries, unreadable = await _kept(store, only)
    report.unreadable += unreadable
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
