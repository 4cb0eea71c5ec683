"""dramatiq (Redis broker): one worker process per run (--processes 1) with 8 threads; delays native."""

from __future__ import annotations

import time

import common
import dramatiq
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=common.QUEUE_REDIS))


@dramatiq.actor(queue_name="bench", max_retries=0)
def noop(due: float) -> None:
    common.record(due)


def enqueue(n: float) -> None:
    for _ in range(int(n)):
        noop.send(0)


def rate(r: float, s: float) -> None:
    common.open_loop(r, s, lambda due: noop.send(due))


def delayed(n: float, d: float) -> None:
    due = time.time() + d
    for _ in range(int(n)):
        noop.send_with_options(args=(due * 1000,), delay=int((due - time.time()) * 1000))


def worker() -> None:
    common.exec_dramatiq_worker("run_dramatiq", "bench")


if __name__ == "__main__":
    common.main({"enqueue": enqueue, "rate": rate, "delayed": delayed, "worker": worker})
