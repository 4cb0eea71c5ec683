"""The configuration-as-code file, ``jobq.toml`` (``jobq apply -f``, ``jobq export``; docs/operations.md):
its schema (pydantic: an error names the file, the table and the field), reading it, and writing one.

::

    version = 1
    prune_prefix = "billing."          # optional: what --prune may remove beyond the queues named here

    [queues."billing.invoices"]        # a queue's whole configuration (PUT /v1/queues/{queue})
    mode = "exclusive"                 # every field not named takes its default ...
    excl_key = "tenant"
    lease_ms = "2m"                    # *_ms fields take milliseconds or a duration: 30s, 5m, 2h, 1d
    paused = false                     # ... but paused and enqueue_blocked, left as they are unless named
    rate = "50/s burst 200"            # the relays' limit: or "paused", "unlimited"; left alone unless named

    [queues."billing.invoices".kinds."invoice.render"]   # a job type's options in this queue
    concurrency = 4
    max_attempts = 5

    [kinds."report.build"]             # a job type's options for every queue (a token of every queue)
    concurrency = 2

    [cron."nightly-report"]            # a cron schedule (PUT /v1/cron/{name}); paused: as queues' toggles
    queue = "billing.invoices"
    kind = "report.build"
    cron = "0 3 * * *"
    tz = "Europe/Paris"
    args = { full = true }             # or args_json = '...' (JSON TOML cannot write, e.g. a null)

    [switches."poison-pdf"]            # a kill switch in force (PUT /v1/switches/{name})
    queue = "billing.*"
    kind = "pdf.render"
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from jobq.commands.remote import duration_ms
from jqcore import envelope_rules
from jqcore.cron import CronSchedule
from jqcore.errors import ConfigError, JobqError
from jqcore.rates import Rate
from jqengine import Switch
from jqruntime.dispatch import DispatchConfig
from kafkagate.queue_bodies import QueueConfigBody, QueuePatchBody, SwitchBody

__all__ = [
    "CRON_FIELDS",
    "KIND_FIELDS",
    "MS_FIELDS",
    "QUEUE_FIELDS",
    "SWITCH_FIELDS",
    "TOGGLES",
    "ConfigFile",
    "CronTable",
    "KindTable",
    "QueueTable",
    "SwitchTable",
    "dumps",
    "load",
    "tomlable",
]

VERSION: Literal[1] = 1
QUEUE_FIELDS = tuple(QueueConfigBody.model_fields)
"""A queue's configuration fields (``PUT /v1/queues/{queue}``)."""
MS_FIELDS = tuple(f for f in QUEUE_FIELDS if f.endswith("_ms"))
UNLIMITED = "unlimited"
"""A queue's rate as the file and the plan say no limit (the relays' key deleted)."""
TOGGLES = frozenset({"paused", "enqueue_blocked"})
"""The queue fields an operator flips during an incident (``jobq queue pause``): managed only when the file
names them, so an apply does not undo a pause nobody wrote down."""
KIND_FIELDS = ("concurrency", "max_attempts", "delivery", "priority", "ignore_result")
CRON_FIELDS = tuple(f for f in CronSchedule.model_fields if f not in ("name", "created_ms"))
SWITCH_FIELDS = tuple(SwitchBody.model_fields)


def _duration(value: Any) -> Any:
    """A ``*_ms`` field written as a duration (``"2h"``) in milliseconds."""
    return duration_ms(value) if isinstance(value, str) else value


def _name(what: Literal["queue", "kind"]) -> Any:
    def check(value: str) -> str:
        problem = envelope_rules.check_name(what, value)
        if problem:
            raise ValueError(f"{what} name {value!r} {problem}")
        return value

    return AfterValidator(check)


QueueName = Annotated[str, _name("queue")]
KindName = Annotated[str, _name("kind")]


class KindTable(BaseModel):
    """A job type's options (``PUT /v1/kinds/{kind}``): in one queue, or for every queue."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int | None = Field(None, ge=1)
    max_attempts: int | None = Field(None, ge=1, le=1000)
    delivery: Literal["at_least_once", "at_most_once"] = "at_least_once"
    priority: int | None = Field(None, ge=-(2**53), le=2**53)
    ignore_result: bool = False
    dispatch: DispatchConfig | None = None

    @field_validator("dispatch")
    @classmethod
    def _no_secret(cls, dispatch: DispatchConfig | None) -> DispatchConfig | None:
        if dispatch is not None and dispatch.auth is not None and dispatch.auth.value is not None:
            raise ValueError(
                "auth.value: no secret in this file; name it with auth.env (a JOBQ_DISPATCH_AUTH_* variable"
                " of the dispatcher) or auth.file (in its JOBQ_DISPATCHER_SECRETS_DIR)"
            )
        return dispatch

    def options(self) -> dict[str, Any]:
        """The compared options; ``dispatch`` as the API shows it (None: pools run its jobs)."""
        out = self.model_dump(include=set(KIND_FIELDS))
        out["dispatch"] = None if self.dispatch is None else self.dispatch.public()
        return out


class QueueTable(QueuePatchBody):
    """A queue's configuration: every field of ``PUT /v1/queues/{queue}`` (one not named takes its default,
    but ``paused`` and ``enqueue_blocked``), and the options of job types in it."""

    kinds: dict[KindName, KindTable] = Field(default_factory=dict)

    @field_validator(*MS_FIELDS, mode="before")
    @classmethod
    def _durations(cls, value: Any) -> Any:
        return _duration(value)

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        """The relays' live limit (``50/s burst 200``, ``paused``, ``unlimited``), kept canonical."""
        return None if value is None else Rate.parse(value).text or UNLIMITED

    def config(self) -> dict[str, Any]:
        """The whole configuration the file asks for (validated as the gateway's PUT body)."""
        named = self.model_dump(include=self.model_fields_set - {"kinds", "rate"})
        return QueueConfigBody.model_validate(named).model_dump()

    def managed(self) -> set[str]:
        """The fields an apply sets: every one but the toggles the file does not name."""
        return {f for f in QUEUE_FIELDS if f not in TOGGLES or f in self.model_fields_set}


class CronTable(CronSchedule):
    """A cron schedule (``PUT /v1/cron/{name}``): its name is the table's."""

    name: str = ""

    @model_validator(mode="before")
    @classmethod
    def _args_json(cls, data: Any) -> Any:
        if isinstance(data, dict) and "args_json" in data:
            data = dict(data)
            text = data.pop("args_json")
            if "args" in data:
                raise ValueError("give args or args_json, not both")
            try:
                data["args"] = orjson.loads(text) if isinstance(text, str) else text
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"args_json is not JSON: {exc}") from None
        return data

    def fields(self) -> dict[str, Any]:
        return self.model_dump(include=set(CRON_FIELDS))

    def managed(self) -> set[str]:
        return {f for f in CRON_FIELDS if f != "paused" or "paused" in self.model_fields_set}


class SwitchTable(SwitchBody):
    """A kill switch in force (``PUT /v1/switches/{name}``): its name is the table's."""


class ConfigFile(BaseModel):
    """A whole ``jobq.toml``."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = VERSION
    prune_prefix: str | None = Field(None, min_length=1)
    """``--prune`` also removes the schedules and switches of queues starting with this (beyond the queues
    the file names)."""
    queues: dict[QueueName, QueueTable] = Field(default_factory=dict)
    kinds: dict[KindName, KindTable] = Field(default_factory=dict)
    cron: dict[str, CronTable] = Field(default_factory=dict)
    switches: dict[str, SwitchTable] = Field(default_factory=dict)

    def covers(self, queue: str) -> bool:
        """Whether ``queue`` (or a switch's glob) is in the file's scope: a queue it names, or one starting
        with ``prune_prefix``."""
        return queue in self.queues or (self.prune_prefix is not None and queue.startswith(self.prune_prefix))

    def problems(self) -> list[str]:
        """What the schema cannot see: names of schedules and switches, a switch as a whole."""
        out = []
        for name, table in self.cron.items():
            try:
                CronSchedule.model_validate({**table.fields(), "name": name})
            except ValidationError as exc:
                out += [f"[cron.{_key(name)}] {_loc(e['loc'])}{_msg(e)}" for e in exc.errors()]
        for name, sw in self.switches.items():
            try:
                Switch(name=name, action=sw.action, queue=sw.queue, kind=sw.kind, meta=sw.meta)
            except JobqError as exc:
                out.append(f"[switches.{_key(name)}] {exc.message}")
        return out


def _msg(error: Mapping[str, Any]) -> str:
    return str(error["msg"]).removeprefix("Value error, ")


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) + ": " if loc else ""


_TABLES = ("queues", "kinds", "cron", "switches")


def _where(loc: tuple[Any, ...]) -> str:
    """``[queues."billing.x".kinds.k] concurrency: `` for a pydantic error location."""
    parts = list(loc)
    if len(parts) >= 2 and parts[0] in _TABLES:
        table = f"{parts[0]}.{_key(str(parts[1]))}"
        rest = parts[2:]
        if parts[0] == "queues" and len(rest) >= 2 and rest[0] == "kinds":
            table += f".kinds.{_key(str(rest[1]))}"
            rest = rest[2:]
        if rest[:1] == ["[key]"]:
            return f"[{table}] (its name): "
        return f"[{table}] {_loc(tuple(rest))}" if rest else f"[{table}]: "
    return _loc(loc)


def load(text: str, where: str) -> ConfigFile:
    """The file ``where`` holding ``text``; :class:`ConfigError` (``config_invalid``) naming the file, the
    table and the field of every problem."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not TOML: {exc}") from None
    try:
        doc = ConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(
            f"{where}: " + "; ".join(_where(e["loc"]) + _msg(e) for e in exc.errors())
        ) from None
    problems = doc.problems()
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
    return doc


# ---- writing ------------------------------------------------------------------------------------------
_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _key(key: str) -> str:
    return key if _BARE.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    # a JSON string is a TOML basic string, but for DEL, which TOML wants escaped
    return orjson.dumps(text).decode().replace("\x7f", "\\u007f")


def tomlable(value: Any) -> bool:
    """Whether TOML can write ``value`` (it has no null)."""
    if value is None:
        return False
    if isinstance(value, dict):
        return all(tomlable(v) for v in value.values())
    if isinstance(value, list):
        return all(tomlable(v) for v in value)
    return True


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else "nan"
            if math.isnan(value)
            else repr(value)
        )
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_key(str(k))} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"TOML cannot write {type(value).__name__}")


def _table(lines: list[str], header: str, fields: Mapping[str, Any]) -> None:
    lines += ["", f"[{header}]"]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in fields.items() if v is not None]


def dumps(doc: Mapping[str, Any], comment: str = "") -> str:
    """A ``jobq.toml`` for ``doc`` (the shape :class:`ConfigFile` reads: top-level values, then one table
    per queue and its job types, per job type, per schedule, per switch; values that are ``None`` are
    left out)."""
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    lines += [f"{k} = {_value(v)}" for k, v in doc.items() if k not in _TABLES and v is not None]
    for name, table in doc.get("queues", {}).items():
        _table(lines, f"queues.{_key(name)}", {k: v for k, v in table.items() if k != "kinds"})
        for kind, options in table.get("kinds", {}).items():
            _table(lines, f"queues.{_key(name)}.kinds.{_key(kind)}", options)
    for part in ("kinds", "cron", "switches"):
        for name, fields in doc.get(part, {}).items():
            _table(lines, f"{part}.{_key(name)}", fields)
    return "\n".join(lines).lstrip("\n") + "\n"
