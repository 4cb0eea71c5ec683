"""The relay's reading of a consume call (:func:`jqrelay.batch.parse_batch`), no servers."""

from __future__ import annotations

from confluent_kafka import Message

from jqcore.envelope import encode, new_envelope
from jqrelay.batch import parse_batch


def _record(offset: int, at_ms: int, job_id: str = "j1") -> Message:
    env = new_envelope("q", "k", id=job_id, excl="x", at_ms=at_ms)
    return Message(topic="t", partition=0, offset=offset, key=b"x", value=encode(env))


def test_a_job_read_twice_in_one_batch_comes_from_its_first_record() -> None:
    """Two records of one id in a batch (a client's retry through another gateway, each stamped by its
    gateway): the engine stores the first and counts the second a duplicate, so the job's origin — which
    decides whether a later read is the same record again — must be the first record's offset, not the
    last's. (It was the last's: a fault run saw a job dated by one record and placed by the other.)"""
    batch = parse_batch("t", [_record(7, 1_000), _record(9, 2_000, "j2"), _record(12, 3_000)])
    assert [(e.id, e.enqueued_at) for e in batch.envelopes] == [("j1", 1_000), ("j2", 2_000), ("j1", 3_000)]
    assert batch.source["j1"].offset() == 7
    assert batch.source["j2"].offset() == 9
    assert batch.offsets == {0: 12}
