"""celery task graphs (``./run bench graphs``): Redis broker and Redis result backend (a chord needs one),
``chord(group(add.s(i) ...), tsum.s())`` and ``chain(add.s(0), add.s(), ...)`` whose intermediate steps
ignore their results (the chain passes them in the next message; the last step stores its result for the
client). Workers as in ``run_celery.py``: prefork, concurrency 1 per worker process, prefetch multiplier 4
and early acks (the defaults), gossip, mingle and heartbeat off. The client waits with
``AsyncResult.get()`` (the Redis backend pushes results through pub/sub)."""

from __future__ import annotations

import os
import time

import common
import graphs_common
from celery import Celery, chain, chord, group

app = Celery("run_celery_graphs", broker=common.QUEUE_REDIS, backend=common.QUEUE_REDIS)
app.conf.update(
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    result_expires=600,
)
TIMEOUT_S = 120


@app.task(name="add")
def add(x: int, y: int = 1) -> int:
    return x + y


@app.task(name="tsum")
def tsum(values: list[int]) -> int:
    return sum(values)


@app.task(name="pid")
def pid(_: int = 0) -> int:
    time.sleep(0.005)
    return os.getpid()


def _warm_group(n: int) -> list[int]:
    return group(pid.s(i) for i in range(n)).apply_async().get(timeout=TIMEOUT_S)


def warm() -> dict:
    return graphs_common.warm(_warm_group)


def fanout(n: float, width: float) -> dict:
    w = int(width)

    def one() -> int:
        return chord(group(add.s(i) for i in range(w)), tsum.s()).apply_async().get(timeout=TIMEOUT_S)

    return graphs_common.timed(n, one, w * (w + 1) // 2)


def pipeline(n: float, length: float) -> dict:
    steps = int(length)

    def one() -> int:
        middle = [add.s().set(ignore_result=True) for _ in range(steps - 2)]
        first = add.s(0).set(ignore_result=steps > 1)
        flow = chain(first, *middle, add.s()) if steps > 1 else chain(first)
        return flow.apply_async().get(timeout=TIMEOUT_S)

    return graphs_common.timed(n, one, steps)


def worker() -> None:
    common.exec_celery_worker("run_celery_graphs", "g")


if __name__ == "__main__":
    graphs_common.main({"worker": worker, "warm": warm, "fanout": fanout, "pipeline": pipeline})
