"""The far-future mover's in-memory time index (jqsched.farindex): latest record per key, offsets by the
second they are due, superseded offsets skipped lazily."""

from __future__ import annotations

import pytest

from jqcore.envelope import encode, new_envelope
from jqcore.errors import EnvelopeError
from jqsched.farindex import Keys, PartitionIndex, parse_run_at, record_run_at


def test_due_buckets_come_out_whole_in_time_order_and_leave_the_buckets() -> None:
    index = PartitionIndex()
    index.put(b"q/a", 10, 5_500)
    index.put(b"q/b", 11, 3_000)
    index.put(b"q/c", 12, 5_999)
    index.put(b"q/d", 13, 9_000)
    assert index.next_due() == 3_000
    assert index.take_due(2_999, 100) == []
    assert index.take_due(5_000, 100) == [10, 11, 12], "buckets starting by the cut, whole"
    assert index.take_due(5_000, 100) == []
    assert index.next_due() == 9_000
    assert len(index) == 4, "taken offsets stay live until moved"
    for key, offset in ((b"q/a", 10), (b"q/b", 11), (b"q/c", 12)):
        index.forget(key, offset)
    assert dict(index.entries()) == {b"q/d": 9_000}


def test_a_later_record_or_a_tombstone_supersedes_and_the_old_offset_is_skipped() -> None:
    index = PartitionIndex()
    index.put(b"q/a", 1, 1_000)
    index.put(b"q/a", 7, 60_000)  # rescheduled later
    index.put(b"q/b", 2, 1_000)
    assert index.remove(b"q/b"), "unscheduled"
    assert not index.remove(b"q/b")
    assert index.take_due(1_000, 100) == [1, 2]
    assert not index.is_latest(b"q/a", 1), "superseded by offset 7"
    assert not index.is_latest(b"q/b", 2), "tombstoned"
    index.forget(b"q/a", 1)  # a move of the old record forgets nothing
    assert index.run_at(b"q/a") == 60_000
    assert index.is_latest(b"q/a", 7)
    assert index.read == 5


def test_the_limit_takes_whole_buckets_and_given_back_offsets_are_due_at_once() -> None:
    index = PartitionIndex()
    for i in range(6):
        index.put(f"q/{i}".encode(), i, 1_000 * (i // 3))  # two buckets of three
    assert index.take_due(10_000, 2) == [0, 1, 2], "at least one bucket, never split"
    taken = index.take_due(10_000, 2)
    assert taken == [3, 4, 5]
    index.give_back(taken)
    assert index.next_due() == 0
    assert index.take_due(0, 100) == [3, 4, 5]


def test_run_at_header_values() -> None:
    assert parse_run_at(b"1700000000123") == 1_700_000_000_123
    assert parse_run_at(None) is None
    assert parse_run_at(b"soon") is None


@pytest.mark.parametrize(
    "job_id", ["0190a1b2c3d4e5f60718293a4b", "0190A1B2C3D4E5F60718293A4B", "c-content-id", "x" * 26, "é/ü"]
)
def test_keys_pack_small_and_come_back_whole(job_id: str) -> None:
    keys = Keys()
    packed = keys.pack("q.one", job_id)
    assert keys.unpack(packed) == ("q.one", job_id)
    assert keys.unpack(keys.pack("q.two", job_id)) == ("q.two", job_id)
    assert packed == keys.pack("q.one", job_id)
    if job_id == "0190a1b2c3d4e5f60718293a4b":
        assert len(packed) == 15, "a jobq id: 2 bytes of queue, 13 of id"


def test_a_records_time_comes_from_its_header_else_its_envelope_and_a_tombstone_has_none() -> None:
    env = new_envelope("q", "k", None, run_at=7_000)
    assert record_run_at([("jobq-queue", b"q"), ("jobq-run-at", b"9000")], encode(env)) == 9_000
    assert record_run_at([("jobq-run-at", b"soon")], encode(env)) == 7_000, "a bad header: the envelope's"
    assert record_run_at(None, encode(env)) == 7_000, "a record written before the header existed"
    assert record_run_at(None, None) is None
    with pytest.raises(EnvelopeError):
        record_run_at([], b"not an envelope")
