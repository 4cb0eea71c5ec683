"""The gateway's floor: the least an aiohttp handler can do and keep the gateway's promise.

``python -m loadtest.floors.gateway BOOTSTRAP TOPIC PORT``

The promise kept: ``POST /v1/queues/{queue}/jobs`` answers 202 only once Kafka has the job — the body is
parsed as JSON (400 if it is not), each job (the body, or each item of its ``jobs`` list) is produced as
one record, keyed by a fresh random id, by an idempotent producer with acks=all, and the answer waits for
every record's delivery report (503 if one failed). The producer has the gateway's settings (linger 2 ms,
lz4); one thread serves its delivery reports and hands each to the event loop, as jqruntime's does.

Left out, against ``kafkagate``: authentication (bearer tokens, scopes), the envelope (checking kind,
arguments and options; ids, priorities, delays, exclusivity and idempotency keys chosen by the client),
routing a queue to its topic, quotas and rate limits, the queue's configuration, request size limits,
per-job errors in a batch, tracing, metrics, logs, health endpoints, several processes on one port.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import threading

import orjson
from aiohttp import web
from confluent_kafka import KafkaError, Message, Producer

__all__ = ["app", "main"]


def app(bootstrap: str, topic: str) -> web.Application:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "compression.type": "lz4",
        }
    )

    def serve_reports() -> None:
        while True:
            producer.poll(0.05)

    threading.Thread(target=serve_reports, name="kafka-delivery", daemon=True).start()

    async def enqueue(request: web.Request) -> web.Response:
        try:
            doc = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return web.json_response({"error": "not JSON"}, status=400)
        jobs = doc["jobs"] if isinstance(doc, dict) and isinstance(doc.get("jobs"), list) else [doc]
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        ids, left, failed = [secrets.token_hex(8) for _ in jobs], [len(jobs)], []

        def delivered(err: KafkaError | None, _msg: Message) -> None:  # on the delivery thread
            failed.extend([err] if err is not None else [])
            left[0] -= 1
            if not left[0]:
                loop.call_soon_threadsafe(done.set_result, None)

        for job_id, job in zip(ids, jobs, strict=True):
            producer.produce(topic, orjson.dumps(job), job_id.encode(), on_delivery=delivered)
        await done
        if failed:
            return web.json_response({"error": str(failed[0])}, status=503)
        return web.Response(status=202, body=orjson.dumps({"jobs": [{"id": i} for i in ids]}))

    application = web.Application()
    application.router.add_post("/v1/queues/{queue}/jobs", enqueue)
    application.router.add_get("/readyz", lambda _request: _ok())
    return application


async def _ok() -> web.Response:
    return web.Response(text="ok")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.floors.gateway", description=__doc__.split("\n")[0]
    )
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("port", type=int)
    args = parser.parse_args(argv)
    web.run_app(
        app(args.bootstrap, args.topic), host="127.0.0.1", port=args.port, print=None, access_log=None
    )


if __name__ == "__main__":
    main()
