"""Configuration as code: today's state read through the gateway (:class:`Live`), what a file changes
(:func:`make_plan`: create, update or delete per object, field by field), carrying it out through the same
gateway (:func:`execute`: the door's policy and the audit trail apply to every change), and today's state
written as a file (:func:`export_doc`).

The objects: queues (their configuration), job types' options (in a queue, or for every queue), cron
schedules and kill switches. An object the file names is made to match it; one it does not name is left
alone — but with ``--prune``, the schedules and switches of the file's scope (:meth:`ConfigFile.covers`)
that it no longer names are removed. No API route removes a queue or a job type's options: those are
listed as kept.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from jobq.commands.config_file import (
    CRON_FIELDS,
    KIND_FIELDS,
    MS_FIELDS,
    QUEUE_FIELDS,
    SWITCH_FIELDS,
    TOGGLES,
    UNLIMITED,
    ConfigFile,
    CronTable,
    KindTable,
    QueueTable,
    tomlable,
)
from jobq.commands.remote import format_duration
from jqengine import QueueConfig
from jqruntime.client import JobqClient

__all__ = ["Change", "Live", "Plan", "execute", "export_doc", "make_plan", "read_live"]

Action = Literal["create", "update", "delete"]
QUEUE_DEFAULTS = QueueConfig().as_dict()
KIND_DEFAULTS = KindTable.model_validate({}).options()
CRON_DEFAULTS = {
    k: f.get_default(call_default_factory=True)
    for k, f in CronTable.model_fields.items()
    if not f.is_required()
}
SYMBOL = {"create": "+", "update": "~", "delete": "-"}


@dataclass
class Live:
    """What the gateway shows today (of what the token may see)."""

    queues: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    """Every queue → its configuration (None: not read, out of the file's scope)."""
    rates: dict[str, str | None] = field(default_factory=dict)
    """A read queue → its relays' rate limit, canonical (None: Consul did not answer, not compared)."""
    kinds: dict[str, dict[str, Any]] = field(default_factory=dict)
    """kind → ``defaults`` (options for every queue, or None), ``dispatch`` (every queue's, or None),
    ``queues`` (queue → its options, ``dispatch`` the one its jobs are pushed with)."""
    cron: dict[str, dict[str, Any]] = field(default_factory=dict)
    switches: dict[str, dict[str, Any]] = field(default_factory=dict)

    def kind_options(self, kind: str, queue: str | None) -> dict[str, Any] | None:
        """A job type's options as compared (None: not set), in ``queue`` or for every queue."""
        entry = self.kinds.get(kind)
        if entry is None:
            return None
        found = entry["defaults"] if queue is None else entry["queues"].get(queue)
        if found is None:
            return None
        out = {k: found.get(k, KIND_DEFAULTS[k]) for k in KIND_FIELDS}
        out["dispatch"] = entry.get("dispatch") if queue is None else found.get("dispatch")
        return out


async def read_live(jq: JobqClient, wanted: Callable[[str], bool]) -> Live:
    """Today's state: the configuration of the queues ``wanted`` says (the others only listed), every job
    type, schedule and switch — of what the token may see."""
    live = Live()
    for name in (await jq.request("GET", "/v1/queues"))["queues"]:
        answer = await jq.queue(name) if wanted(name) else None
        live.queues[name] = None if answer is None else answer["config"]
        if answer is not None:
            live.rates[name] = None if answer.get("rate") is None else answer["rate"]["limit"]
    for entry in (await jq.request("GET", "/v1/kinds"))["kinds"]:
        live.kinds[entry["kind"]] = entry
    for row in (await jq.request("GET", "/v1/cron"))["schedules"]:
        live.cron[row["name"]] = {k: row.get(k) for k in CRON_FIELDS}
    for row in (await jq.request("GET", "/v1/switches"))["switches"]:
        live.switches[row["name"]] = {k: row.get(k) for k in SWITCH_FIELDS}
    return live


@dataclass
class Change:
    """One object to create, update or delete: its fields (before, after) and the request that does it."""

    action: Action
    what: Literal["queue", "kind", "cron", "switch"]
    name: str
    queue: str | None
    fields: dict[str, tuple[Any, Any]]
    method: str
    path: str
    body: dict[str, Any] | None = None
    note: str = ""

    @property
    def label(self) -> str:
        if self.what == "kind":
            return f"kind {self.name} " + (f"in {self.queue}" if self.queue else "(every queue)")
        return f"{self.what} {self.name}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "object": self.what,
            "name": self.name,
            "queue": self.queue,
            "fields": {k: {"from": a, "to": b} for k, (a, b) in self.fields.items()},
            "note": self.note,
        }


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    unchanged: int = 0
    kept: list[str] = field(default_factory=list)
    """What ``--prune`` would remove if an API route could (queues, job types' options)."""

    def count(self, action: Action) -> int:
        return sum(1 for c in self.changes if c.action == action)

    def summary(self) -> str:
        n = {a: self.count(a) for a in ("create", "update", "delete")}
        changes = f"{n['create']} to create, {n['update']} to update, {n['delete']} to delete"
        return f"{changes}, {self.unchanged} unchanged"

    def as_dict(self) -> dict[str, Any]:
        return {
            "changes": [c.as_dict() for c in self.changes],
            "summary": {
                **{a: self.count(a) for a in ("create", "update", "delete")},
                "unchanged": self.unchanged,
            },
            "kept": self.kept,
        }

    def lines(self) -> list[str]:
        """The plan as text: one line per object, one per field it changes."""
        out = [f"plan: {self.summary()}"]
        for c in self.changes:
            out.append(f"{SYMBOL[c.action]} {c.label}" + (f"  ({c.note})" if c.note else ""))
            for key, (before, after) in c.fields.items():
                if c.action == "create":
                    out.append(f"    {key}: {_shown(after)}")
                elif c.action == "delete":
                    out.append(f"    {key}: {_shown(before)}")
                else:
                    out.append(f"    {key}: {_shown(before)} → {_shown(after)}")
        out += [f"= kept: {k} (no API route removes it)" for k in self.kept]
        return out


def _shown(value: Any) -> str:
    return orjson.dumps(value).decode()


def _diff(
    before: Mapping[str, Any] | None, after: Mapping[str, Any], keys: Iterable[str]
) -> dict[str, tuple[Any, Any]]:
    """The fields of ``keys`` that differ (a missing ``before``: every field off its default)."""
    return {
        k: (None if before is None else before.get(k), after.get(k))
        for k in keys
        if before is None or before.get(k) != after.get(k)
    }


def _without_defaults(fields: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {k: (None, v) for k, v in fields.items() if defaults.get(k) != v}


def _kind_body(options: Mapping[str, Any], table: KindTable, queue: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {k: options[k] for k in KIND_FIELDS}
    if queue is not None:
        body["queues"] = [queue]
    if table.dispatch is not None:
        body["dispatch"] = table.dispatch.model_dump(mode="json", exclude_none=True)
    return body


def _queue_changes(doc: ConfigFile, live: Live, plan: Plan) -> None:
    for name, table in doc.queues.items():
        wanted, managed = table.config(), table.managed()
        current = live.queues.get(name)
        path = f"/v1/queues/{name}"
        if name not in live.queues or current is None:
            fields = _without_defaults({k: wanted[k] for k in QUEUE_FIELDS if k in managed}, QUEUE_DEFAULTS)
            plan.changes.append(Change("create", "queue", name, None, fields, "PUT", path, wanted))
            _rate_change(table, UNLIMITED, "create", plan, path)
            continue
        fields = _diff(current, wanted, [k for k in QUEUE_FIELDS if k in managed])
        if fields:
            body = {**wanted, **{k: current[k] for k in TOGGLES if k not in managed and k in current}}
            plan.changes.append(Change("update", "queue", name, None, fields, "PUT", path, body))
        rate_changed = _rate_change(table, live.rates.get(name), "update", plan, path)
        if not fields and not rate_changed:
            plan.unchanged += 1


def _rate_change(table: QueueTable, current: str | None, action: Action, plan: Plan, path: str) -> bool:
    """The relays' rate limit of a queue whose table names one (a toggle, as ``paused``: an apply leaves a
    limit set during an incident alone unless the file says it), set by its own ``PATCH``. Not compared
    when Consul did not answer the read (``current`` None): set again, idempotently."""
    if table.rate is None or table.rate == current:
        return False
    name, fields = path.rsplit("/", 1)[1], {"rate": (current, table.rate)}
    plan.changes.append(Change(action, "queue", name, None, fields, "PATCH", path, {"rate": table.rate}))
    return True


def _kind_changes(doc: ConfigFile, live: Live, plan: Plan) -> None:
    reset: set[str] = set()  # kinds whose every-queue options change: a PUT of them resets every queue's
    for kind, table in doc.kinds.items():
        wanted, current = table.options(), live.kind_options(kind, None)
        fields = (
            _diff(current, wanted, wanted)
            if current is not None
            else _without_defaults(wanted, KIND_DEFAULTS)
        )
        if current is not None and not fields:
            plan.unchanged += 1
            continue
        reset.add(kind)
        body = _kind_body(wanted, table, None)
        plan.changes.append(
            Change(
                "create" if current is None else "update",
                "kind",
                kind,
                None,
                fields,
                "PUT",
                f"/v1/kinds/{kind}",
                body,
            )
        )
    for queue, qtable in doc.queues.items():
        for kind, table in qtable.kinds.items():
            wanted = table.options()
            if table.dispatch is None:  # none of its own: it pushes with the kind's every-queue one, if any
                every = doc.kinds[kind].options() if kind in doc.kinds else live.kind_options(kind, None)
                wanted["dispatch"] = None if every is None else every["dispatch"]
            current = live.kind_options(kind, queue)
            body = _kind_body(wanted, table, queue)
            path = f"/v1/kinds/{kind}"
            if current is None:
                fields = _without_defaults(wanted, KIND_DEFAULTS)
                plan.changes.append(Change("create", "kind", kind, queue, fields, "PUT", path, body))
                continue
            fields = _diff(current, wanted, wanted)
            if fields or kind in reset:
                note = "" if fields else "set again: the every-queue options reset it"
                plan.changes.append(Change("update", "kind", kind, queue, fields, "PUT", path, body, note))
            else:
                plan.unchanged += 1


def _cron_changes(doc: ConfigFile, live: Live, plan: Plan, crons: Mapping[str, CronTable]) -> None:
    for name, table in crons.items():
        wanted, current = table.fields(), live.cron.get(name)
        managed = table.managed()
        path = f"/v1/cron/{name}"
        if current is None:
            fields = _without_defaults({k: v for k, v in wanted.items() if k in managed}, CRON_DEFAULTS)
            fields.update({k: (None, wanted[k]) for k in ("queue", "kind")})
            plan.changes.append(Change("create", "cron", name, None, fields, "PUT", path, wanted))
            continue
        fields = _diff(current, wanted, [k for k in CRON_FIELDS if k in managed])
        if not fields:
            plan.unchanged += 1
            continue
        body = {**wanted, "paused": wanted["paused"] if "paused" in managed else bool(current.get("paused"))}
        plan.changes.append(Change("update", "cron", name, None, fields, "PUT", path, body))


def _switch_changes(doc: ConfigFile, live: Live, plan: Plan) -> None:
    for name, table in doc.switches.items():
        wanted, current = table.model_dump(), live.switches.get(name)
        path = f"/v1/switches/{name}"
        if current is None:
            fields = {k: (None, v) for k, v in wanted.items()}
            plan.changes.append(Change("create", "switch", name, None, fields, "PUT", path, wanted))
        elif fields := _diff(current, wanted, SWITCH_FIELDS):
            plan.changes.append(Change("update", "switch", name, None, fields, "PUT", path, wanted))
        else:
            plan.unchanged += 1


def _prune(doc: ConfigFile, live: Live, plan: Plan, crons: Mapping[str, CronTable]) -> None:
    for name, current in sorted(live.cron.items()):
        if name not in crons and doc.covers(str(current.get("queue"))):
            fields = {
                k: (current.get(k), None) for k in ("queue", "kind", "cron", "every_s") if current.get(k)
            }
            plan.changes.append(Change("delete", "cron", name, None, fields, "DELETE", f"/v1/cron/{name}"))
    for name, current in sorted(live.switches.items()):
        if name not in doc.switches and doc.covers(str(current.get("queue"))):
            fields = {k: (current.get(k), None) for k in SWITCH_FIELDS if current.get(k)}
            plan.changes.append(
                Change("delete", "switch", name, None, fields, "DELETE", f"/v1/switches/{name}")
            )
    for queue in sorted(live.queues):
        if queue not in doc.queues and doc.covers(queue):
            plan.kept.append(f"queue {queue}")
    for kind, entry in sorted(live.kinds.items()):
        for queue in sorted(entry["queues"]):
            named = queue in doc.queues and kind in doc.queues[queue].kinds
            if doc.covers(queue) and not named:
                plan.kept.append(f"kind {kind} in {queue}")


def make_plan(
    doc: ConfigFile, live: Live, *, crons: Mapping[str, CronTable] | None = None, prune: bool = False
) -> Plan:
    """What applying ``doc`` to ``live`` changes, in the order it is done: queues, job types (every
    queue's first: they reset each queue's), schedules, switches, then (``prune``) removals. ``crons``:
    the schedules to have (the file's and an application's), by name."""
    plan = Plan()
    _queue_changes(doc, live, plan)
    _kind_changes(doc, live, plan)
    _cron_changes(doc, live, plan, doc.cron if crons is None else crons)
    _switch_changes(doc, live, plan)
    if prune:
        _prune(doc, live, plan, doc.cron if crons is None else crons)
    return plan


async def execute(jq: JobqClient, plan: Plan, done: list[Change]) -> None:
    """Carry out ``plan`` through the gateway, in order (PUT and DELETE are idempotent: a retried change is
    the same change); ``done`` collects what was applied (what a failure stopped after)."""
    for change in plan.changes:
        await jq.request(change.method, change.path, json=change.body, idempotent=True)
        done.append(change)


# ---- today's state as a file -----------------------------------------------------------------------
def _queue_table(config: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in QUEUE_FIELDS:
        value = config.get(key, QUEUE_DEFAULTS[key])
        if value == QUEUE_DEFAULTS[key]:
            continue  # toggles at their default (not paused) are left out: an apply leaves them alone
        out[key] = format_duration(value) if key in MS_FIELDS and isinstance(value, int) else value
    return out


def _kind_table(options: Mapping[str, Any], every_dispatch: Any) -> dict[str, Any]:
    out = {k: options[k] for k in KIND_FIELDS if options[k] != KIND_DEFAULTS[k]}
    if options["dispatch"] is not None and options["dispatch"] != every_dispatch:
        out["dispatch"] = options["dispatch"]
    return out


def _secret(options: Mapping[str, Any] | None) -> bool:
    auth = (options or {}).get("dispatch") or {}
    return isinstance(auth, dict) and "value" in (auth.get("auth") or {})


INLINE_SECRET = "its dispatch secret is stored inline (use auth.env or auth.file)"


def _queue_kinds(live: Live, queue: str, left_out: list[str]) -> dict[str, Any]:
    """The options of job types in ``queue`` that are its own (not what the every-queue options gave it)."""
    kinds: dict[str, Any] = {}
    for kind in sorted(live.kinds):
        options = live.kind_options(kind, queue)
        if options is None or options == live.kind_options(kind, None):
            continue
        if _secret(options):
            left_out.append(f"kind {kind} in {queue}: {INLINE_SECRET}")
            continue
        kinds[kind] = _kind_table(options, live.kinds[kind].get("dispatch"))
    return kinds


def _every_queue_kinds(live: Live, left_out: list[str]) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    for kind in sorted(live.kinds):
        defaults = live.kind_options(kind, None)
        if defaults is None:
            continue
        if _secret(defaults):
            left_out.append(f"kind {kind}: {INLINE_SECRET}")
            continue
        kinds[kind] = _kind_table(defaults, None)
    return kinds


def _cron_table(current: Mapping[str, Any]) -> dict[str, Any]:
    fields = {k: v for k, v in current.items() if k in ("queue", "kind") or v != CRON_DEFAULTS.get(k)}
    if "args" in fields and not tomlable(fields["args"]):
        fields["args_json"] = orjson.dumps(fields.pop("args")).decode()
    return fields


def export_doc(
    live: Live, pattern: str = "*", skip_crons: Iterable[str] = ()
) -> tuple[dict[str, Any], list[str]]:
    """Today's state as a ``jobq.toml`` document (for :func:`jobq.commands.config_file.dumps`): the queues
    matching ``pattern`` with their job types' options, every queue's options of job types (``pattern``
    ``*`` only), the schedules of those queues but ``skip_crons``, the switches whose queue glob matches.
    Also what it left out, and why (a dispatch secret stored inline cannot be written)."""
    left_out: list[str] = []
    every = pattern == "*"
    queues: dict[str, Any] = {}
    for name, config in sorted(live.queues.items()):
        if config is not None and fnmatch.fnmatchcase(name, pattern):
            queues[name] = _queue_table(config)
            if live.rates.get(name) not in (None, UNLIMITED):
                queues[name]["rate"] = live.rates[name]
            kinds = _queue_kinds(live, name, left_out)
            if kinds:
                queues[name]["kinds"] = kinds
    skipped = set(skip_crons)
    crons = {
        name: _cron_table(current)
        for name, current in sorted(live.cron.items())
        if name not in skipped and fnmatch.fnmatchcase(str(current.get("queue")), pattern)
    }
    switches = {
        name: {k: v for k, v in current.items() if v not in ("", {})}
        for name, current in sorted(live.switches.items())
        if every or fnmatch.fnmatchcase(str(current.get("queue")), pattern)
    }
    kinds_every = _every_queue_kinds(live, left_out) if every else {}
    doc = {"version": 1, "queues": queues, "kinds": kinds_every, "cron": crons, "switches": switches}
    return doc, left_out
