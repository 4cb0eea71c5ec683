"""The request and reply bodies of an HTTP worker's writes beyond claim/extend/complete/fail (release,
snooze, cancel, heartbeat) and of a graph node's inputs in a claim (:mod:`kafkagate.running`,
:mod:`kafkagate.claims`). Defined once, as pydantic models: the handlers parse and answer with them and the
OpenAPI document is made from them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from jqcore.envelope_rules import MAX_LEASE_MS, MIN_LEASE_MS

__all__ = [
    "ID_PATTERN",
    "MAX_SNOOZE_MS",
    "NOT_HELD_CODES",
    "REASON_MAX",
    "WORKER_PATTERN",
    "CancelBody",
    "CancelReply",
    "ClaimedGraph",
    "HeartbeatBody",
    "HeartbeatItem",
    "HeartbeatReply",
    "HeldJob",
    "NotHeldCode",
    "Owner",
    "ParentOutcomeOut",
    "ReleaseBody",
    "ReleaseReply",
    "SnoozeBody",
    "SnoozeReply",
]

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""A job id (``jqcore.envelope_rules``)."""
WORKER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/,+=-]{0,127}$"
"""A worker's identity: 1-128 printable characters without spaces (a Python pool's is ``host:pid:queues``)."""
MAX_SNOOZE_MS = 365 * 86_400_000
"""The longest snooze: a year."""
REASON_MAX = 1000
"""The longest cancel reason (as ``DELETE .../jobs/{id}?reason=``)."""
HEARTBEAT_MAX = 1000
"""The most jobs one heartbeat extends."""

NotHeldCode = Literal["lease_stale", "job_not_found", "job_canceled"]
NOT_HELD_CODES: dict[str, NotHeldCode] = {
    "stale": "lease_stale",
    "missing": "job_not_found",
    "canceled": "job_canceled",
}
"""Why a lease was not extended (``jqengine.NotExtended``) → its error code (``extend``, a heartbeat)."""


class Owner(BaseModel):
    """What proves a worker holds a running job: its claim's attempt and lease token."""

    model_config = ConfigDict(extra="forbid")

    attempt: int = Field(ge=1)
    token: str = Field(min_length=1, max_length=64)


class ReleaseBody(Owner):
    started: bool = True
    """The worker began running the job: an ``at_most_once`` kind's job then ends errored (it must never
    run twice); false gives back a job it never started (pending again either way for other kinds)."""


class ReleaseReply(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"id": "01J0", "outcome": "released"}]})

    id: str
    outcome: Literal["released", "errored"]
    """``released``: pending again, its attempt refunded; ``errored``: an ``at_most_once`` job that had
    started (dead letters)."""


class SnoozeBody(Owner):
    delay_ms: int = Field(ge=0, le=MAX_SNOOZE_MS)
    """Claimable again after this long (0: at once); no attempt spent."""


class SnoozeReply(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"id": "01J0", "state": "delayed", "run_at_ms": 1767225630000}]}
    )

    id: str
    state: Literal["pending", "delayed"]
    run_at_ms: int
    """When it is claimable again (ms since the epoch, Redis's clock)."""


class CancelBody(Owner):
    reason: str = Field("canceled by its worker", min_length=1, max_length=REASON_MAX)


class CancelReply(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"id": "01J0", "state": "canceled"}]})

    id: str
    state: Literal["canceled"]


class HeldJob(Owner):
    id: str = Field(pattern=ID_PATTERN)


class HeartbeatBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[HeldJob] = Field(min_length=1, max_length=HEARTBEAT_MAX)
    lease_ms: int | None = Field(None, ge=MIN_LEASE_MS, le=MAX_LEASE_MS)
    """Omitted: each job's own ``lease_ms``, else the queue's default lease."""

    @model_validator(mode="after")
    def _once_each(self) -> HeartbeatBody:
        seen: set[str] = set()
        for job in self.jobs:
            if job.id in seen:
                raise ValueError(f"job {job.id!r} is listed twice")
            seen.add(job.id)
        return self


class HeartbeatItem(BaseModel):
    id: str
    held: bool
    """The lease was extended: the worker still holds the job."""
    lease_deadline_ms: int | None = None
    """Held: the new deadline."""
    code: NotHeldCode | None = None
    """Not held: why (the same codes ``extend`` answers with); stop the job, write nothing back."""


class HeartbeatReply(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"jobs": [{"id": "01J0", "held": True, "lease_deadline_ms": 1767225660000}], "held": 1}
            ]
        }
    )

    jobs: list[HeartbeatItem]
    """One per job of the request, in its order."""
    held: int
    """How many leases were extended."""


class ParentOutcomeOut(BaseModel):
    state: str
    """``completed``, or how it did not (``errored``, ``canceled``, ``skipped``...)."""
    result: Any = None
    error: str | None = None
    attempt: int = 0


class ClaimedGraph(BaseModel):
    """A graph node's view of its graph, in a claimed job (``graph``): what a Python handler gets as
    ``current_job().graph`` and, per ``feed``, appended to its positional args (``fed``)."""

    id: str
    node: str
    feed: Literal["none", "last", "list"]
    parents: dict[str, ParentOutcomeOut]
    """Parent name → outcome, in parent order (a failed ``ignore`` parent is left out)."""
    failures: list[dict[str, Any]]
    """For the graph's ``on_failure`` node: every node that did not complete."""
    fed: list[Any]
    """The values a Python handler of this node gets after the job's own args."""
