"""Checker v2 on hand-made histories: a clean one passes every invariant it has inputs for (the rest are
``n/a``, never ``pass``), and each invariant catches a history made to break it, naming the offenders."""

from __future__ import annotations

from loadtest.faults.checker import across_wipes, fan_ins_across, fan_ins_half_done, invariants, judge
from loadtest.faults.history import Cancel, Control, Due, Execution, Record, Request
from loadtest.faults.invariants import (
    acked_not_lost,
    canceled_never_started,
    history_agrees,
    never_early,
    one_live_attempt,
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

LEASE = 3.0


def req(i: int, sent: float = 100.0, *, acked: bool = True, status: int = 202, delay: float = 0.0) -> Request:
    return Request(f"j{i}", sent, sent + 0.01, acked, status, delay)


def run(
    i: int, at: float, *, attempt: int = 1, end: float | None = -1, excl: str = "", enq: float = 0.0
) -> Execution:
    """A run of job ``i`` from ``at``; ``end`` -1: 50 ms later, None: its process died."""
    return Execution(f"j{i}", attempt, "w1", at, at + 0.05 if end == -1 else end, LEASE, enq, excl=excl)


def clean() -> tuple[list[Request], list[Execution], list[Cancel], dict[str, Record | None]]:
    reqs = [req(i, 100 + i * 0.01, delay=1.5 if i % 10 == 0 else 0.0) for i in range(50)]
    runs = [run(i, 100 + i * 0.01 + (1.6 if i % 10 == 0 else 0.05)) for i in range(50) if i != 20]
    cancels = [Cancel("j20", 100.3, 100.31, "canceled")]
    records: dict[str, Record | None] = {f"j{i}": Record("completed", 1) for i in range(50) if i != 20}
    records["j20"] = Record("canceled", 0)
    return reqs, runs, cancels, records


def test_a_clean_history_passes_what_it_exercises_and_the_rest_is_not_applicable() -> None:
    reqs, runs, cancels, records = clean()
    status = {c.name: c.status for c in invariants(reqs, runs, cancels, records=records)}
    assert status == {
        "acked-not-lost": "pass",
        "unacked-not-run": "n/a",  # every request was acked: nothing to judge
        "one-live-attempt": "pass",
        "never-early": "pass",
        "canceled-never-started": "pass",
        "exclusive-one-at-a-time": "n/a",
        "exclusive-in-order": "n/a",
        "priority-order": "n/a",
        "rate-within": "n/a",
        "switch-held": "n/a",
        "pause-held": "n/a",
        "lane-held": "n/a",
        "history-agrees": "pass",
        "graph-node-once": "n/a",
        "graph-callback-once": "n/a",
        "graph-after-parents": "n/a",
        "graph-skipped-never-ran": "n/a",
    }
    v = judge("clean", reqs, runs, fault_at=100.2, cancels=cancels, records=records)
    assert v.lost == 0
    assert not v.failed_checks
    assert "fault-took-effect" not in {c.name for c in v.checks}, "no evidence key: the fault is not judged"


def test_an_acked_job_that_never_ran_is_lost_unless_its_cancel_stopped_it() -> None:
    reqs, runs, cancels, _ = clean()
    c = acked_not_lost(reqs, [r for r in runs if r.id != "j7"], cancels)
    assert (c.status, c.violations, c.ids, c.checked) == ("fail", 1, ("j7",), 49)
    assert c.cell() == "**✗ 1 of 49**"


def test_a_refused_job_that_ran_is_caught_and_a_lost_answer_is_not() -> None:
    reqs = [req(1, acked=False, status=400), req(2, acked=False, status=0), req(3, acked=False, status=503)]
    c = unacked_not_run(reqs, [run(1, 101), run(2, 101), run(3, 101)])
    assert (c.status, c.ids) == ("fail", ("j1",))
    assert c.detail["answer_lost"] == 2


def test_two_live_runs_of_one_job_are_illegal_and_duplicates_say_why_they_are_legal() -> None:
    runs = [
        run(1, 100.0),
        run(1, 100.2, attempt=2),  # sequential: the first had ended (its completion was lost)
        run(2, 100.0, end=None),
        run(2, 103.1, attempt=2),  # its process died; a re-run after the lease ran out
        run(3, 100.0, end=101.0),
        run(3, 100.5, attempt=2),  # both live, the first's lease valid: two live attempts
        run(4, 100.0, end=None),
        run(4, 101.0, attempt=2),  # the first's process died but its lease was still valid
    ]
    c = one_live_attempt(runs)
    assert (c.status, c.ids) == ("fail", ("j3", "j4"))
    assert c.detail["duplicates"] == {"sequential": 1, "lease_expired": 1}
    assert one_live_attempt(runs[:4]).status == "pass"


def test_a_delayed_job_run_or_claimed_before_its_run_at_is_early() -> None:
    reqs = [req(1, 100, delay=1.5), req(2, 100, delay=1.5), req(3, 100, delay=1.5)]
    runs = [run(1, 101.2), run(2, 101.6), run(3, 101.6)]
    dues = {"j2": Due(101_500, 101_500), "j3": Due(101_500, 101_499)}
    c = never_early(reqs, runs, dues)
    assert (c.status, c.ids) == ("fail", ("j1", "j3"))
    assert (c.detail["handler"], c.detail["claim"]) == (1, 1)


def test_a_canceled_job_that_started_after_the_cancel_was_answered_is_caught() -> None:
    cancels = [
        Cancel("j1", 100, 100.1, "canceled"),
        Cancel("j2", 100, 100.1, "tombstoned"),
        Cancel("j3", 100, 100.1, "flagged"),  # running: it may go on
        Cancel("j4", 100, 100.1, "canceled"),
    ]
    runs = [run(1, 99.9), run(2, 100.5), run(3, 100.5), run(4, 100.05)]
    c = canceled_never_started(cancels, runs)
    assert (c.status, c.ids, c.checked) == ("fail", ("j2",), 3)
    assert c.detail == {"flagged": 1}


def test_the_history_must_agree_with_the_runs() -> None:
    runs = [run(1, 100), run(2, 100), run(3, 100), run(4, 100, attempt=2), run(6, 100)]
    records: dict[str, Record | None] = {
        "j1": Record("completed", 1),
        "j2": Record("running", 1),  # ran, never finished
        "j3": Record("completed", 2),  # completed by an attempt that never ran its handler
        "j4": Record("completed", 2),
        "j5": Record("completed", 1),  # completed without running
        "j6": None,  # Redis no longer holds it: not judged
    }
    c = history_agrees(runs, records)
    assert (c.status, c.ids, c.checked) == ("fail", ("j2", "j3", "j5"), 5)
    assert c.detail == {
        "not_held": 1,
        "ran_but_not_finished": 1,
        "completed_attempt_never_ran": 1,
        "completed_never_ran": 1,
    }


def test_two_jobs_of_one_exclusive_key_never_run_at_once() -> None:
    runs = [run(1, 100, excl="a"), run(2, 100.1, excl="a"), run(3, 100.02, excl="b")]
    c = exclusive_one_at_a_time([*runs[1:], run(4, 100.2, excl="a")])
    assert c.status == "pass"
    c = exclusive_one_at_a_time([*runs, run(5, 100.03, excl="a")])
    assert (c.status, c.ids, c.checked, c.detail["keys"]) == ("fail", ("j1", "j5"), 4, 2)
    died = [
        run(6, 100, excl="c", end=None),
        run(7, 102, excl="c"),
    ]  # a dead run holds its key until its lease
    assert exclusive_one_at_a_time(died).ids == ("j6", "j7")


def test_an_exclusive_key_runs_its_jobs_in_the_order_of_their_kafka_records() -> None:
    offsets = {
        f"j{i}": Record("completed", 1, f"t/0/{o}").offset or 0 for i, o in ((1, 10), (2, 11), (3, 12))
    }
    runs = [run(1, 100, excl="a"), run(2, 100.1, excl="a"), run(3, 100.2, excl="a")]
    assert exclusive_in_order(runs, offsets).status == "pass"
    swapped = [run(1, 100.2, excl="a"), run(2, 100.1, excl="a"), run(3, 100.3, excl="a")]
    assert exclusive_in_order(swapped, offsets).ids == ("j2",)
    accepted_late = [run(1, 100.2, excl="a", enq=5), run(2, 100.3, excl="a", enq=4)]
    assert exclusive_in_order(accepted_late, offsets).status == "pass", "the partition's order, not the clock"
    # two gateways' records crossed in the partition (j2 accepted first, written after j1): the engine
    # orders a key's waiting jobs by their accept stamps, so j2 may start first
    crossed = [run(1, 100.3, excl="a", enq=5), run(2, 100.2, excl="a", enq=4)]
    assert exclusive_in_order(crossed, offsets).status == "pass"
    agreed = [run(1, 100.3, excl="a", enq=4), run(2, 100.2, excl="a", enq=5)]  # earlier in both orders
    assert exclusive_in_order(agreed, offsets).ids == ("j2",)
    # one stamp: the engine takes the smaller id first (j1 < j2 and j1's record is first: an offender)
    assert exclusive_in_order(
        [run(1, 100.3, excl="a", enq=4), run(2, 100.2, excl="a", enq=4)], offsets
    ).ids == ("j2",)
    tied = {"j1": offsets["j2"], "j2": offsets["j1"]}  # one stamp, records crossed: either order
    assert (
        exclusive_in_order([run(1, 100.3, excl="a", enq=4), run(2, 100.2, excl="a", enq=4)], tied).status
        == "pass"
    )
    assert exclusive_in_order(swapped, {}).status == "n/a"


def test_a_ready_job_of_better_priority_passed_over_at_a_claim_is_caught() -> None:
    claims = [
        Claim("hi", 1, ready_at=100.0, claimed_at=100.5),
        Claim("lo", 9, ready_at=99.0, claimed_at=100.2),  # claimed while "hi" was ready and waiting
        Claim("early", 9, ready_at=98.0, claimed_at=99.5),  # before "hi" was ready: fine
    ]
    c = priority_order(claims)
    assert (c.status, c.ids) == ("fail", ("hi",))
    edf = [Claim("late", 9, 99.0, 100.6), Claim("urgent", 1, 100.0, 100.1)]  # a deadline jumped the line
    c = priority_order(edf)
    assert (c.status, c.detail) == ("pass", {"overtook": 1})
    other_tenant = [*claims[:1], Claim("lo", 9, 99.0, 100.2, group="t2"), claims[2]]
    assert priority_order(other_tenant).status == "pass", "a fair queue orders each value on its own"


def test_claims_over_a_tenants_rate_are_caught() -> None:
    def claim(i: int, at: float, tenant: str) -> Claim:
        return Claim(f"{tenant}{i}", 1, None, at, group=tenant)

    steady = [claim(i, 100 + i * 0.2, "t1") for i in range(20)]  # 5/s
    burst = [claim(i, 100 + i * 0.01, "t2") for i in range(30)]  # 30 in 0.3 s
    c = rate_within(steady, {"t1": 5})
    assert (c.status, c.detail) == ("pass", {"busiest": {"t1": "5 of 10"}})
    c = rate_within([*steady, *burst], {"t1": 5, "t2": 5})
    assert c.status == "fail"
    assert c.ids[0] == "t210"
    assert rate_within(burst, {}).status == "n/a"
    unknown_readiness = [claim(1, 100.0, "t1"), Claim("x", 9, None, 100.5)]
    assert priority_order(unknown_readiness).status == "n/a", (
        "only a claim whose readiness is known is judged"
    )


def test_graph_nodes_run_once_per_generation_callbacks_once_and_skipped_nodes_never() -> None:
    def node(gen: int, name: str, at: float, end: float | None = -1) -> NodeRun:
        return NodeRun("g", gen, name, run(1, at, end=end))

    runs = [node(1, "a", 100), node(1, "b", 100.1), node(2, "a", 101)]
    assert nodes_once(runs).status == "pass"
    assert nodes_once([*runs, node(1, "a", 100.02)]).ids == ("g/1/a",), "two live runs of a node"
    assert nodes_once([node(3, "a", 100, end=None), node(3, "a", 103.5)]).status == "pass", "lease ran out"
    assert nodes_once([*runs, node(1, "a", 100.5)]).status == "pass", "its completion lost: at least once"
    assert callbacks_once([("g", 1), ("g", 2)], [("g", 1), ("g", 2)]).status == "pass"
    c = callbacks_once([("g", 1), ("g", 1)], [("g", 1), ("g", 2)])
    assert (c.status, c.ids) == ("fail", ("g/1", "g/2"))
    assert skipped_never_ran(runs, [("g", 1, "c")]).status == "pass"
    assert skipped_never_ran(runs, [("g", 2, "a")]).ids == ("g/2/a",)


def test_a_node_that_starts_before_a_parent_ended_is_caught() -> None:
    def node(name: str, at: float, end: float | None = -1, graph: str = "g") -> NodeRun:
        return NodeRun(graph, 0, name, run(1, at, end=end))

    shape = {"a": (), "b": (), "join": ("a", "b")}
    ok = [node("a", 100), node("b", 100.01), node("join", 100.2)]
    assert after_parents(ok, shape).status == "pass"
    early = [node("a", 100), node("b", 100.01, end=None), node("join", 100.2)]  # b never ended
    assert after_parents(early, shape).ids == ("g/0/join",)
    racing = [node("a", 100), node("b", 100.01), node("join", 100.03)]  # before b's end (100.06)
    assert after_parents(racing, shape).ids == ("g/0/join",)
    rerun = [*ok, node("join", 104)]  # only the first start is judged
    assert after_parents(rerun, shape).status == "pass"
    assert after_parents(ok, {}).status == "n/a"


def test_a_fault_waits_for_a_half_done_graph_and_is_judged_by_the_fan_ins_it_met() -> None:
    def node(graph: str, name: str, at: float, end: float | None = -1) -> NodeRun:
        return NodeRun(graph, 0, name, run(1, at, end=end))

    shape = {"a": (), "b": (), "join": ("a", "b")}
    running = [node("g1", "a", 100, end=None)]  # no parent ended yet
    assert fan_ins_half_done(running, shape, ()) == 0
    half = [*running, node("g2", "a", 100), node("g2", "b", 100, end=None)]  # g2's a ended, its join waits
    assert fan_ins_half_done(half, shape, ()) == 1
    assert fan_ins_half_done(half, shape, [("g2", 0, "join")]) == 0  # a join the graph skips never opens
    assert fan_ins_half_done([*half, node("g2", "join", 100.5)], shape, ()) == 0  # already started
    # held open by b only while b (started at 100 or later) still runs
    assert fan_ins_half_done(half, shape, (), ("b", 100)) == 1
    assert fan_ins_half_done(half, shape, (), ("b", 100.2)) == 0  # b started too long ago: may end any moment
    closed = [*running, node("g2", "a", 100), node("g2", "b", 100)]  # b ended: the join may start now
    assert fan_ins_half_done(closed, shape, (), ("b", 99)) == 0
    # struck at 100.1 (g2 half done), its join started after: the checker counts the fan-in it met
    assert fan_ins_across([*half, node("g2", "join", 101)], shape, 100.1) == 1
    assert fan_ins_across([*half, node("g2", "join", 101)], shape, 99) == 0  # struck before any parent ended


def test_the_loads_graphs_are_judged_from_their_nodes_job_ids() -> None:
    shape = {"p1": (), "p2": (), "join": ("p1", "p2")}
    reqs = [Request(f"g{n}:{node}", 100.0, 100.01, True, 202) for n in range(2) for node in shape]

    def runs_of(graph: str, join_at: float, *more: Execution) -> list[Execution]:
        ids = [f"{graph}:p1", f"{graph}:p2"]
        return [Execution(i, 1, "w1", 100.1, 100.15, LEASE) for i in ids] + [
            Execution(f"{graph}:join", 1, "w1", join_at, join_at + 0.05, LEASE),
            *more,
        ]

    fine = runs_of("g0", 100.2) + runs_of("g1", 100.3)
    status = {c.name: c.status for c in invariants(reqs, fine, graph=shape)}
    assert [status[n] for n in ("graph-node-once", "graph-callback-once", "graph-after-parents")] == [
        "pass"
    ] * 3
    assert status["acked-not-lost"] == "pass", "every node's job ran"
    twice = [*fine, Execution("g1:join", 1, "w2", 100.31, 100.36, LEASE)]  # fired again while the first ran
    checks = {c.name: c for c in invariants(reqs, twice, graph=shape)}
    assert checks["graph-callback-once"].ids == ("g1/0",)
    assert checks["graph-node-once"].ids == ("g1/0/join",)
    never = [e for e in fine if e.id != "g0:join"]  # both parents ended: the join had to fire
    checks = {c.name: c for c in invariants(reqs, never, graph=shape)}
    assert checks["graph-callback-once"].ids == ("g0/0",)
    assert checks["acked-not-lost"].ids == ("g0:join",)
    early = runs_of("g0", 100.12) + runs_of("g1", 100.3)  # the join before its parents ended
    assert {c.name: c for c in invariants(reqs, early, graph=shape)}["graph-after-parents"].ids == (
        "g0/0/join",
    )


def test_a_failing_graphs_skipped_join_must_never_run_and_fires_no_callback() -> None:
    """The load's failing graphs: the join is not a request (nothing to lose), only a node to skip."""
    shape = {"p1": (), "p2": (), "join": ("p1", "p2")}
    reqs = [Request(f"g0:{node}", 100.0, 100.01, True, 202) for node in ("p1", "p2")]
    parents = [Execution(f"g0:{p}", 1, "w1", 100.1, 100.15, LEASE) for p in ("p1", "p2")]
    skipped = [("g0", 0, "join")]
    verdict = judge("s", reqs, parents, fault_at=0.0, graph=shape, skipped=skipped)
    status = {c.name: c.status for c in verdict.checks}
    assert (status["graph-skipped-never-ran"], status["graph-callback-once"]) == ("pass", "n/a")
    assert (verdict.lost, status["acked-not-lost"]) == (0, "pass")
    ran = judge(
        "s",
        reqs,
        [*parents, Execution("g0:join", 1, "w1", 100.2, 100.25, LEASE)],
        fault_at=0.0,
        graph=shape,
        skipped=skipped,
    )
    checks = {c.name: c for c in ran.checks}
    assert checks["graph-skipped-never-ran"].ids == ("g0/0/join",)
    assert "phantom_executions" not in ran.notes, "a skipped node's job is one the load knows"


def test_a_claim_while_a_kill_switch_or_a_pause_was_in_force_is_caught() -> None:
    switch, pause = Control("switch", "q", on=100.0, off=101.0), Control("pause", "x", on=102.0, off=103.0)
    claims = [
        Claim("sw-before", 1, None, 99.9, queue="q", switched=True),
        Claim("plain-during", 1, None, 100.5, queue="q"),  # the switch covers meta.sw jobs only
        Claim("sw-after", 1, None, 101.2, queue="q", switched=True),
        Claim("x-after", 1, None, 103.1, queue="x"),
    ]
    assert [controls_held(claims, [switch, pause], w).status for w in ("switch", "pause")] == ["pass"] * 2
    during = [*claims, Claim("sw-during", 1, None, 100.4, queue="q", switched=True)]
    assert controls_held(during, [switch], "switch").ids == ("sw-during",)
    paused = [*claims, Claim("x-during", 1, None, 102.5, queue="x")]
    assert controls_held(paused, [switch, pause], "pause").ids == ("x-during",)
    assert controls_held(claims, [switch], "pause").status == "n/a", "no pause was in force"
    waited = [Claim("sw-held", 1, None, 101.05, queue="q", switched=True, acked_at=100.2)]
    assert controls_held(waited, [switch], "switch").detail == {"held": 1}


def test_a_cancel_lost_with_redis_s_latest_writes_is_counted_not_excused_otherwise() -> None:
    """A cancel lives only in Redis until its event is shipped: Redis losing its latest writes just after
    the answer may lose it (an accepted-loss mode), never a cancel answered long before or after."""
    cancels = [Cancel("j1", 100.0, 100.01, "canceled")]
    ran = [run(1, 104.0)]
    assert canceled_never_started(cancels, ran).ids == ("j1",)
    c = canceled_never_started(cancels, ran, redis_lost_at=[100.5])
    assert (c.status, c.detail) == ("pass", {"lost_with_redis": 1})
    assert canceled_never_started(cancels, ran, redis_lost_at=[99.0]).ids == ("j1",), "lost before the cancel"
    assert canceled_never_started(cancels, ran, redis_lost_at=[120.0]).ids == ("j1",), "long after it"


def test_exclusive_jobs_in_flight_across_a_redis_wipe_are_left_out_and_counted() -> None:
    """A wipe takes a pending exclusive job's record and the queue's settings: the rebuild brings the job
    back after newer ones of its key ran. Those jobs are not judged; every other job still is."""
    reqs = [
        Request("old", 100.0, 100.01, True, 202, excl="k"),  # pending when Redis was wiped at 101
        Request("new", 102.0, 102.01, True, 202, excl="k"),  # written by the relay after the restart
        Request("late", 110.0, 110.01, True, 202, excl="k"),  # after the settings were back (105)
    ]
    runs = [
        Execution("new", 1, "w1", 102.5, 102.55, LEASE, 102.0, excl="k"),
        Execution("old", 1, "w1", 106.0, 106.05, LEASE, 100.0, excl="k"),
        Execution("late", 1, "w1", 110.5, 110.55, LEASE, 110.0, excl="k"),
    ]
    first = {e.id: e.at for e in runs}
    offsets = {"old": 1, "new": 2, "late": 3}
    assert exclusive_in_order(runs, offsets).ids == ("new",), "the rebuilt job ran after a newer one"
    across = across_wipes(reqs, first, [[101.0, 105.0]])
    assert across == {"old", "new"}
    c = exclusive_in_order(runs, offsets, across)
    assert (c.status, c.checked, c.detail["across_loss"]) == ("pass", 1, 2)
    assert exclusive_one_at_a_time(runs, across).detail == {"keys": 1, "across_loss": 2}


def test_a_job_acked_while_its_queue_was_held_in_the_lane_and_claimed_before_the_release_is_caught() -> None:
    lane = Control("lane", "x", on=100.0, off=110.0)  # held from the relay's report to the release
    claims = [
        Claim("in-redis-before", 1, None, 105.0, queue="x", acked_at=99.0),  # already in Redis: may run
        Claim("neighbour", 1, None, 105.0, queue="q", acked_at=101.0),  # the other queue flows
        Claim("drained-after", 1, None, 110.5, queue="x", acked_at=101.0),
    ]
    assert controls_held(claims, [lane], "lane").status == "pass"
    assert controls_held(claims, [lane], "lane").detail == {"held": 1}
    early = [*claims, Claim("ran-while-held", 1, None, 106.0, queue="x", acked_at=102.0)]
    assert controls_held(early, [lane], "lane").ids == ("ran-while-held",)
    assert controls_held(claims, [lane], "pause").status == "n/a", "a lane is not a pause"
