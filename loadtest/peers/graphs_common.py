"""What the task-graph runners share (``./run bench graphs``; runs inside each peer's own virtualenv).

``python run_<peer>_graphs.py ROLE [numbers...]``:

* ``worker``: exec the peer's worker CLI (one process; the bench starts two);
* ``warm``: run groups of ``pid`` tasks until both worker processes answered (returns the pids);
* ``fanout N WIDTH``: N graphs, one at a time: WIDTH ``add(i)`` in parallel, then a callback fed the list
  of their results (``tsum``); each graph's time from submit until the client holds the callback's result;
* ``pipeline N LENGTH``: N chains of LENGTH ``add`` steps, one at a time, each step fed the previous
  result (``add(0)`` then ``add(prev)``, so the last result is LENGTH).

The last line printed is one JSON object: ``{"times": [seconds per graph], ...}``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

WARM_TASKS = 100
WARM_TIMEOUT_S = 60.0


def timed(n: float, one: Callable[[], Any], expected: Any) -> dict[str, Any]:
    """Run ``one()`` (submit a graph, block until its final result) ``n`` times, one after the other."""
    times = []
    for i in range(int(n)):
        started = time.perf_counter()
        got = one()
        times.append(time.perf_counter() - started)
        if got != expected:
            raise SystemExit(f"graph {i}: result {got!r}, expected {expected!r}")
    return {"times": times}


def warm(run_group: Callable[[int], list[int]]) -> dict[str, Any]:
    """Run groups of ``pid`` tasks until two distinct worker pids answered (both workers are up)."""
    deadline = time.monotonic() + WARM_TIMEOUT_S
    seen: set[int] = set()
    rounds = 0
    while len(seen) < 2:
        if time.monotonic() > deadline:
            raise SystemExit(f"only worker pids {sorted(seen)} answered in {WARM_TIMEOUT_S:g}s")
        seen |= set(run_group(WARM_TASKS))
        rounds += 1
    return {"pids": sorted(seen), "rounds": rounds}


def main(roles: dict[str, Callable[..., dict[str, Any] | None]]) -> None:
    role, *args = sys.argv[1:]
    if role not in roles:
        print(f"unsupported: {role}")
        sys.exit(3)
    out = roles[role](*(float(a) for a in args))
    print(json.dumps(out or {}))
