"""A fault that did nothing fails its scenario: the bite checks, run against no-op faults (a kill that
signals nothing, a cut proxy that still listens, a slow link that is fast, a clock that is right, a
leader that stayed), see nothing and fail the ``fault-took-effect`` check with the reason."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from loadtest.faults.bites import (
    errors_logged,
    fault_took_effect,
    killed,
    moved,
    no_space,
    refused,
    replaced,
    roundtrip_ms,
    skew_seen_s,
    skewed,
    slowed,
)
from loadtest.faults.checker import judge
from loadtest.faults.history import Execution, Request
from loadtest.faults.run import Drill


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A local server that answers every request at once (the link a no-op cut or slow leaves alone)."""
    srv = socket.create_server(("127.0.0.1", 0))
    yield srv
    srv.close()


async def noop(d: Drill) -> None:
    """A fault function that forgot its fault."""


async def test_a_fault_that_records_no_evidence_fails_its_scenario() -> None:
    drill = Drill(cast(Any, None), cast(Any, None), None)
    await noop(drill)
    reqs = [Request("j1", 100, 100.01, True, 202)]
    v = judge("noop", reqs, [Execution("j1", 1, "w", 100.1, 100.15)], fault_at=100, notes=drill.notes)
    bite = v.check("fault-took-effect")
    assert bite.failed
    assert bite.detail["why"] == "the fault recorded no evidence"


def test_a_kill_that_killed_nothing_is_not_evidence(sleeper: subprocess.Popen[bytes]) -> None:
    os.kill(sleeper.pid, 0)  # the no-op "kill"
    assert not killed(sleeper.pid)
    assert not replaced(sleeper.pid, sleeper.pid + 1)
    drill = Drill(cast(Any, None), cast(Any, None), None)
    drill.evidence("worker-1 killed and replaced", replaced(sleeper.pid, 4242), old_pid=sleeper.pid)
    c = fault_took_effect(drill.notes["bite"])
    assert (c.status, c.ids) == ("fail", ("worker-1 killed and replaced",))
    sleeper.send_signal(signal.SIGKILL)
    sleeper.wait()
    assert killed(sleeper.pid)
    assert replaced(sleeper.pid, 4242)


def test_a_cut_that_left_the_link_up_and_a_slow_link_that_is_fast_are_caught(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    assert not refused(port), "the proxy still listens: the cut did nothing"

    def answer() -> None:
        while True:
            conn, _ = listener.accept()
            with conn:
                if conn.recv(64):  # the probe above connected and left: wait for the round trip
                    conn.sendall(b"+PONG\r\n")
                    return

    t = threading.Thread(target=answer)
    t.start()
    took = roundtrip_ms(port)
    t.join()
    assert not slowed(took), f"an unslowed local round trip took {took:.1f} ms"
    listener.close()
    assert refused(port)


def test_a_clock_that_was_not_skewed_and_a_leader_that_stayed_are_caught(tmp_path: Path) -> None:
    log = tmp_path / "worker-2.log"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    log.write_text(f"{stamp} [info     ] worker started\n")
    seen = skew_seen_s(log.read_text(), log.stat().st_mtime)
    assert seen is not None
    assert abs(seen) < 2
    assert not skewed(seen, -300.0)
    assert skewed(seen - 300, -300.0)
    assert not moved("kafka-2", "kafka-2")
    assert not moved("kafka-2", "kafka--1")
    assert moved("kafka-2", "kafka-3")
    assert not no_space(None)
    assert no_space(28)


def test_problems_logged_during_a_cut_are_counted_in_either_log_format() -> None:
    text = (
        "2026-11-28T10:00:01.000000Z [warning  ] redis unreachable\n"
        "2026-11-28T10:00:02.000000Z [info     ] still trying\n"
        "2026-11-28T10:09:00.000000Z [error    ] later: outside the window\n"
        '{"event": "x", "level": "error", "timestamp": "2026-11-28T10:00:03.000000Z"}\n'
    )
    start = 1795860000.0  # 2026-11-28T10:00:00Z
    assert errors_logged([text], start, start + 10) == 2
    assert errors_logged([text], start + 20, start + 30) == 0


def test_librdkafka_problems_on_stderr_count_too() -> None:
    text = "%3|1795860001.500|FAIL|rdkafka#producer-1| refused\n%7|1795860002.0|DEBUG|x\n"
    assert errors_logged([text], 1795860000.0, 1795860010.0) == 1


def test_a_cut_that_broke_no_live_connection_is_not_taken_for_one() -> None:
    from loadtest.faults.bites import severed

    lines = [
        '{"level":"info","name":"relay-redis","time":"2026-11-28T10:55:30Z","message":"Terminated proxy"}',
        '{"level":"warn","name":"relay-redis","bytes":445922,"time":"2026-11-28T10:55:30Z","error":"x"}',
        '{"level":"warn","name":"relay-redis","bytes":10,"time":"2026-11-28T10:56:06Z","error":"x"}',
        '{"level":"warn","name":"other-redis","bytes":10,"time":"2026-11-28T10:55:31Z","error":"x"}',
        "not json",
    ]
    log = "\n".join(lines)
    cut = datetime(2026, 11, 28, 10, 55, 30, 400_000, tzinfo=UTC).timestamp()
    assert severed(log, "relay-redis", cut, cut + 5) == 1
    assert severed(log, "relay-redis", cut + 10, cut + 15) == 0, "a break after the heal is not the cut's"
    assert severed("\n".join(lines[:1]), "relay-redis", cut, cut + 5) == 0, "a cut of an idle link"
