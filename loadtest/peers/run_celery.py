"""celery (Redis broker): results ignored, prefetch multiplier 4 (default), acks early (default),
prefork pool with 2 processes per worker; delays as countdown/ETA (held by the worker)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import common
from celery import Celery

app = Celery("run_celery", broker=common.QUEUE_REDIS)
app.conf.update(
    task_ignore_result=True, worker_hijack_root_logger=False, broker_connection_retry_on_startup=True
)


@app.task(name="noop")
def noop(due: float) -> None:
    common.record(due)


def enqueue(n: float) -> None:
    for _ in range(int(n)):
        noop.delay(0)


def rate(r: float, s: float) -> None:
    common.open_loop(r, s, lambda due: noop.delay(due))


def delayed(n: float, d: float) -> None:
    due = time.time() + d
    for _ in range(int(n)):
        noop.apply_async(args=(due * 1000,), eta=datetime.fromtimestamp(due, UTC))


def worker() -> None:
    common.exec_celery_worker("run_celery", "w")


if __name__ == "__main__":
    common.main({"enqueue": enqueue, "rate": rate, "delayed": delayed, "worker": worker})
