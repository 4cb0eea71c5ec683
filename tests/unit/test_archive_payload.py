"""The payload an ending event carries into the history (``jqruntime.stores.archive``) and the replay built
from it (``jqrecover.replay``): what is kept, what is cut (and said to be), and what a replay keeps or
refuses."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from jqcore.envelope import encode, new_envelope
from jqengine import JobInfo
from jqrecover.errors import ReplayError
from jqrecover.replay import replayed, replayed_from_archive
from jqruntime.stores.archive import ArchivedPayload, payload_of_record, with_payload
from jqruntime.stores.history import JobSnapshot

ENV = new_envelope(
    "q",
    "mail.send",
    {"to": "ann", "body": "héllo"},
    id="j1",
    priority=5,
    lease_ms=7000,
    expires_at=4_000_000_000_000,
    max_attempts=3,
    meta={"tenant": "t1"},
    excl="t1",
    at_ms=1_000,
)


def test_a_payload_within_the_cap_is_kept_whole() -> None:
    got = payload_of_record(encode(ENV), b'{"sent":true}', 1024)
    assert orjson.loads(got["args"]) == {"to": "ann", "body": "héllo"}
    assert orjson.loads(got["meta"]) == {"tenant": "t1"}
    assert got["result"] == '{"sent":true}'
    assert orjson.loads(got["envelope"]) == {
        "priority": 5,
        "enqueued_at": 1_000,
        "expires_at": 4_000_000_000_000,
        "max_attempts": 3,
        "lease_ms": 7000,
        "excl": "t1",
    }
    assert got["truncated"] == ""
    kept = ArchivedPayload.from_columns(**got)
    assert kept.kept
    assert kept.as_dict() == {
        "args": {"to": "ann", "body": "héllo"},
        "meta": {"tenant": "t1"},
        "result": '{"sent":true}',
        "priority": 5,
        "expires_at": 4_000_000_000_000,
        "max_attempts": 3,
        "lease_ms": 7000,
        "excl": "t1",
        "truncated": [],
    }


def test_a_longer_field_is_cut_on_a_character_boundary_and_named() -> None:
    args_json = orjson.dumps(ENV.args)
    cap = args_json.index("é".encode()) + 1  # in the middle of the two bytes of é
    got = payload_of_record(encode(ENV), b'"' + b"r" * 100 + b'"', cap)
    assert got["truncated"] == "args,result"
    assert got["args"] == args_json[: cap - 1].decode()
    assert len(got["result"]) == cap
    assert orjson.loads(got["meta"]) == {"tenant": "t1"}, "meta fits: kept whole"
    kept = ArchivedPayload.from_columns(**got)
    assert kept.truncated == {"args", "result"}
    assert kept.args == got["args"], "a cut field is its kept start, as text"


def test_no_record_no_payload_and_cap_zero_keeps_nothing() -> None:
    empty = dict.fromkeys(("args", "meta", "result", "envelope", "truncated"), "")
    assert payload_of_record(None, None, 1024) == empty
    assert payload_of_record(encode(ENV), b"1", 0) == empty
    assert not ArchivedPayload.from_columns(**empty).kept
    assert not ArchivedPayload.from_columns(None, None, None, None, None).kept


def test_with_payload_adds_the_fields_to_the_event() -> None:
    event = b'{"id":"j1","to":"completed","v":3}'
    out = orjson.loads(with_payload(event, {"args": "1", "truncated": ""}))
    assert out == {"id": "j1", "to": "completed", "v": 3, "args": "1", "truncated": ""}


def snapshot(state: str, **payload: Any) -> JobSnapshot:
    return JobSnapshot(
        "j1", "q", "mail.send", "running", state, 3, 9_000, 1, "w", "", "", "", 0, "", 1_000, 1_000, **payload
    )


def kept_fields(info_env: bytes, state: str = "completed") -> tuple[Any, ...]:
    info = JobInfo(
        "j1", "q", state, "mail.send", 1, 3, 3, 5, 1_000, None, None, None, None, None, None, None, False, [],
        envelope=info_env,
    )  # fmt: skip
    env = replayed("q", info, "j2")
    return (
        env.id,
        env.args,
        dict(env.meta),
        env.excl,
        env.max_attempts,
        env.priority,
        env.lease_ms,
        env.expires_at,
    )


def test_a_replay_keeps_priority_lease_and_expiry_from_redis_and_from_the_archive() -> None:
    want = ("j2", ENV.args, {"tenant": "t1"}, "t1", 3, 5, 7000, 4_000_000_000_000)
    assert kept_fields(encode(ENV)) == want
    env = replayed_from_archive(
        "q", snapshot("completed", **payload_of_record(encode(ENV), None, 1024)), "j2"
    )
    assert (env.id, env.args, dict(env.meta), env.excl, env.max_attempts) == want[:5]
    assert (env.priority, env.lease_ms, env.expires_at) == want[5:]


@pytest.mark.parametrize(
    ("state", "cap", "code"),
    [
        ("running", 1024, "job_not_finished"),
        ("completed", 0, "payload_missing"),
        ("errored", 10, "payload_truncated"),
    ],
)
def test_a_replay_from_the_archive_refuses_what_it_cannot_rebuild(state: str, cap: int, code: str) -> None:
    job = snapshot(state, **payload_of_record(encode(ENV), None, cap))
    with pytest.raises(ReplayError) as refused:
        replayed_from_archive("q", job)
    assert (refused.value.code, refused.value.http_status) == (code, 409)
