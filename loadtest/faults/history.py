"""What the fault suite records outside the system under test, and reads back after a scenario.

* **requests** (the load generator): every enqueue — id, sent, answered, acked, status, delay, tries,
  and what the load set on the job (priority, tenant, exclusivity key);
* **cancels** (the load generator): every cancel it sent after an acknowledgement and what the gateway
  answered;
* **executions** (the handlers): every run of a job's handler — id, attempt, worker process, start, end
  (None: the process died before the run ended), the lease the pool claims with, and the job's meta;
* **records** (Redis, read once the path is quiet): each job's final state and attempt as the engine keeps
  them — "the history" the executions must agree with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

__all__ = ["Cancel", "Control", "Due", "Execution", "Record", "Request", "read_executions"]


@dataclass(frozen=True)
class Request:
    """One enqueue as the client saw it (times in seconds since the epoch)."""

    id: str
    sent: float
    answered: float
    acked: bool
    status: int = 0
    """HTTP status (0: no answer — connection refused, reset or timed out)."""
    delay_s: float = 0.0
    """How long after its acceptance the job was asked to run (``delay_ms``): lateness counts from then."""
    tries: int = 1
    """Requests the client sent for this job (the same id each time; more than one: a gateway failed it)."""
    priority: int | None = None
    tenant: str = ""
    excl: str = ""
    queue: str = ""
    switched: bool = False
    """The job matches the load's kill switch (``meta.sw``)."""

    @property
    def due(self) -> float:
        return self.answered + self.delay_s

    @property
    def refused(self) -> bool:
        """The last answer was a definite no (a 4xx other than 408/429): the job must not run. A timeout,
        a reset or a 5xx says nothing about the job (its answer, not the job, may have been lost)."""
        return 400 <= self.status < 500 and self.status not in (408, 429)


@dataclass(frozen=True)
class Cancel:
    """A cancel the client sent for an acked job, and the gateway's answer (``outcome``: ``canceled``,
    ``tombstoned``, ``flagged``, ``already_<state>``; ``""``: no answer)."""

    id: str
    sent: float
    answered: float
    outcome: str

    @property
    def stops_the_job(self) -> bool:
        """The job was not running and is now canceled (or tombstoned; ``already_canceled``: a try whose
        answer was lost did it): it must never start."""
        return self.outcome in ("canceled", "tombstoned", "already_canceled")


@dataclass(frozen=True)
class Control:
    """A kill switch (``switch``: on the load queue's ``meta.sw`` jobs), a pause (``pause``: of a whole
    queue) or a queue held at the relay (``lane``: its new jobs wait in the topic's holding lane) put in
    force: from the answer that put it in force (``on``) to the send of the first request that lifted it
    (``off``), no claim may hand out a job it covers."""

    what: str
    queue: str
    on: float
    off: float


@dataclass(frozen=True)
class Execution:
    """One run of a job's handler (``at``: when it started; ``end``: when it ended, None when its process
    died first)."""

    id: str
    attempt: int
    worker: str
    at: float
    end: float | None = None
    lease_s: float = 0.0
    """The lease its pool claims with (0: not recorded)."""
    enqueued_at: float = 0.0
    """The gateway's accept time (the envelope's ``enqueued_at``, seconds)."""
    priority: int | None = None
    tenant: str = ""
    excl: str = ""


@dataclass(frozen=True)
class Due:
    """A delayed job's due time and the claim of its last attempt, as Redis stored them (ms)."""

    run_at: int
    claimed_at: int


@dataclass(frozen=True)
class Record:
    """A job as Redis holds it once the path is quiet: its state, the attempt it is at, and the Kafka
    record it came from (``topic/partition/offset``; ``""``: not written by the relay)."""

    state: str
    attempt: int
    origin: str = ""

    @property
    def offset(self) -> int | None:
        """The record's offset in its partition (one exclusivity key's records share a partition)."""
        tail = self.origin.rsplit("/", 1)[-1]
        return int(tail) if tail.isdigit() else None


def _meta_int(value: object) -> int | None:
    return int(str(value)) if value not in (None, "") else None


def read_executions(folder: Path) -> list[Execution]:
    """Every execution the handlers recorded under ``folder`` (``exec-*.jsonl``), dated on this process's
    wall clock (the handlers write the system-wide monotonic clock, which no skewed clock touches); a torn
    last line (the process was killed mid-write) is skipped — its job was not recorded, exactly as if it
    had not run. A run's end is its own line (``{"run": n, "end": mono}``), written after the handler's
    work; a run without one was cut short by its process's death."""
    wall_minus_mono = time.time() - time.monotonic()
    out: list[Execution] = []
    for path in sorted(folder.glob("exec-*.jsonl")):
        starts: dict[object, dict[str, Any]] = {}
        ends: dict[object, float] = {}
        for n, line in enumerate(path.read_bytes().splitlines()):
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if "end" in doc:
                ends[doc["run"]] = float(doc["end"]) + wall_minus_mono
            else:
                starts[doc.get("run", n)] = doc
        for run, doc in starts.items():
            at = float(doc["mono"]) + wall_minus_mono if "mono" in doc else float(doc["at"])
            meta = doc.get("meta") or {}
            out.append(
                Execution(
                    str(doc["id"]),
                    int(doc["attempt"]),
                    str(doc["worker"]),
                    at,
                    ends.get(run),
                    int(doc.get("lease_ms", 0)) / 1000,
                    int(doc.get("enq", 0)) / 1000,
                    _meta_int(meta.get("prio")),
                    str(meta.get("tenant", "")),
                    str(meta.get("excl", "")),
                )
            )
    return out
