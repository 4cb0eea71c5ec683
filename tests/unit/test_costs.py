"""The benchmarks' cost model helpers (pure, plus this process's own /proc): collapsed stacks summarised
by self and total time, frame names, CPU clocks over a window, the cost table."""

from __future__ import annotations

import os
import threading
import time

import pytest

from loadtest.costs import (
    CpuMeter,
    Profile,
    cost_table,
    frame_key,
    parse_collapsed,
    per_unit_us,
    process_clock,
    profile_section,
    summarise,
)
from loadtest.cpu import cpu_s, thread_cpu_s

RAW = """\
<module> (kafkagate/__main__.py:4);run (asyncio/runners.py:190);_run_once (asyncio/base_events.py:1922);\
handle (kafkagate/app.py:88);dumps (orjson.py:1) 30
<module> (kafkagate/__main__.py:4);run (asyncio/runners.py:190);_run_once (asyncio/base_events.py:1910);\
select (selectors.py:468) 10
<module> (kafkagate/__main__.py:4);run (asyncio/runners.py:190);_run_once (asyncio/base_events.py:1922);\
handle (kafkagate/app.py:91) 40
Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982);poll (jqruntime/kafka.py:12) 20
"""


def test_frames_become_file_and_function_with_line_numbers_merged() -> None:
    assert frame_key("handle (kafkagate/app.py:88)") == "kafkagate/app.py:handle"
    assert frame_key("Thread.run (threading.py:982)") == "threading.py:Thread.run"
    assert frame_key("<lambda> (x.py)") == "x.py:<lambda>"  # --nolineno
    assert frame_key("thread (0x7F3A)") == "thread (0x7F3A)"  # not a code frame: kept whole
    assert frame_key("weird") == "weird"


def test_collapsed_lines_are_frames_outermost_first_and_a_count() -> None:
    stacks = parse_collapsed(RAW + "\nnot a stack line\n")
    assert len(stacks) == 4
    frames, count = stacks[-1]
    assert frames[0] == "Thread._bootstrap (threading.py:1002)"
    assert count == 20


def test_self_time_is_the_top_frame_and_total_time_counts_a_function_once_per_stack() -> None:
    summary = summarise(RAW, top=3)
    assert summary.samples == 100
    top = {row.frame: row for row in summary.top}
    assert [row.frame for row in summary.top] == [
        "kafkagate/app.py:handle",  # 40 on top (line 91); line 88 was not on top
        "orjson.py:dumps",
        "jqruntime/kafka.py:poll",
    ]
    assert top["kafkagate/app.py:handle"].self_share == pytest.approx(0.40)
    assert top["kafkagate/app.py:handle"].total_share == pytest.approx(0.70)  # both lines, once each
    assert top["orjson.py:dumps"].total_share == pytest.approx(0.30)
    assert summarise("").samples == 0


def test_profile_section_tells_samples_cpu_and_links_the_raw_stacks() -> None:
    ok = Profile("gateway", 123, 10.0, 250, raw=RAW, cpu_s=0.5)
    failed = Profile("relay", 124, 10.0, 250, error="py-spy exited with 1: Permission denied")
    text = profile_section([ok, failed], top=2, files={"gateway": "profile-gateway.txt"})
    assert "### gateway (pid 123)" in text
    assert "100 samples" in text
    assert "[profile-gateway.txt](profile-gateway.txt)" in text
    assert "| 40.0% | 70.0% | `kafkagate/app.py:handle` |" in text
    assert "Not recorded: py-spy exited with 1" in text


def test_cpu_meter_reads_clocks_and_costs_divide_by_the_work() -> None:
    ticks = iter([1.0, 3.5])
    meter = CpuMeter({"fake": lambda: next(ticks), "me": process_clock(os.getpid())})
    before = meter.read()
    sum(i * i for i in range(200_000))  # some CPU of this process
    after = meter.read()
    used = CpuMeter.used(before, after)
    assert used["fake"] == pytest.approx(2.5)
    assert used["me"] >= 0
    assert per_unit_us({"fake": 2.5}, 1000) == {"fake": pytest.approx(2500.0)}
    assert per_unit_us({"fake": 2.5}, 0) == {}


def test_a_thread_clock_counts_that_thread_alone() -> None:
    """The gateway hop splits its process's CPU: the event loop's thread (the main one) apart from the
    threads librdkafka and the delivery reports run on."""
    pid = os.getpid()
    main_before, process_before = thread_cpu_s(pid), cpu_s(pid)
    own: list[float] = []

    def spin() -> None:  # CPU of this thread only, while the main thread waits in join()
        started = time.thread_time()
        while time.thread_time() - started < 0.3:
            pass
        own.append(thread_cpu_s(pid, threading.get_native_id()))

    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    assert own[0] >= 0.2  # the spinning thread's clock
    assert cpu_s(pid) - process_before >= 0.2  # the process counts it
    assert thread_cpu_s(pid) - main_before < 0.1  # its main thread does not
    assert thread_cpu_s(pid, 999_999_999) == 0.0  # no such thread


def test_cost_table_shares_are_of_the_total() -> None:
    lines = cost_table(
        {"gateway": 30.0, "redis": 70.0, "system total": 100.0, "generator": 50.0}, "system total"
    )
    assert lines[0] == "| process | CPU µs/job | share of system total |"
    assert "| gateway | 30 | 30% |" in lines
    assert "| system total | 100 |  |" in lines
    assert "| generator | 50 | 50% |" in lines
