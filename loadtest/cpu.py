"""CPU time as the benchmarks count it: a process's (``/proc/<pid>/stat``), a process tree's, and Redis's
(``INFO cpu``, which also answers for a Redis in a container).

Every figure is user + system seconds since the process started; a benchmark reads them before and
after what it measures and divides the difference by the work done.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import redis

__all__ = ["TICK", "cpu_s", "redis_cpu_s", "run_s", "thread_cpu_s", "tree_cpu_s"]

TICK = os.sysconf("SC_CLK_TCK")
"""Clock ticks per second: the unit of the CPU times in ``/proc/<pid>/stat``."""


def _stat(pid: int, tid: int | None = None) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` (of its thread ``tid``: ``/proc/<pid>/task/<tid>/stat``) after the
    command name (``fields[11]`` is utime); OSError when the process or thread is gone."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    return Path(path).read_text().rsplit(")", 1)[1].split()


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far, all its threads (0 when unknown or gone)."""
    if pid is None:
        return 0.0
    try:
        fields = _stat(pid)
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu_s(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of one thread of process ``pid`` so far (``tid`` None: its main thread, where
    an asyncio service runs its event loop); 0 when gone. What a process's other threads (librdkafka's,
    a delivery-report thread) spent is ``cpu_s(pid)`` minus the threads counted apart."""
    try:
        fields = _stat(pid, pid if tid is None else tid)
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def run_s(pid: int) -> float:
    """The seconds process ``pid``'s live threads have run on a CPU so far, to the nanosecond (the first
    field of each ``/proc/<pid>/task/<tid>/schedstat``): :func:`cpu_s` counts in clock ticks (10 ms), too
    coarse for a process that lives 0.3 s. A thread that ended is not counted (0 when the process is
    gone)."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except OSError:  # the thread ended meanwhile
                continue
    except OSError:
        return 0.0
    return total / 1e9


def tree_cpu_s(pids: Sequence[int]) -> float:
    """CPU seconds (user + system, and of reaped children) of these processes and every descendant."""
    total, todo = 0.0, list(pids)
    while todo:
        pid = todo.pop()
        try:
            fields = _stat(pid)
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # gone meanwhile
            continue
        total += sum(int(f) for f in fields[11:15]) / TICK
    return total


def redis_cpu_s(client: redis.Redis, *, children: bool = False) -> float:
    """CPU seconds of the Redis server (``INFO cpu``); ``children``: its forks' too (AOF rewrites)."""
    info = client.info("cpu")
    keys = ["used_cpu_user", "used_cpu_sys"]
    if children:
        keys += ["used_cpu_user_children", "used_cpu_sys_children"]
    return sum(float(info.get(key, 0.0)) for key in keys)
