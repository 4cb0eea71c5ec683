"""What every peer runner shares (runs inside each peer's own virtualenv: stdlib + redis only).

The no-op task of every system calls :func:`record`: one RPUSH of its start latency when the job
carries a due time, then one INCR — the same two commands for every peer and for jobq, sent to a
separate measurement Redis so measuring does not load the queue's Redis.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import redis

QUEUE_REDIS = os.environ.get("QUEUE_REDIS", "redis://127.0.0.1:6379/0")
_metrics: redis.Redis | None = None


def metrics() -> redis.Redis:
    global _metrics
    if _metrics is None:
        _metrics = redis.Redis.from_url(os.environ["METRIC_REDIS"])
    return _metrics


def record(due_ms: float) -> None:
    """The task body: start latency (ms after the job was due) when ``due_ms``, then count the job."""
    m = metrics()
    if due_ms:
        m.rpush("lat", time.time() * 1000 - due_ms)
    m.incr("done")


def open_loop(rate: float, seconds: float, send: Callable[[float], None]) -> None:
    """Call ``send(due_ms)`` for job *i* at ``t0 + i / rate`` (a late send keeps its due time)."""
    t0 = time.time() + 0.2
    for i in range(int(rate * seconds)):
        due = t0 + i / rate
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        send(due * 1000)


def main(roles: dict[str, Callable[..., None]]) -> None:
    """``python run_X.py ROLE [numbers...]``: enqueue N | rate R S | delayed N D | worker. Prints the
    role's own elapsed seconds (interpreter start-up and imports excluded) as the last line."""
    role, *args = sys.argv[1:]
    if role not in roles:
        print(f"unsupported: {role}")
        sys.exit(3)
    started = time.perf_counter()
    roles[role](*(float(a) for a in args))
    print(f"elapsed {time.perf_counter() - started:.6f}")
