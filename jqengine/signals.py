"""What users feel of a queue, read at O(1) per queue for the metrics: its depth per state, how long the
job at the head of ``ready`` has waited since it was due, whether it is paused, and its lifetime
outcome counters. The scheduler that keeps a queue samples these (``jqsched.service``) and exports them
(``jobq_queue_depth_jobs``, ``jobq_queue_oldest_pending_age_seconds``, ``jobq_queue_paused``,
``jobq_queue_attempts_total``).

Two pipelined round trips for any number of queues: ZCARDs, ``ZRANGE ready 0 0``, the config's
``paused`` and the ``stats`` counters of every queue, then the ``enqueued_at`` and ``run_at`` of each
queue's head job. No scan: a queue of millions costs what an empty one does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from jqengine.keys import QueueKeys
from jqengine.redisconn import RedisClient, text

__all__ = ["OUTCOMES", "QueueSignals", "queue_signals"]

OUTCOMES = ("completed", "retried", "errored", "canceled")
"""The queue's ``stats`` counters of ended attempts: completed; retried (failed, runs again); errored
(failed for good: the dead-letter list); canceled. Every consumer's (Python pools, HTTP workers, the
dispatcher): the scripts count them, whoever called."""


@dataclass(frozen=True, slots=True)
class QueueSignals:
    queue: str
    pending: int
    delayed: int
    running: int
    dead: int
    oldest_pending_age_ms: int
    """Now minus when the head of ``ready`` became due (its ``run_at``, else its ``enqueued_at``); 0 when
    nothing is pending. In a FIFO queue (the default priority) the head is the oldest pending job; with
    priorities it is the next one to run, so a starved low-priority job is not seen here."""
    paused: bool
    outcomes: dict[str, int] = field(default_factory=dict)
    """:data:`OUTCOMES` → lifetime count (Redis's; it restarts at 0 when the queue is made anew)."""


async def queue_signals(client: RedisClient, queues: Sequence[str], now_ms: int) -> list[QueueSignals]:
    """The signals of ``queues`` at ``now_ms`` (Redis's clock: ``enqueued_at`` is stamped by it)."""
    if not queues:
        return []
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        k = QueueKeys(queue)
        pipe.zcard(k.ready)
        pipe.zcard(k.delayed)
        pipe.zcard(k.running)
        pipe.zcard(k.dead)
        pipe.zrange(k.ready, 0, 0)
        pipe.hget(k.config, "paused")
        pipe.hmget(k.stats, list(OUTCOMES))
    res = await pipe.execute()
    per = 7
    heads = {q: text(res[i * per + 4][0]) for i, q in enumerate(queues) if res[i * per + 4]}
    due: dict[str, int] = {}
    if heads:
        pipe = client.pipeline(transaction=False)
        for queue, job_id in heads.items():
            pipe.hmget(QueueKeys(queue).job(job_id), ["enqueued_at", "run_at"])
        for queue, (enqueued, run_at) in zip(heads, await pipe.execute(), strict=True):
            stamps = [int(v) for v in (enqueued, run_at) if v not in (None, b"", "")]
            if stamps:  # a head whose record is gone (GC between the reads) counts as nothing pending
                due[queue] = max(stamps)
    out = []
    for i, queue in enumerate(queues):
        r = res[i * per : (i + 1) * per]
        out.append(
            QueueSignals(
                queue=queue,
                pending=int(r[0]),
                delayed=int(r[1]),
                running=int(r[2]),
                dead=int(r[3]),
                oldest_pending_age_ms=max(0, now_ms - due[queue]) if queue in due else 0,
                paused=r[5] is not None and text(r[5]) == "1",
                outcomes={name: int(v or 0) for name, v in zip(OUTCOMES, r[6], strict=True)},
            )
        )
    return out
