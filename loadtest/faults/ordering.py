"""The ordering promises as invariants over recorded runs (pure, like :mod:`loadtest.faults.invariants`):
exclusive keys one at a time and in enqueue order, priority (EDF) at each claim, rate limits, kill switches
and pauses, task graphs (each node once per generation, callbacks once, a node after its parents, skipped
nodes never run)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from loadtest.faults.history import Control, Execution
from loadtest.faults.invariants import LEASE_SLACK_S, Check, judged, rerun_causes

__all__ = [
    "CLAIM_TOLERANCE_S",
    "RATE_TOLERANCE",
    "Claim",
    "NodeRun",
    "after_parents",
    "callbacks_once",
    "controls_held",
    "exclusive_in_order",
    "exclusive_one_at_a_time",
    "nodes_once",
    "priority_order",
    "rate_within",
    "skipped_never_ran",
]

CLAIM_TOLERANCE_S = 0.001
"""Claims and readiness are stamped by Redis in whole ms: a job ready within the same ms as a claim may
miss it. (An unfiltered claim takes the head of the ready set atomically: ``docs/engine.md``.)"""
RATE_TOLERANCE = 0.1
"""Claims may exceed a rate by this share in any one-second window (``docs/engine.md``: the limits are
GCRA with a burst of one second's worth, on the callers' reading of Redis's clock, a little behind the
clock the claims are stamped with)."""


def _span(e: Execution) -> tuple[float, float]:
    """When a run held its job: start to end; a run whose process died, until its lease ran out."""
    return e.at, e.end if e.end is not None else e.at + e.lease_s


def _by(runs: Iterable[Execution], key: str) -> dict[str, list[Execution]]:
    out: dict[str, list[Execution]] = defaultdict(list)
    for e in runs:
        if value := getattr(e, key):
            out[value].append(e)
    return out


def _jobs(groups: Mapping[str, list[Execution]]) -> int:
    return len({e.id for runs in groups.values() for e in runs})


def _across(
    runs: Sequence[Execution], across_loss: AbstractSet[str]
) -> tuple[list[Execution], dict[str, int]]:
    """The runs judged, and the detail naming the jobs left out (in flight across a Redis wipe)."""
    if not across_loss:
        return list(runs), {}
    return [e for e in runs if e.id not in across_loss], {"across_loss": len(across_loss)}


def exclusive_one_at_a_time(runs: Sequence[Execution], across_loss: AbstractSet[str] = frozenset()) -> Check:
    """Never two jobs of one exclusivity key running at once (re-runs of one job: ``one-live-attempt``).
    ``across_loss``: jobs in flight across a Redis wipe, not judged (``docs/reliability.md``)."""
    bad: list[str] = []
    runs, left_out = _across(runs, across_loss)
    keys = _by(runs, "excl")
    for mine in keys.values():
        mine.sort(key=lambda e: e.at)
        for i, a in enumerate(mine):
            _, a_end = _span(a)
            for b in mine[i + 1 :]:
                if b.at >= a_end:
                    break
                if b.id != a.id:
                    bad += [a.id, b.id]
    return judged("exclusive-one-at-a-time", _jobs(keys), bad, keys=len(keys), **left_out)


def exclusive_in_order(
    runs: Sequence[Execution], offsets: Mapping[str, int], across_loss: AbstractSet[str] = frozenset()
) -> Check:
    """Per exclusivity key, jobs first start in the order they were enqueued. Two orders say "earlier":
    the Kafka records' (``offsets``; one key's records share a partition, and the relay writes a partition
    in order) and the engine's (a key's waiting jobs are taken by priority — the accept stamp
    ``enqueued_at`` by default — then id: ``docs/engine.md``). They agree unless two gateways' records of
    one key crossed on their way into the partition (its leader moved while both were produced), or two
    gateways stamped the same millisecond; then either start order is the engine's rule applied to what
    Redis held at the time. An offender started before a job of its key that is earlier in both orders
    had started; a job without a known offset, or in flight across a Redis wipe, is not judged."""
    bad: list[str] = []
    pairs: list[dict[str, object]] = []  # the first few (earlier record, later record started first)
    runs, left_out = _across(runs, across_loss)
    keys = _by((e for e in runs if e.id in offsets), "excl")
    for key, mine in keys.items():
        first: dict[str, Execution] = {}
        for e in sorted(mine, key=lambda e: e.at):
            first.setdefault(e.id, e)
        jobs = sorted(first.values(), key=lambda e: offsets[e.id])
        for i, a in enumerate(jobs):
            for b in jobs[i + 1 :]:
                if b.at < a.at and (a.enqueued_at, a.id) < (b.enqueued_at, b.id):
                    bad.append(b.id)
                    if len(pairs) < 5:
                        pairs.append({"key": key, "earlier": _at(a, offsets)})
                        pairs[-1]["started_first"] = _at(b, offsets)
    shown = {"pairs": pairs} if pairs else {}
    return judged("exclusive-in-order", _jobs(keys), bad, keys=len(keys), **shown, **left_out)


def _at(e: Execution, offsets: Mapping[str, int]) -> dict[str, object]:
    return {"id": e.id, "offset": offsets[e.id], "started": round(e.at, 3), "enqueued_at": e.enqueued_at}


@dataclass(frozen=True)
class Claim:
    """A job's claim as Redis dated it: when it became ready (enqueued due, or promoted; ``None``: not
    recorded) and when it was claimed, with its priority (lower first; a deadline for EDF) and its fairness
    group (a tenant)."""

    id: str
    priority: float
    ready_at: float | None
    claimed_at: float
    group: str = ""
    queue: str = ""
    switched: bool = False
    """The job matches the load's kill switch."""
    acked_at: float | None = None
    """When the gateway acknowledged its enqueue (client's clock)."""


def priority_order(claims: Sequence[Claim], tolerance_s: float = CLAIM_TOLERANCE_S) -> Check:
    """At every claim no ready job of a better priority (an earlier deadline) in the same group was passed
    over: an offender is a job that was ready while a worse one was claimed, and was claimed only later
    (judged: the claims whose readiness is known; any claim can be the worse one claimed meanwhile).
    Groups are a fair queue's values (the ring deals across them; each keeps its own order). The detail
    ``overtook`` counts claims ahead of a job that was ready earlier (by priority: what shows a backlog
    formed and the order was put to the test)."""
    bad: list[str] = []
    overtook = 0
    groups: dict[tuple[str, str], list[Claim]] = defaultdict(list)
    for c in claims:
        groups[c.queue, c.group].append(c)
    for mine in groups.values():
        mine.sort(key=lambda c: c.claimed_at)
        times = [c.claimed_at for c in mine]
        for a in mine:
            if a.ready_at is None:
                continue
            lo = bisect.bisect_right(times, a.ready_at + tolerance_s)
            hi = bisect.bisect_left(times, a.claimed_at - tolerance_s)
            if any(b.priority > a.priority for b in mine[lo:hi]):
                bad.append(a.id)
        latest, folded = float("-inf"), 0  # the latest claim of the jobs ready before the one at hand
        by_ready = sorted((c.ready_at, c.claimed_at) for c in mine if c.ready_at is not None)
        for ready, claimed in by_ready:
            while by_ready[folded][0] < ready:
                latest = max(latest, by_ready[folded][1])
                folded += 1
            overtook += latest > claimed + tolerance_s
    judged_claims = sum(1 for c in claims if c.ready_at is not None)
    return judged("priority-order", judged_claims, bad, overtook=overtook)


def rate_within(
    claims: Sequence[Claim], limits: Mapping[str, float], tolerance: float = RATE_TOLERANCE
) -> Check:
    """Per tenant (a claim's group) with a rate (jobs/s), no one-second window holds more claims than a
    burst of one second's worth plus a second's rate, with ``tolerance``: the offender is the job over the
    bound. Claims as Redis dated them (a job's last claim: the claims judged are a subset of those made,
    so a window over the bound is one for certain). The detail ``busiest``: each tenant's fullest window
    against its bound (what shows the limit was reached at all)."""
    bad: list[str] = []
    busiest: dict[str, str] = {}
    groups: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for c in claims:
        if c.group in limits:
            groups[c.group].append((c.claimed_at, c.id))
    for tenant, starts in groups.items():
        starts.sort()
        rate = limits[tenant]
        bound = int(max(rate, 1.0) + rate * (1 + tolerance))
        most = 0
        for n, (t, _) in enumerate(starts):
            end = bisect.bisect_left(starts, (t + 1.0, ""))
            most = max(most, end - n)
            if end - n > bound:
                bad.append(starts[n + bound][1])
        busiest[tenant] = f"{most} of {bound}"
    return judged("rate-within", len(groups), bad, busiest=busiest)


def controls_held(
    claims: Sequence[Claim], controls: Sequence[Control], what: str, tolerance_s: float = CLAIM_TOLERANCE_S
) -> Check:
    """While a control of kind ``what`` was in force — from the answer that put it in force to the send of
    the first request lifting it — no claim (as Redis dated it) handed out a job it covers: a ``pause``
    covers its queue's jobs, a ``switch`` the switched jobs of its queue, a ``lane`` (the queue held at the
    relay: its rate ``paused``, from the relay reporting it held) the jobs of its queue acknowledged since
    (they wait in the topic's holding lane; those in Redis before may run). Offender: the job claimed. The
    detail ``held``: covered jobs acknowledged while it was in force and claimed only after (what shows
    it bit)."""
    mine = [w for w in controls if w.what == what]
    bad: list[str] = []
    held = 0
    for w in mine:
        for c in claims:
            if c.queue != w.queue or not (what == "pause" or c.switched or what == "lane"):
                continue
            if what == "lane" and (c.acked_at is None or c.acked_at <= w.on):
                continue
            if w.on + tolerance_s < c.claimed_at < w.off - tolerance_s:
                bad.append(c.id)
            held += c.acked_at is not None and w.on < c.acked_at < w.off <= c.claimed_at
    return judged(f"{what}-held", len(mine), bad, held=held)


@dataclass(frozen=True)
class NodeRun:
    """A run of a task graph's node (its job's run) in one generation of the graph."""

    graph: str
    generation: int
    node: str
    run: Execution

    @property
    def label(self) -> str:
        return f"{self.graph}/{self.generation}/{self.node}"


def nodes_once(runs: Sequence[NodeRun], slack_s: float = LEASE_SLACK_S) -> Check:
    """Each node ran once per generation but for the re-runs at-least-once allows any job (its earlier run
    ended with its completion never written back, or its lease ran out: :func:`rerun_causes`); a re-run
    that overlapped a live run is not one (the graph counts a node once per generation either way)."""
    by_node: dict[str, list[Execution]] = defaultdict(list)
    for r in runs:
        by_node[r.label].append(r.run)
    bad = [label for label, mine in by_node.items() if None in rerun_causes(mine, slack_s)]
    return judged("graph-node-once", len(by_node), bad)


def after_parents(runs: Sequence[NodeRun], parents: Mapping[str, Sequence[str]]) -> Check:
    """A node with parents (``parents``: node → its parents' names, the same in every graph judged) first
    started only after each parent had run to its end in the same generation: a fan-in released early
    (a parent counted that had not finished) is caught here (offender: ``graph/gen/node``)."""
    ends: dict[str, list[float]] = defaultdict(list)
    starts: dict[str, float] = {}
    for r in runs:
        if r.run.end is not None:
            ends[r.label].append(r.run.end)
        starts[r.label] = min(r.run.at, starts.get(r.label, r.run.at))
    judged_nodes, bad = 0, []
    for r in runs:
        if not (mine := parents.get(r.node)) or r.run.at != starts[r.label]:
            continue
        judged_nodes += 1
        first = f"{r.graph}/{r.generation}/"
        if any(not any(end <= r.run.at for end in ends.get(first + p, [])) for p in mine):
            bad.append(r.label)
    return judged("graph-after-parents", judged_nodes, bad)


def callbacks_once(callbacks: Sequence[tuple[str, int]], generations: Iterable[tuple[str, int]]) -> Check:
    """Each finished generation of a graph fired its callback exactly once (offender: ``graph/gen``)."""
    fired: dict[tuple[str, int], int] = defaultdict(int)
    for c in callbacks:
        fired[c] += 1
    gens = set(generations)
    bad = [f"{g}/{n}" for g, n in gens | set(fired) if fired.get((g, n), 0) != 1]
    return judged("graph-callback-once", len(gens), bad)


def skipped_never_ran(runs: Sequence[NodeRun], skipped: Iterable[tuple[str, int, str]]) -> Check:
    """A node the graph skipped (a parent failed) never ran in that generation."""
    labels = {f"{g}/{n}/{node}" for g, n, node in skipped}
    return judged("graph-skipped-never-ran", len(labels), [r.label for r in runs if r.label in labels])
