"""huey (RedisHuey, blocking BRPOP reads): one consumer process per run with 8 worker threads, polling
delay 0.01-0.1 s (-d/-m), scheduler tick 1 s (-s, its minimum: whole seconds); delays native."""

from __future__ import annotations

import os
import sys
import time

import common
from huey_tasks import noop


def enqueue(n: float) -> None:
    for _ in range(int(n)):
        noop(0)


def rate(r: float, s: float) -> None:
    common.open_loop(r, s, lambda due: noop(due))


def delayed(n: float, d: float) -> None:
    due = time.time() + d
    for _ in range(int(n)):
        noop.schedule(args=(due * 1000,), delay=due - time.time())


def worker() -> None:
    consumer = os.path.join(os.path.dirname(sys.executable), "huey_consumer")
    os.execv(
        consumer,
        [
            consumer,
            "huey_tasks.huey",
            "-w",
            str(common.slots(8)),
            "-k",
            "thread",
            "-s",
            "1",
            "-d",
            "0.01",
            "-m",
            "0.1",
            "-q",
        ],
    )


if __name__ == "__main__":
    common.main({"enqueue": enqueue, "rate": rate, "delayed": delayed, "worker": worker})
