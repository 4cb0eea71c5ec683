"""``jobq replay`` against the real Kafka and Redis: ranges by offset and by time, dedup with and
without ``--force`` (live jobs never doubled), the retry topic after a repair, dry runs, bad input."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from jobq.cli import app
from jqcore.envelope import now_ms
from jqengine import Engine
from jqengine.keys import QueueKeys
from jqruntime.kafka import AsyncProducer, Record
from jqruntime.stores import audit
from jqstack.manager import Endpoints


@pytest.fixture
def replay(endpoints: Endpoints) -> Callable[..., Any]:
    """Run ``jobq replay ARGS --json`` in a thread (it runs its own event loop); (exit code, output)."""
    env = {
        "JOBQ_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "JOBQ_REDIS_URL": endpoints.redis_url or "",
        "COLUMNS": "300",  # error boxes on one line
    }

    async def run(*args: str) -> tuple[int, Any]:
        result = await asyncio.to_thread(CliRunner().invoke, app, ["replay", *args], env=env)
        if result.exit_code == 0 and "--json" in args:
            return 0, orjson.loads(result.stdout)
        return result.exit_code, result.output

    return run


MakeTopic = Callable[..., str]
Produce = Callable[..., Awaitable[list[str]]]
Pending = Callable[[str], Awaitable[int]]
Eventually = Callable[..., Awaitable[Any]]


def totals(doc: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in doc["partitions"]:
        for key, value in part.items():
            if key not in ("partition", "start", "end"):
                out[key] = out.get(key, 0) + value
    return out


async def test_a_range_by_offset_is_written_once_and_the_relay_offsets_stay_untouched(
    prefix: str,
    make_topic: MakeTopic,
    produce_jobs: Produce,
    pending: Pending,
    engine: Engine,
    replay: Any,
    redis: Any,
) -> None:
    topic, queue = make_topic("jobs", partitions=1), f"{prefix}.q"
    await produce_jobs(topic, queue, [f"j{i}" for i in range(30)])
    code, doc = await replay("--topic", topic, "--from", "10", "--to", "20", "--json")
    assert code == 0, doc
    assert doc["partitions"] == [
        {**doc["partitions"][0], "partition": 0, "start": 10, "end": 20, "read": 10, "written": 10}
    ]
    assert await pending(queue) == 10
    assert await engine.reads.get_job(queue, "j10") is not None
    assert await engine.reads.get_job(queue, "j20") is None, "--to is exclusive"
    code, doc = await replay("--topic", topic, "--from", "0", "--json")  # to the end
    assert code == 0, doc
    assert (totals(doc)["written"], totals(doc)["duplicate"]) == (20, 10)
    # each replay is on the audit trail (who: JOBQ_AUDIT_WHO, else the OS user), with what it wrote
    mine = [e for e in await audit.read(redis, 200) if e.action == "cli.replay" and topic in e.target]
    assert [(e.target, e.count, e.outcome) for e in mine] == [
        (f"{topic} from 0", 20, "ok"),
        (f"{topic} from 10 to 20", 10, "ok"),
    ]


async def test_a_range_by_time_starts_at_the_first_record_at_or_after_it(
    prefix: str,
    make_topic: MakeTopic,
    produce_jobs: Produce,
    pending: Pending,
    engine: Engine,
    replay: Any,
    eventually: Eventually,
) -> None:
    topic, queue = make_topic("jobs", partitions=2), f"{prefix}.q"
    await produce_jobs(topic, queue, [f"old{i}" for i in range(10)])
    boundary = now_ms() + 1  # the old records carry at most boundary - 1
    await eventually(now_ms, lambda t: t > boundary, 5)  # the clock moved on: new records are later
    await produce_jobs(topic, queue, [f"new{i}" for i in range(10)])
    when = datetime.fromtimestamp(boundary / 1000, UTC).isoformat()
    code, doc = await replay("--topic", topic, "--from", when, "--json")
    assert code == 0, doc
    assert totals(doc)["written"] == 10
    assert await engine.reads.get_job(queue, "new3") is not None
    assert await engine.reads.get_job(queue, "old3") is None
    code, doc = await replay("--topic", topic, "--from=-1h", "--dry-run", "--json")
    assert code == 0, doc
    assert totals(doc)["read"] == 20


async def test_finished_ids_run_again_only_with_force_and_live_ones_never_double(
    prefix: str, make_topic: MakeTopic, produce_jobs: Produce, pending: Pending, engine: Engine, replay: Any
) -> None:
    topic, queue = make_topic("jobs", partitions=1), f"{prefix}.q"
    await produce_jobs(topic, queue, [f"f{i}" for i in range(5)])
    assert (await replay("--topic", topic, "--from", "0", "--json"))[0] == 0
    for job in await engine.jobs.claim(queue, 5):
        await engine.jobs.complete(queue, (job.id, job.attempt, job.token))
    assert await pending(queue) == 0
    await produce_jobs(topic, queue, ["live"])  # offset 5: stays pending throughout
    code, doc = await replay("--topic", topic, "--from", "0", "--json")
    assert code == 0, doc
    assert (totals(doc)["written"], totals(doc)["duplicate"]) == (1, 5), "finished ids are duplicates"
    code, doc = await replay("--topic", topic, "--from", "0", "--force", "--json")
    assert code == 0, doc
    t = totals(doc)
    assert (t["forced"], t["written"], t["active"], t["duplicate"]) == (5, 5, 1, 1)
    assert await pending(queue) == 6, "5 finished jobs run again, the live one is not doubled"


async def test_the_retry_topic_replays_after_the_queue_is_repaired(
    prefix: str, make_topic: MakeTopic, produce_jobs: Produce, pending: Pending, engine: Engine, replay: Any
) -> None:
    topic, queue = make_topic("jobs", partitions=1), f"{prefix}.q"
    retry = make_topic("jobs.retry", partitions=1)
    assert retry == f"{topic}.retry"
    damaged = QueueKeys(queue).stats
    await engine._client.set(damaged, b"not a hash")  # what the relay met: every script on it fails
    await produce_jobs(retry, queue, [f"r{i}" for i in range(4)])
    code, out = await replay("--topic", retry, "--from", "0", "--json")
    assert code == 2, "the queue is still damaged: the write fails loudly"
    assert "replay_refused" in out, out
    assert "WRONGTYPE" in out, out
    await engine._client.delete(damaged)  # the repair
    code, doc = await replay("--topic", retry, "--from", "0", "--json")
    assert code == 0, doc
    assert totals(doc)["written"] == 4
    assert await pending(queue) == 4


async def test_a_dry_run_counts_and_writes_nothing(
    prefix: str,
    make_topic: Callable[..., str],
    producer: AsyncProducer,
    produce_jobs: Produce,
    pending: Pending,
    replay: Any,
) -> None:
    topic, queue = make_topic("jobs", partitions=1), f"{prefix}.q"
    await produce_jobs(topic, queue, ["a", "b"])
    await producer.produce_many([Record(topic, b"not an envelope", None)])
    code, doc = await replay("--topic", topic, "--from", "0", "--dry-run", "--json")
    assert code == 0, doc
    assert (totals(doc)["read"], totals(doc)["malformed"], totals(doc)["written"]) == (3, 1, 0)
    assert await pending(queue) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "{prefix}.absent", "--from", "0"], "does not exist"),
        (["--topic", "{topic}", "--from", "yesterday"], "expected an offset"),
        (["--topic", "{topic}", "--from", "20", "--to", "10"], "is before --from"),
        (["--topic", "{topic}", "--from", "0", "--partition", "7"], "7 does not exist"),
    ],
)
async def test_bad_input_is_refused_with_the_problem_named(
    prefix: str, make_topic: Callable[..., str], replay: Any, args: list[str], message: str
) -> None:
    topic = make_topic("jobs", partitions=1)
    code, out = await replay(*(a.format(prefix=prefix, topic=topic) for a in args))
    assert code == 2
    assert message in " ".join(out.split()), out
