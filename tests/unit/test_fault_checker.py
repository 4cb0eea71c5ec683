"""The fault suite's checker on hand-made histories: what counts as lost, duplicated, unacked-but-run, and
how long a disturbance lasted."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from loadtest.faults.checker import (
    Due,
    Execution,
    Request,
    judge,
    overlapping_terms,
    read_executions,
    relay_terms,
)


def _req(
    i: int, sent: float, acked: bool = True, answered: float | None = None, delay_s: float = 0.0
) -> Request:
    return Request(
        f"j{i}", sent, answered if answered is not None else sent + 0.01, acked, 202 if acked else 0, delay_s
    )


def _run(i: int, at: float, attempt: int = 1) -> Execution:
    return Execution(f"j{i}", attempt, "w1", at)


def test_clean_history_has_nothing_to_report() -> None:
    reqs = [_req(i, 100 + i * 0.01) for i in range(100)]
    runs = [_run(i, 100 + i * 0.01 + 0.05) for i in range(100)]
    v = judge("clean", reqs, runs, fault_at=100.5)
    assert (v.sent, v.acked, v.executed, v.lost, v.duplicates, v.unacked_executed) == (100, 100, 100, 0, 0, 0)
    assert v.recovery_s == 0.0


def test_an_acked_job_that_never_ran_is_lost_and_named() -> None:
    reqs = [_req(i, 100 + i) for i in range(5)]
    runs = [_run(i, 100 + i + 0.1) for i in (0, 1, 3)]
    v = judge("lost", reqs, runs, fault_at=101.5)
    assert v.lost == 2
    assert v.lost_ids == ["j2", "j4"]


def test_extra_executions_are_duplicates_and_unacked_runs_are_counted_apart() -> None:
    reqs = [_req(0, 100), _req(1, 100, acked=False, answered=115), _req(2, 100, acked=False, answered=115)]
    runs = [_run(0, 100.1), _run(0, 104, attempt=2), _run(0, 104.5, attempt=2), _run(1, 100.2)]
    v = judge("dup", reqs, runs, fault_at=99)
    assert v.duplicates == 2
    assert v.unacked_executed == 1
    assert v.failed_requests == 2
    assert v.lost == 0


def test_a_job_retried_by_the_client_counts_once() -> None:
    """One Request per job id: the load logs the final outcome of all its tries."""
    reqs = [_req(0, 100), Request("j1", 100, 101, True, 202)]
    v = judge("retried", reqs, [_run(0, 100.1), _run(1, 101.1)], fault_at=99)
    assert (v.sent, v.acked, v.executed) == (2, 2, 2)


def test_recovery_spans_first_failure_to_last_late_job() -> None:
    before = [_req(i, 90 + i * 0.1) for i in range(50)]
    before_runs = [_run(i, 90 + i * 0.1 + 0.06) for i in range(50)]
    failed = [Request("f1", 101.0, 103.0, False), Request("f2", 102.0, 104.0, False)]
    late = [_req(100, 103.5)]  # acked at 103.51, ran 10 s later: far beyond the 2 s floor
    on_time = [_req(101, 105)]
    runs = [*before_runs, _run(100, 113.51), _run(101, 105.1)]
    v = judge("recovery", [*before, *failed, *late, *on_time], runs, fault_at=100.0)
    assert v.recovery_s == 12.51  # 101.0 (first failed request) → 113.51 (the late job ran)


def test_delayed_jobs_are_late_only_after_their_due_time() -> None:
    reqs = [_req(i, 100 + i * 0.1) for i in range(20)] + [_req(99, 103, delay_s=1.5)]
    runs = [_run(i, 100 + i * 0.1 + 0.05) for i in range(20)] + [_run(99, 104.6)]
    assert judge("delayed", reqs, runs, fault_at=102).recovery_s == 0.0


def test_torn_last_line_of_a_killed_worker_is_skipped(tmp_path: Path) -> None:
    whole = orjson.dumps({"id": "a", "attempt": 1, "worker": "7", "at": 1.5}) + b"\n"
    (tmp_path / "exec-7.jsonl").write_bytes(whole + b'{"id": "b", "att')
    (tmp_path / "exec-8.jsonl").write_bytes(
        orjson.dumps({"id": "c", "attempt": 2, "worker": "8", "at": 2}) + b"\n"
    )
    (tmp_path / "other.txt").write_text("not an execution log")
    assert read_executions(tmp_path) == [Execution("a", 1, "7", 1.5), Execution("c", 2, "8", 2.0)]


def test_a_slow_answer_is_a_disturbance_even_when_it_was_a_yes() -> None:
    before = [_req(i, 90 + i * 0.1) for i in range(50)]
    runs = [_run(i, 90 + i * 0.1 + 0.06) for i in range(50)]
    slow = Request("s", 100.0, 109.0, True, 202, tries=2)  # the gateway held it 9 s (Kafka had no quorum)
    v = judge("slow", [*before, slow], [*runs, Execution("s", 1, "w1", 109.05)], fault_at=99.5)
    assert v.recovery_s == 9.0
    assert v.retried == 1


def test_the_baseline_leaves_out_the_warm_up() -> None:
    """Jobs sent while the path was starting waited seconds: they must not make a 5 s stall look normal."""
    warm = [_req(i, 80 + i * 0.1) for i in range(50)]
    warm_runs = [_run(i, 88.0) for i in range(50)]  # all ran once the relay had its lock
    steady = [_req(100 + i, 90 + i * 0.1) for i in range(50)]
    steady_runs = [_run(100 + i, 90 + i * 0.1 + 0.06) for i in range(50)]
    stalled = _req(200, 101)
    history, runs = [*warm, *steady, stalled], [*warm_runs, *steady_runs, _run(200, 106.01)]
    assert judge("warm", history, runs, fault_at=100, baseline_from=90).recovery_s == 5.0
    assert judge("warm", history, runs, fault_at=100).recovery_s == 0.0  # the warm-up hides the stall


def _role(at: str, holder: str, previous: str, role: str) -> str:
    return (
        f"2026-11-24T06:{at}Z [info     ] elector role                   component=jqrelay.elector "
        f"holder={holder} key=jobq/locks/t previous={previous} role={role}"
    )


def test_relay_terms_from_logs_and_their_overlaps() -> None:
    first = "\n".join(
        [
            _role("00:01.000000", "relay-1", "candidate", "leader"),
            _role("00:05.000000", "relay-1", "leader", "lost"),
            _role("00:09.000000", "relay-1", "candidate", "leader"),
            "2026-11-24T06:00:12.000000Z [info     ] relaying component=jqrelay.topic fence=3 holder=relay-1",
        ]
    )  # killed while leading: its last line ends the term
    second = (
        _role("00:06.000000", "relay-2", "candidate", "leader")
        + "\n"
        + _role("00:08.500000", "relay-2", "leader", "stopped")
    )
    terms = relay_terms([first, second])
    assert [(t.holder, round(t.end - t.start, 1)) for t in terms] == [
        ("relay-1", 4.0),
        ("relay-1", 3.0),
        ("relay-2", 2.5),
    ]
    assert overlapping_terms(terms) == []
    late = _role("00:11.000000", "relay-2", "candidate", "leader")  # took over while relay-1 still led
    clash = overlapping_terms(relay_terms([first, late]))
    assert [(a.holder, b.holder) for a, b in clash] == [("relay-1", "relay-2")]


def test_a_delayed_job_run_before_it_was_due_is_early() -> None:
    reqs = [_req(0, 100, delay_s=1.5), _req(1, 100, delay_s=1.5)]
    v = judge("early", reqs, [_run(0, 101.0), _run(1, 101.6)], fault_at=99)
    assert v.early == 1


def test_a_start_in_the_millisecond_the_gateway_rounded_away_is_not_early() -> None:
    """The gateway stamps run_at in whole ms, rounded down: sent at 100.0004 s with 1.5 s of delay, the job
    may be due at 101.500 s; a start at 101.5002 s (before sent + delay, 101.5004) is on time."""
    reqs = [_req(0, 100.0004, delay_s=1.5)]
    assert judge("early", reqs, [_run(0, 101.5002)], fault_at=99).early == 0
    assert judge("early", reqs, [_run(0, 101.4998)], fault_at=99).early == 1


def test_early_is_judged_against_the_run_at_redis_holds_and_the_claims_it_recorded() -> None:
    reqs = [_req(0, 100, delay_s=1.5), _req(1, 100, delay_s=1.5)]
    runs = [_run(0, 101.6), _run(1, 101.7)]
    dues = {"j0": Due(run_at=101_550, claimed_at=101_548), "j1": Due(run_at=101_760, claimed_at=101_699)}
    v = judge("early", reqs, runs, fault_at=99, dues=dues)
    assert (v.early, v.claimed_early) == (1, 2), "j1 started and was claimed before its run_at; j0 claimed"
    assert v.notes["early_ms"] == {"j1": 60.0}
    assert v.notes["claims_stamped_before_run_at"] == {"jobs": 2, "max_ms": 61}


def test_executions_dated_by_the_monotonic_clock_come_back_on_the_wall_clock(tmp_path: Path) -> None:
    line = orjson.dumps({"id": "m", "attempt": 1, "worker": "9", "mono": time.monotonic()}) + b"\n"
    (tmp_path / "exec-9.jsonl").write_bytes(line)
    [e] = read_executions(tmp_path)
    assert abs(e.at - time.time()) < 1.0


def test_a_run_ends_with_its_own_line_and_one_without_an_end_was_cut_short(tmp_path: Path) -> None:
    start = {"id": "x", "attempt": 1, "worker": "5", "run": 1, "mono": 10.0, "lease_ms": 3000, "enq": 9500}
    lines = [
        {**start, "meta": {"excl": "k1"}},
        {**start, "id": "y", "run": 2, "mono": 10.01},
        {"run": 1, "end": 10.05},
    ]
    (tmp_path / "exec-5.jsonl").write_bytes(b"".join(orjson.dumps(doc) + b"\n" for doc in lines))
    x, y = read_executions(tmp_path)
    assert (x.id, x.lease_s, x.enqueued_at, x.excl) == ("x", 3.0, 9.5, "k1")
    assert x.end is not None
    assert abs(x.end - x.at - 0.05) < 0.01, "the end is dated on the wall clock like the start"
    assert (y.id, y.end) == ("y", None)


def test_a_request_refused_on_purpose_is_no_failure_and_must_never_run() -> None:
    """The load's invalid requests (a 400) are not signs of a fault; their jobs are judged never to run."""
    refused = Request("bad", 102.0, 102.01, False, 400)
    reqs = [_req(0, 100), refused]
    v = judge("refused", reqs, [_run(0, 100.1)], fault_at=101.0)
    assert (v.failed_requests, v.recovery_s) == (0, 0.0)
    assert {c.name: c.status for c in v.checks}["unacked-not-run"] == "pass"
    ran = judge(
        "refused", reqs, [_run(0, 100.1), Execution("bad", 1, "w1", 103.0, 103.05, 3.0)], fault_at=101.0
    )
    assert {c.name: c.ids for c in ran.checks}["unacked-not-run"] == ("bad",)
