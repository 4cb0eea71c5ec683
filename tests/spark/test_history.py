"""The history pipeline end to end: synthetic lifecycle events (retries, duplicates, two days and one
long-expired job) in a fresh topic of the session's Kafka, written by ``start_history`` and read back
through ``HistoryStore``. Replays - a second pipeline from the start of the topic, a batch run again after
its compaction - and compaction leave every answer unchanged, except that compaction forgets the job that
ended beyond the retention."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from jqcore.events import FIELDS, pack
from jqruntime.stores.history import HistoryStore
from jqspark.history import start_history
from jqstack.manager import Endpoints

pytestmark = pytest.mark.spark

MIN = 60_000
RETENTION_DAYS = 30


def lifecycle(
    queue: str, job: str, kind: str, start: int, *, retries: int, fails: bool
) -> list[dict[str, Any]]:
    """A job's events: enqueued, ``retries`` failed attempts each delayed again, then a last attempt."""
    steps: list[dict[str, Any]] = [{"to": "pending", "accepted_at": start - 40, "origin": f"jobs/0/{start}"}]
    for attempt in range(1, retries + 2):
        steps.append({"to": "running", "attempt": attempt, "worker": f"w{attempt}"})
        if attempt <= retries:
            steps.append(
                {
                    "to": "delayed",
                    "attempt": attempt,
                    "error": "TimeoutError",
                    "digest": "0a1b2c3d4e5f",
                    "message": "timed out",
                    "run_at": start + attempt * MIN,
                }
            )
    last = (
        {"to": "errored", "error": "ValueError", "digest": "ffeeddccbbaa"} if fails else {"to": "completed"}
    )
    steps.append({**last, "attempt": retries + 1})
    events, prev = [], ""
    for v, step in enumerate(steps, start=1):
        event: dict[str, Any] = {name: ("" if t is str else 0) for name, t in FIELDS}
        event.update(id=job, queue=queue, kind=kind, v=v, at=start + (v - 1) * 1000, **{"from": prev}, **step)
        events.append(event)
        prev = step["to"]
    return events


def synthetic_events(now: datetime) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(every event once, the expired job's events): 60 jobs from yesterday 22:00 to today 01:00 UTC."""
    midnight = int(now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)
    events = []
    for j in range(60):
        events += lifecycle(
            f"q{j % 2}",
            f"job-{j:03d}",
            ("mail", "img", "pdf")[j % 3],
            midnight - 2 * 60 * MIN + j * 3 * MIN,
            retries=j % 3 if j % 4 else 0,
            fails=j % 7 == 0,
        )
    expired = lifecycle("q0", "old-job", "mail", midnight - 45 * 24 * 60 * MIN, retries=1, fails=False)
    return events, expired


def produce(bootstrap: str, topic: str, events: list[dict[str, Any]], per_record: int = 0) -> None:
    """``events`` as a scheduler ships them: ``per_record`` in each record (a JSON array,
    ``jqcore.events.pack``) or, with 0, a record each holding the event's object (as before events were
    batched)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "log_level": 0})
    for i in range(0, len(events), per_record or 1):
        part = events[i : i + (per_record or 1)]
        if per_record:
            [(_, value)] = pack([(e["id"], orjson.dumps(e)) for e in part], 1)
            producer.produce(topic, value=value)
        else:
            producer.produce(topic, key=part[0]["id"].encode(), value=orjson.dumps(part[0]))
    assert producer.flush(30) == 0


def answers(store: HistoryStore) -> dict[str, Any]:
    return {
        "events": store.query("SELECT * FROM events ORDER BY queue, id, v").rows,
        "current": store.search(limit=1000).jobs,
        "jobs": store.query("SELECT * FROM jobs ORDER BY queue, id").rows,
        "errors": store.errors(),
        "wait": store.wait_time(by="queue", per="hour"),
    }


def segments(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "current").glob("seg=*"))


def test_history_is_exactly_the_deduplicated_events_through_replays_and_compaction(
    spark: SparkSession, endpoints: Endpoints, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, root = make_topic("events"), tmp_path / "history"
    events, expired = synthetic_events(datetime.now(UTC))
    duplicates = events[::9]
    # half as shipped before events were batched, half and the duplicates (re-shipped) in arrays
    half = len(events) // 2
    produce(endpoints.kafka_bootstrap, topic, expired + events[:half])
    produce(endpoints.kafka_bootstrap, topic, events[half:], per_record=10)
    produce(endpoints.kafka_bootstrap, topic, duplicates, per_record=4)

    def run(checkpoint: str, compact_after: int = 1000) -> None:
        query = start_history(
            spark,
            bootstrap=endpoints.kafka_bootstrap,
            topic=topic,
            root=root,
            checkpoint=tmp_path / checkpoint,
            trigger_s=1,
            retention_days=RETENTION_DAYS,
            available_now=True,
            compact_after=compact_after,
            max_offsets_per_trigger=100,  # a few batches, so that there is something to compact
        )
        query.awaitTermination()
        assert query.exception() is None

    run("ck1")
    store = HistoryStore(root)
    got = store.query(
        "SELECT queue, id, v, to_state, at_ms, error, accepted_at FROM events ORDER BY ALL"
    ).rows
    assert got == sorted(
        (e["queue"], e["id"], e["v"], e["to"], e["at"], e["error"], e["accepted_at"]) for e in events
    ), "every event once; the expired day's folder is gone"
    days = sorted(p.name for p in (root / "events").glob("day=*"))
    today = datetime.now(UTC).date()
    assert days == [f"day={today - timedelta(days=1)}", f"day={today}"]
    latest = {(e["queue"], e["id"]): e for e in sorted(expired + events, key=lambda e: e["v"])}
    current = store.search(limit=1000)
    assert {(j.queue, j.id): (j.v, j.to_state, j.at_ms) for j in current.jobs} == {
        k: (e["v"], e["to"], e["at"]) for k, e in latest.items()
    }, "the latest version of every job (the expired one stays until a compaction)"
    first = store.current("q0", "job-000")
    assert first is not None
    assert (first.first_at, first.accepted_at) == (events[0]["at"], events[0]["accepted_at"])
    assert all(s.startswith("seg=b") for s in segments(root))
    before = answers(store)

    # a second pipeline over the same topic and root (a new checkpoint): every event written again
    run("ck2")
    assert store.query("SELECT count(*) FROM events_files").rows[0][0] >= 2 * len(events)
    assert answers(store) == before

    # compaction after every batch: one c-segment left, the expired job forgotten, nothing else changed
    run("ck3", compact_after=1)
    assert [s[:5] for s in segments(root)] == ["seg=c"]
    after = answers(store)
    assert [j for j in after["current"] if j.id == "old-job"] == []
    assert after == {**before, "current": [j for j in before["current"] if j.id != "old-job"]}

    # the last batch replayed (its commit lost): its compaction segment is kept, its b-segment comes back
    commits = [p for p in (tmp_path / "ck3" / "commits").iterdir() if p.name.isdigit()]
    last = max(commits, key=lambda p: int(p.name))
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    compacted = segments(root)
    run("ck3", compact_after=1)
    assert segments(root) == sorted([*compacted, "seg=b" + compacted[0].removeprefix("seg=c")])
    assert answers(store) == after
