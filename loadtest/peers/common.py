"""What every peer runner shares (runs inside each peer's own virtualenv: stdlib + redis only).

The no-op task of every system calls :func:`record`, which notes the job's start latency (start −
due, when the job carries a due time) and counts it in memory; a background thread per process sends
both to a separate measurement Redis every 10 ms (RPUSH of the latencies, INCRBY of the count). The
task itself makes no network call: a blocking round trip inside the task would stall an asyncio worker's
whole event loop (arq, saq, taskiq, jobq) while a thread-based one overlaps it, so the benchmark would
measure the measurement. Counts reach Redis at most ~10 ms late, the same for every system.

One shape for every system (``BENCH_SLOTS``, ``BENCH_ROUNDTRIP``; ``./run bench peers``' first table): each
runner gives its worker process ``slots(best)`` concurrent jobs — ``BENCH_SLOTS`` when set, else the
system's own best setting — and with ``BENCH_ROUNDTRIP=1`` the task counts itself with one Redis round
trip of its own (``INCR done`` on the measurement Redis): a blocking call in a thread-based worker
(:func:`record`), an awaited one in an asyncio worker (:func:`arecord`), so that no event loop stalls.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable

import redis
import redis.asyncio as aioredis

QUEUE_REDIS = os.environ.get("QUEUE_REDIS", "redis://127.0.0.1:6379/0")
FLUSH_EVERY_S = 0.01
SLOTS = int(os.environ.get("BENCH_SLOTS") or 0)
ROUNDTRIP = os.environ.get("BENCH_ROUNDTRIP") == "1"
_lock = threading.Lock()
_local = threading.local()
_aclients: dict[tuple[int, int], aioredis.Redis] = {}
_latencies: list[float] = []
_done = 0
_flusher_pid = 0


def slots(best: int) -> int:
    """A worker process's concurrent jobs: the one shape's ``BENCH_SLOTS`` when set, else ``best``."""
    return SLOTS or best


def record(due_ms: float) -> None:
    """The task body: start latency (ms after the job was due) when ``due_ms``, then count the job (with
    ``BENCH_ROUNDTRIP``: a blocking ``INCR`` of its own)."""
    global _done
    started = time.time() * 1000
    with _lock:
        if due_ms:
            _latencies.append(started - due_ms)
        _done += 0 if ROUNDTRIP else 1
    if _flusher_pid != os.getpid():  # first job in this process (also after a fork)
        _start_flusher()
    if ROUNDTRIP:
        client = getattr(_local, "client", None)
        if client is None or getattr(_local, "pid", 0) != os.getpid():
            client = _local.client = redis.Redis.from_url(os.environ["METRIC_REDIS"])
            _local.pid = os.getpid()
        client.incr("done")


async def arecord(due_ms: float) -> None:
    """:func:`record` for an asyncio task: with ``BENCH_ROUNDTRIP`` the ``INCR`` is awaited."""
    if not ROUNDTRIP:
        record(due_ms)
        return
    loop = asyncio.get_running_loop()
    key = (os.getpid(), id(loop))
    client = _aclients.get(key)
    if client is None:
        client = _aclients[key] = aioredis.Redis.from_url(os.environ["METRIC_REDIS"])
    with _lock:
        if due_ms:
            _latencies.append(time.time() * 1000 - due_ms)
    if _flusher_pid != os.getpid():
        _start_flusher()
    await client.incr("done")


def _start_flusher() -> None:
    global _flusher_pid
    with _lock:
        if _flusher_pid == os.getpid():
            return
        _flusher_pid = os.getpid()
    threading.Thread(target=_flush_forever, name="bench-metrics", daemon=True).start()


def _flush_forever() -> None:
    global _done, _latencies
    m = redis.Redis.from_url(os.environ["METRIC_REDIS"])
    while True:
        time.sleep(FLUSH_EVERY_S)
        with _lock:
            lat, n = _latencies, _done
            _latencies, _done = [], 0
        if not n and not lat:
            continue
        pipe = m.pipeline(transaction=False)
        if lat:
            pipe.rpush("lat", *lat)
        if n:
            pipe.incrby("done", n)
        pipe.execute()


def open_loop(rate: float, seconds: float, send: Callable[[float], None]) -> None:
    """Call ``send(due_ms)`` for job *i* at ``t0 + i / rate`` (a late send keeps its due time)."""
    t0 = time.time() + 0.2
    for i in range(int(rate * seconds)):
        due = t0 + i / rate
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        send(due * 1000)


async def async_open_loop(rate: float, seconds: float, send: Callable[[float], Awaitable[object]]) -> None:
    """:func:`open_loop` for an asyncio client. The wait is a blocking ``time.sleep``, as in the sync
    runners: ``asyncio.sleep`` wakes up to a millisecond late (epoll's timeout is whole milliseconds),
    which would be counted as the system's start latency."""
    t0 = time.time() + 0.2
    for i in range(int(rate * seconds)):
        due = t0 + i / rate
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)  # noqa: ASYNC251 (deliberate: see the docstring)
        await send(due * 1000)


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


def exec_celery_worker(app: str, name: str) -> None:
    """Become one Celery worker process of ``app`` (no gossip, mingle, heartbeat): at its best prefork with
    one child; in the one shape a thread pool of ``BENCH_SLOTS`` (the slots in the worker process itself)."""
    pool = (
        ["--concurrency", str(SLOTS), "--pool", "threads"]
        if SLOTS
        else ["--concurrency", "1", "--pool", "prefork"]
    )
    argv = [sys.executable, "-m", "celery", "-A", app, "worker", *pool]
    argv += ["--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    os.execvp(sys.executable, [*argv, "-n", f"{name}{os.getpid()}@%h"])


def exec_dramatiq_worker(module: str, queue: str) -> None:
    """Become one Dramatiq worker process of ``module`` (``slots(8)`` threads) consuming ``queue``."""
    argv = [sys.executable, "-m", "dramatiq", module, "--processes", "1", "--threads", str(slots(8))]
    argv += ["--queues", queue]
    os.execvp(sys.executable, argv)
