"""Which keys a task wrote (:func:`jqengine.replication.recording_writes`): what ``WAIT`` is sent to."""

from __future__ import annotations

from jqengine.replication import note_write, recording_writes


def test_nested_recordings_give_the_outer_one_the_inner_writes() -> None:
    note_write("nowhere")  # no recording: nothing kept
    with recording_writes() as outer:
        note_write("a")
        with recording_writes() as inner:  # a graph release inside a relay batch
            note_write("b")
        assert inner == {"b"}, "the inner step waits on its own writes"
        note_write("c")
    assert outer == {"a", "b", "c"}, "the batch waits on every write it caused"
    with recording_writes() as fresh:
        pass
    assert fresh == set()
