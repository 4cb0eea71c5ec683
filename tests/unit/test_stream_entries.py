"""Decoding the lifecycle events' stream entries (``_frame.lua``): one event an entry, or a call's several."""

from __future__ import annotations

import orjson

from jqcore.state.reads import decode_entry, next_entry


def test_a_single_event_entry_keeps_its_json_as_stored() -> None:
    raw = b'{"id":"a","v":1,"to":"pending"}'
    [event] = decode_entry(b"5-0", {b"i": b"a", b"e": raw})
    assert (event.entry, event.job_id, event.value, event.fields) == ("5-0", "a", raw, None)


def test_an_entry_of_several_events_gives_each_its_own_value_in_order() -> None:
    events = [{"id": "a", "v": 2, "to": "running"}, {"id": "b", "v": 3, "to": "completed"}]
    flat = [b"n", b"2", b"e", orjson.dumps(events)]  # as a script returns XRANGE's fields
    decoded = decode_entry(b"7-3", flat)
    assert [(e.entry, e.job_id) for e in decoded] == [("7-3", "a"), ("7-3", "b")]
    assert [orjson.loads(e.value) for e in decoded] == events
    assert decoded[1].fields == events[1]


def test_the_entry_after_one_is_the_next_sequence_number() -> None:
    assert [next_entry("5-0"), next_entry("5-41"), next_entry("5")] == ["5-1", "5-42", "5-1"]
