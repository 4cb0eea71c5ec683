"""Decoding the lifecycle events' stream entries (``_frame.lua``): one event an entry, or a call's several."""

from __future__ import annotations

import orjson

from jqcore.events import DEFAULTS, FIELDS
from jqengine.reads import decode_entry, next_entry


def test_a_single_event_entry_keeps_its_json_as_stored() -> None:
    raw = b'{"id":"a","v":1,"to":"pending"}'
    [event] = decode_entry(b"5-0", {b"i": b"a", b"e": raw})
    assert (event.entry, event.job_id, event.value, event.fields) == ("5-0", "a", raw, None)


def test_an_entry_of_several_events_gives_each_its_own_value_in_order_with_every_field() -> None:
    """The stream keeps them lean (no field at its default, no queue); Kafka gets the whole schema."""
    events = [{"id": "a", "v": 2, "to": "running", "worker": "w1"}, {"id": "b", "v": 3, "to": "completed"}]
    flat = [b"n", b"2", b"e", orjson.dumps(events)]  # as a script returns XRANGE's fields
    decoded = decode_entry(b"7-3", flat, "q")
    assert [(e.entry, e.job_id) for e in decoded] == [("7-3", "a"), ("7-3", "b")]
    whole = [{**DEFAULTS, "queue": "q", **e} for e in events]
    assert [orjson.loads(e.value) for e in decoded] == whole
    assert decoded[1].fields == whole[1]
    assert sorted(whole[0]) == sorted(name for name, _ in FIELDS)
    assert (whole[0]["worker"], whole[1]["worker"], whole[1]["run_at"]) == ("w1", "", 0)


def test_an_entry_written_whole_before_events_were_lean_keeps_its_values() -> None:
    event = {**DEFAULTS, "id": "a", "queue": "q", "v": 4, "to": "delayed", "run_at": 99}
    [decoded] = decode_entry(b"8-0", {b"n": b"1", b"e": orjson.dumps([event])}, "q")
    assert decoded.fields == event


def test_the_entry_after_one_is_the_next_sequence_number() -> None:
    assert [next_entry("5-0"), next_entry("5-41"), next_entry("5")] == ["5-1", "5-42", "5-1"]
