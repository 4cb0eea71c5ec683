"""rq: enqueue_many (one pipeline per 1,000), SimpleWorker (no fork per job); scheduler on for delays."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import common
from redis import Redis
from rq import Queue
from rq_tasks import noop

conn = Redis.from_url(common.QUEUE_REDIS)
q = Queue("bench", connection=conn)


def enqueue(n: float) -> None:
    for i in range(0, int(n), 1000):
        jobs = [Queue.prepare_data(noop, args=(0,)) for _ in range(min(1000, int(n) - i))]
        q.enqueue_many(jobs)


def rate(r: float, s: float) -> None:
    common.open_loop(r, s, lambda due: q.enqueue(noop, due))


def delayed(n: float, d: float) -> None:
    due = (time.time() + d) * 1000
    for _ in range(int(n)):
        q.enqueue_in(timedelta(milliseconds=due - time.time() * 1000), noop, due)


def worker() -> None:
    os.execvp(
        sys.executable,
        [
            sys.executable,
            "-m",
            "rq.cli",
            "worker",
            "-w",
            "rq.worker.SimpleWorker",
            "--with-scheduler",
            "-u",
            common.QUEUE_REDIS,
            "-q",
            "bench",
        ],
    )


if __name__ == "__main__":
    common.main({"enqueue": enqueue, "rate": rate, "delayed": delayed, "worker": worker})
