"""The relay's floor: the least that moves a topic's records into Redis and keeps the relay's promise.

``python -m loadtest.floors.relay BOOTSTRAP TOPIC REDIS_URL QUEUE [--group G] [--batch N]``

The promise kept: every record of the topic becomes a pending job of a lease queue
(:mod:`loadtest.floors.lease`) — its key the job's id, its value the payload — and the consumer's offsets
are committed only after Redis accepted the batch, so a crash in between writes the batch again, which
the queue absorbs (``ZADD NX``: at least once, never lost). A batch is up to ``batch`` records (the
consumer's ``consume``), written in one pipelined round trip of two commands. SIGTERM: the batch in hand
is finished and committed, then the process exits.

Left out, against ``jqrelay``: the leader lock in Consul and the fenced writes that keep a deposed relay
from writing (two floors on a topic both write, harmlessly here); the envelope's decode and checks;
routing records to the queue they name; delayed and far-future jobs; priorities, exclusivity and
idempotency keys; per-job records, indexes and stats; lifecycle events; topic and queue rate limits;
back-pressure on Redis's memory; retries of a failed write (the floor exits, the records are read again);
metrics, logs and health endpoints.
"""

from __future__ import annotations

import argparse
import signal
import time

import redis
from confluent_kafka import Consumer

from loadtest.floors.lease import write

__all__ = ["main", "relay"]


def relay(bootstrap: str, topic: str, url: str, queue: str, group: str, batch: int) -> None:
    """Relay until SIGTERM."""
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    client = redis.Redis.from_url(url)
    while not stopping:
        records = consumer.consume(batch, 0.1)
        rows = [(r.key() or b"", r.value() or b"") for r in records if r.error() is None]
        if rows:
            pipe = client.pipeline(transaction=False)
            write(pipe, queue, rows, int(time.time() * 1000))
            pipe.execute()  # raises if Redis refused: nothing is committed, the records come again
        if records:
            consumer.commit(asynchronous=False)
    consumer.close()
    client.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.floors.relay", description=__doc__.split("\n")[0]
    )
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("url")
    parser.add_argument("queue")
    parser.add_argument("--group", default="floor-relay")
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args(argv)
    relay(args.bootstrap, args.topic, args.url, args.queue, args.group, args.batch)


if __name__ == "__main__":
    main()
