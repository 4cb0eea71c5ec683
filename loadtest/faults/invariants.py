"""The promises a fault scenario is judged by, each a named invariant over the recorded history (pure
functions: :mod:`loadtest.faults.history` holds the inputs, the unit tests feed hand-made ones).

Every invariant answers a :class:`Check`: ``pass`` or ``fail`` with how many items it judged, how many
broke it and which (ids), or ``n/a`` when the scenario's load produced nothing it could judge — never a
``pass`` for a promise nothing exercised. The ordering promises (exclusive keys, priority, rate limits,
graphs) are in :mod:`loadtest.faults.ordering`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from loadtest.faults.history import Cancel, Due, Execution, Record, Request

__all__ = [
    "CANCEL_AT_RISK_S",
    "LEASE_SLACK_S",
    "REDIS_WIPED",
    "REDIS_WRITES_LOST",
    "Check",
    "acked_not_lost",
    "canceled_never_started",
    "early_runs",
    "history_agrees",
    "judged",
    "never_early",
    "one_live_attempt",
    "rerun_causes",
    "unacked_not_run",
]

Status = Literal["pass", "fail", "n/a"]
SHOWN = 20
"""Offending ids a check keeps (the count is always whole)."""
LEASE_SLACK_S = 0.5
"""How long before its handler started a run's claim may have been (the pool's hand-over from claim to
handler): a re-run starting this close to the earlier run's start + lease is still a legal re-run."""
FINAL = frozenset({"completed", "errored", "canceled", "expired"})
REDIS_WRITES_LOST = "redis_writes_lost_at"
"""The notes' key of the times a fault made Redis lose its latest writes (a kill, a wipe, a master's)."""
REDIS_WIPED = "redis_wiped"
"""The notes' key of each Redis wipe: ``[wiped at, the queues' settings applied again at]``. An exclusive
job in flight across it (acknowledged before the settings were back, started after the wipe) is not judged
for its key's order or exclusivity: the wipe took its record and the queue's settings; the relay writes
newer jobs to a queue of default settings until they are applied again, and ``jobq rebuild`` brings the
older ones back after those (``docs/reliability.md``, accepted-loss modes)."""
CANCEL_AT_RISK_S = 5.0
"""A cancel lives only in Redis until its event is shipped to Kafka (the events topic is what a rebuild
reads): one acknowledged this long before Redis lost its latest writes may be lost with them, and its job
run (an accepted-loss mode: ``docs/reliability.md``). Redis's AOF loses up to its last second; the events'
shipping lag is well under this (``jobq status``)."""


@dataclass(frozen=True)
class Check:
    """One invariant's verdict."""

    name: str
    status: Status
    checked: int = 0
    """Items judged (jobs, runs, keys...)."""
    violations: int = 0
    ids: tuple[str, ...] = ()
    """The first offending ids (``SHOWN`` at most)."""
    detail: Mapping[str, Any] = field(default_factory=dict)
    """Counts that explain a pass (legal duplicates by cause, answers lost...)."""

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    def cell(self) -> str:
        """The check in a table cell: ``✓ 1100`` (judged), ``✗ 3 of 1100``, ``n/a``."""
        if self.status == "n/a":
            return "n/a"
        if self.failed:
            return f"**✗ {self.violations} of {self.checked}**"
        return f"✓ {self.checked}"


def judged(name: str, checked: int, offenders: Iterable[str], **detail: Any) -> Check:
    """A check from what it judged: ``n/a`` when nothing, ``fail`` when anything offended."""
    bad = sorted(set(offenders))
    if not checked and not bad:
        return Check(name, "n/a", detail=detail)
    return Check(name, "fail" if bad else "pass", checked, len(bad), tuple(bad[:SHOWN]), detail)


def _first_runs(runs: Iterable[Execution]) -> dict[str, float]:
    first: dict[str, float] = {}
    for e in runs:
        first[e.id] = min(e.at, first.get(e.id, e.at))
    return first


def acked_not_lost(
    requests: Sequence[Request], runs: Sequence[Execution], cancels: Sequence[Cancel]
) -> Check:
    """Every acked job ran — except one whose cancel stopped it (or may have: its answer was lost)."""
    stopped = {c.id for c in cancels if c.stops_the_job or not c.outcome}
    ran = {e.id for e in runs}
    acked = {r.id for r in requests if r.acked} - stopped
    return judged("acked-not-lost", len(acked), acked - ran, canceled=len(stopped))


def unacked_not_run(requests: Sequence[Request], runs: Sequence[Execution]) -> Check:
    """No job the gateway refused (a definite 4xx) ran. A job whose answer never came or was a 5xx may have
    been accepted all the same: it running is legal (``answer_lost``), counted apart."""
    ran = {e.id for e in runs}
    unacked = [r for r in requests if not r.acked]
    refused_ran = [r.id for r in unacked if r.refused and r.id in ran]
    lost_answers = sum(1 for r in unacked if not r.refused and r.id in ran)
    return judged("unacked-not-run", len(unacked), refused_ran, answer_lost=lost_answers)


def one_live_attempt(runs: Sequence[Execution], slack_s: float = LEASE_SLACK_S) -> Check:
    """No two runs of one job overlap while the earlier one's lease was valid.

    A later run is a **legal duplicate** when the earlier run had ended before it started (``sequential``:
    a completion that was never written back, at least once) or started after the earlier run's lease had
    run out (``lease_expired``: start + lease, less ``slack_s`` for the claim before the start; a run whose
    process died has no end and is taken as live until then). Any other overlap is two live attempts."""
    by_job: dict[str, list[Execution]] = defaultdict(list)
    for e in runs:
        by_job[e.id].append(e)
    causes: dict[str, int] = {"sequential": 0, "lease_expired": 0}
    illegal: list[str] = []
    for job, mine in by_job.items():
        for cause in rerun_causes(mine, slack_s):
            if cause is None:
                illegal.append(job)
                break
            causes[cause] += 1
    return judged("one-live-attempt", len(by_job), illegal, duplicates=causes)


def rerun_causes(runs: Sequence[Execution], slack_s: float = LEASE_SLACK_S) -> list[str | None]:
    """Why each run of one job after its first was legal, in start order: ``sequential`` (every earlier
    run had ended: a completion never written back), ``lease_expired`` (it started after each earlier
    live run's lease ran out), None (it overlapped a run whose lease was valid: two live attempts)."""
    mine = sorted(runs, key=lambda e: e.at)
    out: list[str | None] = []
    for i, later in enumerate(mine[1:], 1):
        cause: str | None = "sequential"
        for earlier in mine[:i]:
            if earlier.end is not None and later.at >= earlier.end:
                continue
            if earlier.lease_s and later.at >= earlier.at + earlier.lease_s - slack_s:
                cause = "lease_expired"
                continue
            cause = None
            break
        out.append(cause)
    return out


def early_runs(
    requests: Iterable[Request], first_run: Mapping[str, float], dues: Mapping[str, Due] | None = None
) -> dict[str, float]:
    """Delayed jobs whose first run started before they were due, with by how much (ms).

    Due means the job's ``run_at`` as Redis holds it (``dues``). Without it, the earliest due time the
    request allows: the gateway stamps ``run_at = now_ms() + delay_ms`` on receipt, ``now_ms`` in whole
    milliseconds rounded down, so that is the client's send time *rounded down to the millisecond* plus
    the delay — a start within the same millisecond as the unrounded ``sent + delay`` is on time, not
    early (hand-offs start a promoted job about a millisecond after it is due)."""
    out: dict[str, float] = {}
    for r in requests:
        if not r.delay_s or r.id not in first_run:
            continue
        due = dues.get(r.id) if dues else None
        earliest_due = due.run_at / 1000 if due else int(r.sent * 1000) / 1000 + r.delay_s
        if first_run[r.id] < earliest_due:
            out[r.id] = round((earliest_due - first_run[r.id]) * 1000, 3)
    return out


def never_early(
    requests: Sequence[Request], runs: Sequence[Execution], dues: Mapping[str, Due] | None = None
) -> Check:
    """No delayed job started, nor was claimed by Redis's own record, before its ``run_at``."""
    first = _first_runs(runs)
    delayed = [r for r in requests if r.delay_s and r.id in first]
    early = early_runs(delayed, first, dues)
    claimed = [i for i, d in (dues or {}).items() if d.claimed_at < d.run_at]
    return judged("never-early", len(delayed), [*early, *claimed], handler=len(early), claim=len(claimed))


def canceled_never_started(
    cancels: Sequence[Cancel], runs: Sequence[Execution], redis_lost_at: Sequence[float] = ()
) -> Check:
    """A job whose cancel answered ``canceled``/``tombstoned`` never started after that answer (a running
    job's cancel is ``flagged``: it may finish; a finished one's is ``already_<state>``) — but for a cancel
    answered within :data:`CANCEL_AT_RISK_S` before Redis lost its latest writes (``redis_lost_at``): that
    one may be lost with them (counted ``lost_with_redis`` when its job started, not an offence)."""
    stopping = {c.id: c.answered for c in cancels if c.stops_the_job}
    started_after = {e.id for e in runs if e.id in stopping and e.at > stopping[e.id]}
    at_risk = {
        i for i in started_after if any(0 <= t - stopping[i] <= CANCEL_AT_RISK_S for t in redis_lost_at)
    }
    other = Counter(c.outcome or "no_answer" for c in cancels if not c.stops_the_job)
    if at_risk:
        other["lost_with_redis"] = len(at_risk)
    return judged("canceled-never-started", len(stopping), started_after - at_risk, **dict(other))


def history_agrees(runs: Sequence[Execution], records: Mapping[str, Record | None]) -> Check:
    """Redis's record of every job that ran agrees with the runs: the job is finished, and a job recorded
    ``completed`` completed with an attempt that ran its handler; no job is recorded ``completed`` without
    any run (a canceled job may end ``canceled`` without one). Jobs Redis no longer holds (a lost or
    rebuilt Redis) are counted as ``not_held``, not judged."""
    attempts: dict[str, set[int]] = defaultdict(set)
    for e in runs:
        attempts[e.id].add(e.attempt)
    held = {i: r for i, r in records.items() if r is not None}
    bad: list[str] = []
    reasons: dict[str, int] = {}
    for job, rec in held.items():
        if job in attempts and rec.state not in FINAL:
            reason = "ran_but_not_finished"
        elif rec.state == "completed" and job not in attempts:
            reason = "completed_never_ran"
        elif rec.state == "completed" and rec.attempt not in attempts[job]:
            reason = "completed_attempt_never_ran"
        else:
            continue
        bad.append(job)
        reasons[reason] = reasons.get(reason, 0) + 1
    not_held = sum(1 for i in attempts if i not in held)
    return judged("history-agrees", len(held), bad, not_held=not_held, **reasons)
