"""The events topic's records (``jqcore.events``): a shipping round packed into one JSON array per
partition, each event on its job id's partition, split at the size limit; every reader's decoding takes the
arrays and the single event objects of before events were batched."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from jqcore.events import DEFAULTS, Event, decode_record, pack, parse_record, partition_of


def event(job_id: str, v: int, **extra: Any) -> dict[str, Any]:
    return {**DEFAULTS, "id": job_id, "queue": "q", "to": "pending", "v": v, "at": 1000 + v, **extra}


def round_of(n_jobs: int, per_job: int) -> list[tuple[str, bytes]]:
    """A shipping round as the stream holds it: each job's versions in order, the jobs interleaved."""
    return [
        (f"job-{j}", orjson.dumps(event(f"job-{j}", v))) for v in range(1, per_job + 1) for j in range(n_jobs)
    ]


def test_a_round_is_one_record_per_partition_each_event_on_its_jobs_partition_in_order() -> None:
    events = round_of(40, 3)
    records = pack(events, 4)
    assert sorted(p for p, _ in records) == [0, 1, 2, 3], "one record per partition"
    for partition, value in records:
        got = parse_record(value)
        assert {partition_of(e.id, 4) for e in got} == {partition}
        mine = [orjson.loads(v) for job_id, v in events if partition_of(job_id, 4) == partition]
        assert [(e.id, e.v) for e in got] == [(e["id"], e["v"]) for e in mine], "in the order they happened"
    assert sum(len(decode_record(v)) for _, v in records) == len(events)


def test_a_round_larger_than_the_limit_splits_in_order_and_an_event_larger_alone_travels_alone() -> None:
    events = round_of(30, 4)
    size = len(events[0][1])
    records = pack(events, 2, max_bytes=10 * size)
    assert len(records) > 2
    assert all(len(v) <= 10 * size for _, v in records)
    for partition in (0, 1):
        got = [e for p, v in records if p == partition for e in parse_record(v)]
        assert [(e.id, e.v) for e in got] == [
            (orjson.loads(v)["id"], orjson.loads(v)["v"])
            for j, v in events
            if partition_of(j, 2) == partition
        ]
    exact = pack(events[:3], 1, max_bytes=2 + 3 * size + 2)  # "[" + 3 events + 2 commas + "]" fits ...
    assert [len(decode_record(v)) for _, v in exact] == [3]
    assert [len(decode_record(v)) for _, v in pack(events[:3], 1, max_bytes=2 + 3 * size + 1)] == [2, 1]
    big = ("job-big", orjson.dumps(event("job-big", 1, message="x" * 500)))
    alone = pack([events[0], big, events[1]], 1, max_bytes=300)
    assert [[e.id for e in parse_record(v)] for _, v in alone] == [["job-0"], ["job-big"], ["job-1"]]


def test_a_record_decodes_to_its_events_in_either_form() -> None:
    one = event("a", 1)
    assert decode_record(orjson.dumps(one)) == [one], "a record of before events were batched"
    assert decode_record(orjson.dumps([one, event("a", 2)])) == [one, event("a", 2)]
    assert decode_record(b"[]") == []
    assert parse_record(orjson.dumps(one)) == [Event.from_mapping(one)]
    for bad in (b"not json", b"3", b'"x"', b"[1, 2]", b'[{"id": "a"}, null]'):
        with pytest.raises(ValueError, match=r"not an events record|unexpected|expected|invalid"):
            decode_record(bad)
    with pytest.raises(KeyError):
        parse_record(b'[{"id": "a"}]')  # an object that is not an event


def test_partition_of_is_where_librdkafka_put_a_record_keyed_by_the_job_id() -> None:
    """librdkafka's own mock cluster (in process): the partitioner of the records keyed by job id that
    the shipper wrote before events were batched, so a job's events stay on one partition across it."""
    producer = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    placed: dict[str, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        placed[msg.key().decode()] = msg.partition()

    keys = [f"{i:08x}-job" for i in range(300)]
    for key in keys:
        producer.produce("events", key=key.encode(), value=b"{}", on_delivery=delivered)
    assert producer.flush(10) == 0
    partitions = len(producer.list_topics("events", timeout=10).topics["events"].partitions)
    assert partitions > 1
    assert placed == {key: partition_of(key, partitions) for key in keys}
