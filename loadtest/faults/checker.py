"""The one checker every fault scenario uses (Jepsen's shape: record, then judge after the fact).

What is recorded, outside the system under test (:mod:`loadtest.faults.history`): the client's requests
and cancels, the handlers' runs (start, end, lease, meta), and — once the path is quiet — Redis's record
of every acked job.

:func:`judge` answers a :class:`Verdict`: the counts every report row has (acked, executed, lost,
duplicates, unacked runs, retried requests, early jobs, overlapping lock terms, recovery) and ``checks``,
every promise as a named invariant (:func:`invariants`: :mod:`loadtest.faults.invariants`,
:mod:`loadtest.faults.ordering`), each ``pass``/``fail`` with counts and offending ids, or ``n/a`` when the
scenario's load produced nothing it could judge — plus ``fault-took-effect``, the fault's own proof
(:mod:`loadtest.faults.bites`).

* ``lost = acked − executed − canceled`` must be empty unless the scenario documents an accepted-loss mode;
* ``duplicates``: executions beyond the first per job (at-least-once allows them; ``one-live-attempt``
  says which are legal and why);
* ``unacked_executed``: jobs whose request failed or timed out but which ran anyway (the answer was lost, not
  the job: allowed, counted);
* ``recovery_s``: how long the disturbance lasted — from the first sign of it (a failed request, or an acked
  job that took far longer than before the fault to run) to the moment the last of those resolved (the failed
  request's answer, the slow job's execution). 0 when the fault was invisible to clients and to latency."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from jqcore.graphs.spec import node_job_id
from loadtest.faults.bites import fault_took_effect
from loadtest.faults.history import Cancel, Control, Due, Execution, Record, Request, read_executions
from loadtest.faults.invariants import (
    REDIS_WIPED,
    REDIS_WRITES_LOST,
    Check,
    acked_not_lost,
    canceled_never_started,
    early_runs,
    history_agrees,
    never_early,
    one_live_attempt,
    rerun_causes,
    unacked_not_run,
)
from loadtest.faults.ordering import (
    Claim,
    NodeRun,
    after_parents,
    callbacks_once,
    controls_held,
    exclusive_in_order,
    exclusive_one_at_a_time,
    nodes_once,
    priority_order,
    rate_within,
    skipped_never_ran,
)

__all__ = [
    "Cancel",
    "Check",
    "Due",
    "Execution",
    "Record",
    "Request",
    "Term",
    "Verdict",
    "early_runs",
    "invariants",
    "judge",
    "overlapping_terms",
    "read_executions",
    "relay_terms",
]

SLOW_FACTOR = 10.0
"""A request (or an acked job) is *disturbed* when its answer (its run) came this many times later than the
median before the fault (the median: the path's start-up, in the first jobs, must not raise the bar)..."""
SLOW_FLOOR_S = 2.0
"""...and at least this many seconds late (2-core machines have noisy latency)."""


@dataclass
class Verdict:
    """What a scenario did to the promise."""

    scenario: str
    sent: int
    acked: int
    executed: int
    lost: int
    duplicates: int
    unacked_executed: int
    failed_requests: int
    recovery_s: float
    early: int = 0
    """Delayed jobs whose handler started before they were due (their ``run_at`` as Redis holds it; where
    Redis no longer holds the job, the earliest due time its request allows): must be 0 — "never early" is
    a promise of the timers."""
    claimed_early: int = 0
    """Delayed jobs that Redis itself records as claimed before their ``run_at`` (the engine's own view; a
    claim stamps ``started_at`` with Redis's ``TIME`` when the claimer's reading of it lags): must be 0."""
    overlapping_terms: int = 0
    """Pairs of relays that held the topic's lock at the same time (from their logs): must be 0."""
    retried: int = 0
    """Jobs the client had to send more than once (each may reach Kafka more than once: a source of
    duplicates the queue's ``dedup: active`` policy lets run again once the first copy finished)."""
    lost_ids: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    """Every invariant's verdict (:mod:`loadtest.faults.invariants`), the fault's proof among them."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if c.failed]


@dataclass(frozen=True)
class Term:
    """A relay's time as the topic's lock holder (seconds since the epoch, from its own log)."""

    holder: str
    start: float
    end: float


_ROLE = re.compile(r"^(\S+Z) .*elector role .*holder=(\S+) .*previous=(\S+) role=(\S+)")
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\S+Z) ")


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def relay_terms(logs: Iterable[str]) -> list[Term]:
    """Every leadership term in relay logs (one text per process run): from ``role=leader`` to the next
    ``previous=leader``; a term the log never ends (the process was killed) ends at its last line."""
    out: list[Term] = []
    for text in logs:
        start: tuple[str, float] | None = None
        last = 0.0
        for line in text.splitlines():
            if stamp := _STAMP.match(line):
                last = _epoch(stamp[1])
            if not (m := _ROLE.match(line)):
                continue
            at, holder, previous, role = _epoch(m[1]), m[2], m[3], m[4]
            if previous == "leader" and start is not None:
                out.append(Term(start[0], start[1], at))
                start = None
            if role == "leader":
                start = (holder, at)
        if start is not None:
            out.append(Term(start[0], start[1], last))
    return out


def overlapping_terms(terms: Sequence[Term]) -> list[tuple[Term, Term]]:
    """Pairs of terms of different relays that overlap: two holders writing at once (must be none)."""
    ordered = sorted(terms, key=lambda t: t.start)
    return [
        (a, b)
        for i, a in enumerate(ordered)
        for b in ordered[i + 1 :]
        if b.start < a.end and a.holder != b.holder
    ]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _disturbance(
    requests: list[Request], first_run: dict[str, float], fault_at: float, baseline_from: float
) -> Iterator[tuple[float, float]]:
    """(start, end) of every sign of the fault: failed requests, requests answered far slower than before
    the fault, and acked jobs that ran far later than before the fault (the baseline: jobs sent from
    ``baseline_from`` on, once the path was warm)."""
    before = [r for r in requests if r.acked and baseline_from <= r.sent and r.answered < fault_at]
    answer_bound = max(SLOW_FACTOR * _median([r.answered - r.sent for r in before]), SLOW_FLOOR_S)
    run_bound = max(
        SLOW_FACTOR * _median([first_run[r.id] - r.due for r in before if r.id in first_run]), SLOW_FLOOR_S
    )
    for r in requests:
        if r.sent < fault_at:
            continue
        if (not r.acked and not r.refused) or r.answered - r.sent > answer_bound:
            yield r.sent, r.answered
        if r.acked and r.id in first_run and first_run[r.id] - r.due > run_bound:
            yield r.due, first_run[r.id]


def judge(
    scenario: str,
    requests: Iterable[Request],
    executions: Sequence[Execution],
    *,
    fault_at: float,
    baseline_from: float = 0.0,
    terms: Sequence[Term] = (),
    notes: dict[str, Any] | None = None,
    dues: dict[str, Due] | None = None,
    cancels: Sequence[Cancel] = (),
    records: Mapping[str, Record | None] | None = None,
    graph: Mapping[str, Sequence[str]] | None = None,
    skipped: Sequence[tuple[str, int, str]] = (),
    claims: Sequence[Claim] | None = None,
    rates: Mapping[str, float] | None = None,
    controls: Sequence[Control] = (),
) -> Verdict:
    """Compare the client's log with the handlers' log (see the module docstring); ``checks``: every
    invariant, ``n/a`` where its input is missing (no records: the history is not judged; no evidence in
    ``notes["bite"]``: nothing is said of the fault unless ``notes`` has the key)."""
    reqs = list(requests)
    sent = {r.id for r in reqs} | {node_job_id(g, node, gen) for g, gen, node in skipped}
    runs = [e for e in executions if e.id in sent]
    extra: dict[str, Any] = (
        {"phantom_executions": n} if (n := sum(1 for e in executions if e.id not in sent)) else {}
    )
    acked = {r.id for r in reqs if r.acked}
    unacked = {r.id for r in reqs if not r.acked} - acked
    per_job = Counter(e.id for e in runs)
    first_run: dict[str, float] = {}
    for e in runs:
        first_run[e.id] = min(e.at, first_run.get(e.id, e.at))
    checks = invariants(
        reqs,
        runs,
        cancels,
        dues,
        records,
        graph=graph,
        skipped=skipped,
        claims=claims,
        rates=rates,
        controls=controls,
        redis_lost_at=(notes or {}).get(REDIS_WRITES_LOST, ()),
        across_loss=across_wipes(reqs, first_run, (notes or {}).get(REDIS_WIPED, ())),
    )
    if notes is not None and "bite" in notes:
        evidence = list(notes["bite"])
        if graph:  # a graph load is there to be hit half done: the fault must meet open fan-ins
            n = fan_ins_across(node_runs(runs), graph, fault_at)
            evidence.append({"what": "graph fan-ins open when the fault struck", "ok": n > 0, "graphs": n})
        checks.append(fault_took_effect(evidence))
    lost = sorted(acked - per_job.keys() - {c.id for c in cancels if c.stops_the_job or not c.outcome})
    early = early_runs(reqs, first_run, dues)
    if early:
        extra["early_ms"] = dict(sorted(early.items(), key=lambda kv: kv[1])[:20])
    margins = [first_run[r.id] - r.sent - r.delay_s for r in reqs if r.delay_s and r.id in first_run]
    if margins:  # how close to its due time the earliest delayed start came (ms; the sent time unrounded)
        extra["delayed_min_margin_ms"] = round(min(margins) * 1000, 3)
        extra["before_sent_plus_delay"] = sum(1 for m in margins if m < 0)  # the old, misdating rule
    if stamped := [d.run_at - d.claimed_at for d in (dues or {}).values() if d.claimed_at < d.run_at]:
        extra["claims_stamped_before_run_at"] = {"jobs": len(stamped), "max_ms": max(stamped)}
    spans = list(_disturbance(reqs, first_run, fault_at, baseline_from))
    recovery = max(end for _, end in spans) - min(start for start, _ in spans) if spans else 0.0
    return Verdict(
        scenario=scenario,
        sent=len(sent),
        acked=len(acked),
        executed=len(per_job),
        lost=len(lost),
        duplicates=sum(n - 1 for n in per_job.values()),
        unacked_executed=len(unacked & per_job.keys()),
        retried=sum(1 for r in reqs if r.tries > 1),
        early=len(early),
        claimed_early=sum(1 for d in (dues or {}).values() if d.claimed_at < d.run_at),
        overlapping_terms=len(overlapping_terms(terms)),
        failed_requests=sum(1 for r in reqs if not r.acked and not r.refused),
        recovery_s=round(max(recovery, 0.0), 2),
        lost_ids=lost[:20],
        notes={**(notes or {}), **extra},
        checks=checks,
    )


def across_wipes(
    requests: Sequence[Request], first_run: Mapping[str, float], wipes: Sequence[Sequence[float]]
) -> set[str]:
    """Exclusive jobs in flight across a Redis wipe (``wipes``: [wiped at, settings back at]): acknowledged
    before the queue's settings were applied again, first started after the wipe
    (:data:`loadtest.faults.invariants.REDIS_WIPED`)."""
    return {
        r.id
        for r in requests
        if r.excl
        and r.id in first_run
        and any(r.answered <= back and first_run[r.id] >= wiped for wiped, back in wipes)
    }


def _offsets(records: Mapping[str, Record | None]) -> dict[str, int]:
    return {i: r.offset for i, r in records.items() if r is not None and r.offset is not None}


def invariants(
    requests: Sequence[Request],
    runs: Sequence[Execution],
    cancels: Sequence[Cancel] = (),
    dues: Mapping[str, Due] | None = None,
    records: Mapping[str, Record | None] | None = None,
    rates: Mapping[str, float] | None = None,
    graph: Mapping[str, Sequence[str]] | None = None,
    skipped: Sequence[tuple[str, int, str]] = (),
    claims: Sequence[Claim] | None = None,
    controls: Sequence[Control] = (),
    redis_lost_at: Sequence[float] = (),
    across_loss: AbstractSet[str] = frozenset(),
) -> list[Check]:
    """Every invariant the recorded history lets the checker judge (the rest ``n/a``), in report order.
    ``graph``: the shape of the load's task graphs (node → its parents); their nodes' runs are the runs
    whose id is a node's job id (``<graph>:<node>``, ``@<gen>`` after a retry). ``skipped``: (graph,
    generation, node) of the nodes a failing parent skips (their generation fires no callback). ``claims``:
    jobs' readiness and claims as Redis dated them (``None``: not recorded, ``priority-order`` is n/a).
    ``controls``: the kill switches and pauses the load put in force (judged against the claims);
    ``redis_lost_at``: when Redis lost its latest writes (a cancel just before may be lost with them);
    ``across_loss``: exclusive jobs in flight across a Redis wipe (:func:`across_wipes`), not judged."""
    shape = graph or {}
    nodes = node_runs(runs) if shape else []
    fired, finished = callbacks(nodes, shape)
    finished -= {(g, gen) for g, gen, _ in skipped}
    return [
        acked_not_lost(requests, runs, cancels),
        unacked_not_run(requests, runs),
        one_live_attempt(runs),
        never_early(requests, runs, dues),
        canceled_never_started(cancels, runs, redis_lost_at),
        exclusive_one_at_a_time(runs, across_loss),
        exclusive_in_order(runs, _offsets(records or {}), across_loss),
        priority_order(claims or ()),
        rate_within(claims or (), rates or {}),
        controls_held(claims or (), controls, "switch"),
        controls_held(claims or (), controls, "pause"),
        controls_held(claims or (), controls, "lane"),
        history_agrees(runs, records or {}),
        nodes_once(nodes),
        callbacks_once(fired, finished),
        after_parents(nodes, shape),
        skipped_never_ran(nodes, skipped),
    ]


def node_runs(runs: Sequence[Execution]) -> list[NodeRun]:
    """The runs of graph nodes' jobs (ids ``<graph>:<node>`` or ``<graph>:<node>@<gen>``)."""
    out: list[NodeRun] = []
    for e in runs:
        graph, colon, rest = e.id.partition(":")
        if colon:
            node, _, gen = rest.partition("@")
            out.append(NodeRun(graph, int(gen or 0), node, e))
    return out


def callbacks(
    nodes: Sequence[NodeRun], shape: Mapping[str, Sequence[str]]
) -> tuple[list[tuple[str, int]], set[tuple[str, int]]]:
    """(each firing of a callback, each generation that must fire one): a callback is a node with parents
    that is no node's parent; it fired once per run but for the re-runs at-least-once allows
    (:func:`rerun_causes`: from outside a legal re-run and a second firing look alike — the engine counts
    each node once per generation, ``graph_report``); a generation must fire once every parent of its
    callbacks ran to its end."""
    parents_of_all = {p for mine in shape.values() for p in mine}
    sinks = {n: mine for n, mine in shape.items() if mine and n not in parents_of_all}
    runs: dict[tuple[str, int, str], list[Execution]] = {}
    for r in nodes:
        runs.setdefault((r.graph, r.generation, r.node), []).append(r.run)
    fired: list[tuple[str, int]] = []
    finished: set[tuple[str, int]] = set()
    for (graph, gen, node), mine in runs.items():
        if node in sinks:
            fired += [(graph, gen)] * (1 + sum(1 for c in rerun_causes(mine) if c is None))
    for graph, gen in {(r.graph, r.generation) for r in nodes}:
        for parents in sinks.values():
            if all(any(e.end is not None for e in runs.get((graph, gen, p), [])) for p in parents):
                finished.add((graph, gen))
    return fired, finished


def fan_ins_half_done(
    nodes: Sequence[NodeRun],
    shape: Mapping[str, Sequence[str]],
    skipped: Iterable[tuple[str, int, str]],
    held_by: tuple[str, float] | None = None,
) -> int:
    """Graph generations half done now: a parent of a node ended while the node (not one the graph skips)
    has not started, so a fault struck now meets an open fan-in (:func:`fan_ins_across` judges it after).
    ``held_by`` (a parent, a time): only those where that parent, started at that time or later, still
    runs — its work keeps the fan-in open a while yet."""
    started = {(r.graph, r.generation, r.node) for r in nodes}
    skip = set(skipped)
    holding = (
        None
        if held_by is None
        else {(r.graph, r.generation) for r in nodes if r.node == held_by[0] and r.run.at >= held_by[1]}
        - {(r.graph, r.generation) for r in nodes if r.node == held_by[0] and r.run.end is not None}
    )
    return len(
        {
            (r.graph, r.generation)
            for r in nodes
            if r.run.end is not None and (holding is None or (r.graph, r.generation) in holding)
            for node, parents in shape.items()
            if r.node in parents and (key := (r.graph, r.generation, node)) not in started and key not in skip
        }
    )


def fan_ins_across(nodes: Sequence[NodeRun], shape: Mapping[str, Sequence[str]], at: float) -> int:
    """Fan-ins open when the fault struck: graph generations where a node with parents first started
    after ``at`` while one of its parents had ended before it (the fault met the graph half done)."""
    ends: dict[tuple[str, int, str], float] = {}
    starts: dict[tuple[str, int, str], float] = {}
    for r in nodes:
        key = (r.graph, r.generation, r.node)
        starts[key] = min(r.run.at, starts.get(key, r.run.at))
        if r.run.end is not None:
            ends[key] = min(r.run.end, ends.get(key, r.run.end))
    open_ = {
        (g, gen)
        for (g, gen, node), start in starts.items()
        if shape.get(node) and start > at and any(ends.get((g, gen, p), at) < at for p in shape[node])
    }
    return len(open_)
