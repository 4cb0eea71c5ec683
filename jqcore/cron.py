"""Cron and periodic schedules: what a schedule is, its slots, and which slots fire after a downtime.

A schedule fires a job of ``kind`` into ``queue`` at every **slot**: the times a cron expression names
in its time zone (croniter: 5 fields, or 6 with seconds last; ``@hourly`` and friends), or every
``every_s`` seconds counted from the Unix epoch (so every instance computes the same slots). Each fire's
job id is ``cron:<name>:<slot ms>``: any number of scheduler instances may compute the same fire, and
``jqruntime.stores.cron`` lets exactly one of them enqueue it.

After a downtime (no scheduler alive, the schedule's owner dead, a long GC pause) the slots missed since
the last fire are decided by the schedule's **misfire** policy:

* ``skip`` (default): missed slots are dropped; only a slot at most ``grace_s`` old still fires.
* ``once``: one job for everything missed (the latest missed slot), then on schedule.
* ``catch_up``: a job for every missed slot, the newest ``catch_up_max`` of them (older ones dropped).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from jqcore.admission import reserved_problem
from jqcore.envelope import validate_name
from jqcore.errors import CronInvalid, EnvelopeError, FieldError

__all__ = [
    "CronSchedule",
    "CronState",
    "Due",
    "Misfire",
    "due_slots",
    "fire_id",
    "next_slot",
    "parse_schedule",
    "slots_after",
]

Misfire = Literal["skip", "once", "catch_up"]
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_RULE = "must be 1-64 of A-Z a-z 0-9 . _ - (starting with a letter or digit)"
MAX_SLOTS = 10_000
"""Most slots looked at in one computation (a every-second schedule down for hours is cut here)."""


class CronSchedule(BaseModel):
    """One schedule, as stored (Consul KV ``<prefix>/cron/<name>``) and as the HTTP API takes it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    cron: str | None = None
    """A cron expression (5 fields, or 6 with seconds last; ``@daily`` ...), in ``tz``."""
    every_s: int | None = Field(None, ge=1, le=366 * 86_400)
    """Or a fixed interval in seconds (slots at multiples of it since the epoch)."""
    tz: str = "UTC"
    queue: str
    kind: str
    args: Any = None
    priority: int | None = None
    max_attempts: int | None = Field(None, ge=1, le=1000)
    misfire: Misfire = "skip"
    grace_s: float = Field(60.0, ge=0)
    """A slot still fires under ``skip`` if it is at most this old when seen."""
    catch_up_max: int = Field(10, ge=1, le=1000)
    paused: bool = False
    created_ms: int = 0
    """When the schedule was added (set by the store): its first slot comes after this."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError(NAME_RULE)
        return value

    @field_validator("queue", "kind")
    @classmethod
    def _names(cls, value: str, info: ValidationInfo) -> str:
        try:
            name = validate_name(str(info.field_name), value)
        except EnvelopeError as exc:
            raise ValueError("; ".join(f.problem for f in exc.fields)) from None
        reserved = reserved_problem(name) if info.field_name == "kind" else None
        if reserved is not None:
            raise ValueError(reserved)
        return name

    @field_validator("tz")
    @classmethod
    def _tz(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
            raise ValueError(f"unknown time zone {value!r} (an IANA name, e.g. Europe/Paris)") from exc
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None and not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron expression (e.g. '*/5 * * * *' or '@hourly')")
        return value

    @model_validator(mode="after")
    def _one_timing(self) -> CronSchedule:
        if (self.cron is None) == (self.every_s is None):
            raise ValueError("give exactly one of cron or every_s")
        if self.cron is not None:
            try:  # valid syntax that never matches (Feb 30) would fail every later computation
                croniter(self.cron, datetime.now(UTC)).get_next(float)
            except CroniterError as exc:
                raise ValueError(f"cron {self.cron!r} never fires: {exc}") from None
        return self

    def describe(self) -> str:
        return f"{self.cron} ({self.tz})" if self.cron is not None else f"every {self.every_s}s"


class CronState(BaseModel):
    """What the scheduler last did for a schedule (Consul KV ``<prefix>/cron-state/<name>``)."""

    last_slot_ms: int = 0
    """The newest slot fired (or skipped, or the resume time after a pause); 0: never."""
    claimed_at_ms: int = 0
    """When an instance claimed ``last_slot_ms`` (compare-and-set in Consul: one claim per slot)."""
    fired_at_ms: int | None = None
    """When the claimed slots' jobs were enqueued (None: claimed, not enqueued yet — or the claimer died
    in between; another instance re-enqueues the same ids after a while)."""
    pending: list[int] = Field(default_factory=list)
    """The slots claimed with ``last_slot_ms`` whose jobs are to be enqueued."""
    fires: int = 0
    dropped: int = 0
    """Missed slots dropped by the misfire policy, in all."""


def slots_after(schedule: CronSchedule, after_ms: int) -> Iterator[int]:
    """The schedule's slots strictly after ``after_ms``, ascending (ms since the epoch)."""
    if schedule.every_s is not None:
        step = schedule.every_s * 1000
        slot = (after_ms // step + 1) * step
        while True:
            yield slot
            slot += step
    assert schedule.cron is not None
    start = datetime.fromtimestamp(after_ms / 1000, tz=UTC).astimezone(ZoneInfo(schedule.tz))
    it = croniter(schedule.cron, start)
    while True:
        yield round(it.get_next(float) * 1000)


def next_slot(schedule: CronSchedule, after_ms: int) -> int:
    return next(slots_after(schedule, after_ms))


@dataclass(frozen=True, slots=True)
class Due:
    """What a schedule owes at a moment: the slots to fire (ascending), how many missed slots the misfire
    policy drops, and the newest slot reached (recorded as done either way; 0 when none)."""

    fire: list[int]
    dropped: int
    newest: int


def due_slots(schedule: CronSchedule, state: CronState, now_ms: int) -> Due:
    """The slots due by ``now_ms`` since ``state.last_slot_ms`` (or the schedule's creation), decided by
    the misfire policy."""
    since = max(state.last_slot_ms, schedule.created_ms)
    missed: list[int] = []
    for slot in slots_after(schedule, since):
        if slot > now_ms:
            break
        missed.append(slot)
        if len(missed) > MAX_SLOTS:
            missed = missed[-schedule.catch_up_max :]
    if not missed:
        return Due([], 0, 0)
    if schedule.misfire == "catch_up":
        keep = missed[-schedule.catch_up_max :]
    elif schedule.misfire == "once":
        keep = missed[-1:]
    else:
        latest = missed[-1]
        keep = [latest] if now_ms - latest <= schedule.grace_s * 1000 else []
    return Due(keep, len(missed) - len(keep), missed[-1])


def check_name(name: str) -> str:
    """A schedule name as given in a path or a command; :class:`~jqcore.errors.CronInvalid` if malformed."""
    if not _NAME_RE.fullmatch(name):
        raise CronInvalid(FieldError("name", f"{name!r}: {NAME_RULE}"))
    return name


def parse_schedule(data: Any) -> CronSchedule:
    """A schedule from a JSON-like document; :class:`~jqcore.errors.CronInvalid` names every bad field."""
    try:
        return CronSchedule.model_validate(data)
    except ValidationError as exc:
        fields = [
            FieldError(
                ".".join(str(p) for p in e["loc"]) or "schedule", e["msg"].removeprefix("Value error, ")
            )
            for e in exc.errors()
        ]
        raise CronInvalid(fields) from None


def fire_id(name: str, slot_ms: int) -> str:
    """The job id of a schedule's fire at ``slot_ms`` (deterministic: every instance computes it)."""
    return f"cron:{name}:{slot_ms}"
