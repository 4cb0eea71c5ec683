"""dramatiq task graphs (``./run bench graphs``): Redis broker, the Results middleware with the Redis result
backend, GroupCallbacks with the Redis rate-limiter backend (its barrier counts the group down).

* fan-out: ``group([add.message(i) ...])`` (each storing its result) with
  ``add_completion_callback(tsum.message(ids))``; dramatiq's callback receives no results, so ``tsum``
  reads the group's results from the result backend (``backend.get_result`` per message, as a client's
  ``group.get_results()`` does);
* pipeline: ``pipeline([add.message(0), add.message(), ...])`` (dramatiq appends each result to the next
  message's args; only the last step stores its result, for the client).

Workers as in ``run_dramatiq.py``: ``--processes 1 --threads 8`` per worker process. The client blocks on
the final message's result (``get_result(block=True)``: a blocking list pop on the result key)."""

from __future__ import annotations

import os
import time

import common
import dramatiq
import graphs_common
from dramatiq import Message, group, pipeline
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits.backends import RedisBackend as RateLimitBackend
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend as ResultBackend

QUEUE = "graphs"
TIMEOUT_MS = 120_000

broker = RedisBroker(url=common.QUEUE_REDIS)
backend = ResultBackend(url=common.QUEUE_REDIS)
# GroupCallbacks before Results: dramatiq runs the after_process_message hooks in reverse order of the list
# (``Broker.emit_after``), so Results stores a child's result before GroupCallbacks counts the barrier down
# and enqueues ``tsum``; the other way round, the last child's result could still be missing when another
# worker thread ran ``tsum`` (ResultMissing: the fan-out failed, rarely, more often on a loaded machine)
broker.add_middleware(GroupCallbacks(RateLimitBackend(url=common.QUEUE_REDIS)))
broker.add_middleware(Results(backend=backend))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def add(x: int, y: int = 1) -> int:
    return x + y


@dramatiq.actor(queue_name=QUEUE, max_retries=0, store_results=True)
def tsum(ids: list[str]) -> int:
    parts = [
        Message(queue_name=QUEUE, actor_name="add", args=(), kwargs={}, options={}, message_id=i) for i in ids
    ]
    return sum(backend.get_result(m) for m in parts)


@dramatiq.actor(queue_name=QUEUE, max_retries=0, store_results=True)
def pid(_: int = 0) -> int:
    time.sleep(0.005)
    return os.getpid()


def _warm_group(n: int) -> list[int]:
    g = group([pid.message(i) for i in range(n)]).run()
    return list(g.get_results(block=True, timeout=TIMEOUT_MS))


def warm() -> dict:
    return graphs_common.warm(_warm_group)


def fanout(n: float, width: float) -> dict:
    w = int(width)

    def one() -> int:
        parts = [add.message_with_options(args=(i,), store_results=True) for i in range(w)]
        callback = tsum.message([m.message_id for m in parts])
        g = group(parts)
        g.add_completion_callback(callback)
        g.run()
        return callback.get_result(backend=backend, block=True, timeout=TIMEOUT_MS)

    return graphs_common.timed(n, one, w * (w + 1) // 2)


def pipe(n: float, length: float) -> dict:
    steps = int(length)

    def one() -> int:
        messages = [add.message(0), *(add.message() for _ in range(steps - 1))]
        last = messages[-1]
        messages[-1] = last.copy(options={**last.options, "store_results": True})
        return pipeline(messages).run().get_result(block=True, timeout=TIMEOUT_MS)

    return graphs_common.timed(n, one, steps)


def worker() -> None:
    common.exec_dramatiq_worker("run_dramatiq_graphs", QUEUE)


if __name__ == "__main__":
    graphs_common.main({"worker": worker, "warm": warm, "fanout": fanout, "pipeline": pipe})
