"""Envelope v1: golden files, the JSON Schema agreeing with the decoder, round trips and fuzzing.

Two validators read the schema: ``PLAIN`` is stock draft 2020-12 (what a producer in another language
uses), ``STRICT`` differs only in counting 5.0 as a number, not an integer, as the decoder does (JSON
Schema cannot tell ``5`` from ``5.0``). Schema and decoder must accept exactly the same documents, except
for the two rules JSON Schema cannot express (expires_at > run_at, args depth), which are checked apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jqcore import envelope as envelope_module
from jqcore import envelope_rules
from jqcore.envelope import (
    MAX_ENVELOPE_BYTES,
    Envelope,
    decode,
    encode,
    encoded,
    new_envelope,
    new_job_id,
    record_key,
)
from jqcore.envelope_rules import MAX_ARGS_DEPTH, MAX_META_ENTRIES, VERSION
from jqcore.errors import EnvelopeError

ROOT = Path(__file__).parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "envelopes"
INVALID = GOLDEN / "invalid"
EXPECTED: dict[str, dict[str, Any]] = json.loads((INVALID / "expected.json").read_text(encoding="utf-8"))
SCHEMA: dict[str, Any] = json.loads((ROOT / "jqcore" / "schema" / "envelope.v1.json").read_text())

VALID_FILES = sorted(GOLDEN.glob("*.json"))
INVALID_FILES = sorted(p for p in INVALID.glob("*.json") if p.name != "expected.json")

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_TS = 253_402_300_799_999
OPTIONAL = ("run_at", "expires_at", "max_attempts", "lease_ms", "meta", "excl", "graph", "trace", "canary")


def _strict_integer(_: Any, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


PLAIN = jsonschema.Draft202012Validator(SCHEMA)
STRICT = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)(SCHEMA)

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decoded(raw: bytes) -> Envelope | EnvelopeError:
    try:
        return decode(raw)
    except EnvelopeError as exc:
        return exc


# ---- the schema itself ---------------------------------------------------------------------------------


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["additionalProperties"] is False


def test_schema_lists_the_decoders_fields() -> None:
    fields = {f for f in Envelope.__dataclass_fields__ if f != "raw"}
    assert set(SCHEMA["properties"]) == fields
    required = set(SCHEMA["required"])
    assert required == fields - set(OPTIONAL)
    minimal = orjson.loads((GOLDEN / "minimal.json").read_bytes())
    for name in required:
        error = _decoded(orjson.dumps({k: v for k, v in minimal.items() if k != name}))
        assert isinstance(error, EnvelopeError)
        assert {f.field for f in error.fields} == {name}


def test_schema_bounds_are_the_decoders_constants() -> None:
    props, defs = SCHEMA["properties"], SCHEMA["$defs"]
    assert props["v"]["const"] == VERSION
    assert (props["priority"]["minimum"], props["priority"]["maximum"]) == (INT64_MIN, INT64_MAX)
    assert (defs["ms"]["minimum"], defs["ms"]["maximum"]) == (0, envelope_rules.MAX_TS_MS)
    assert props["max_attempts"]["maximum"] == envelope_rules.MAX_ATTEMPTS_LIMIT
    assert (props["lease_ms"]["minimum"], props["lease_ms"]["maximum"]) == (
        envelope_rules.MIN_LEASE_MS,
        envelope_rules.MAX_LEASE_MS,
    )
    assert props["meta"]["maxProperties"] == MAX_META_ENTRIES
    assert str(MAX_ENVELOPE_BYTES) in SCHEMA["description"]
    assert str(MAX_ARGS_DEPTH) in props["args"]["description"]


def test_every_field_is_described_with_its_unit() -> None:
    for name, prop in SCHEMA["properties"].items():
        assert prop.get("description"), name
    for name in ("enqueued_at", "run_at", "expires_at"):
        assert "ms since epoch" in SCHEMA["properties"][name]["description"]


# ---- golden files --------------------------------------------------------------------------------------


def test_every_invalid_golden_has_an_expectation() -> None:
    assert {p.name for p in INVALID_FILES} == set(EXPECTED)
    assert {p.stem for p in VALID_FILES} >= {
        "minimal",
        "full",
        "delayed",
        "exclusive",
        "canary",
        "graph",
        "escapes",
        "unicode",
    }


@pytest.mark.parametrize("path", VALID_FILES, ids=lambda p: p.stem)
def test_valid_golden_decodes_reencodes_byte_for_byte_and_fits_the_schema(path: Path) -> None:
    raw = path.read_bytes()
    env = decode(raw)
    assert encode(env) == raw, "the producer's bytes must pass through unchanged"
    doc = json.loads(raw)
    PLAIN.validate(doc)
    STRICT.validate(doc)
    assert decode(orjson.dumps(env.to_dict())) == env


GOLDEN_FACTS: dict[str, Callable[[Envelope], bool]] = {
    "minimal": lambda e: all(getattr(e, n) in (None, False, {}) for n in OPTIONAL),
    "full": lambda e: all(getattr(e, n) not in (None, False, {}) for n in OPTIONAL),
    "delayed": lambda e: e.run_at is not None and e.run_at > e.enqueued_at,
    "exclusive": lambda e: e.excl is not None and record_key(e) == e.excl.encode(),
    "canary": lambda e: e.canary is True,
    "graph": lambda e: e.graph is not None and e.graph["node"] == "step-2",
    "pretty": lambda e: e.canary is False and e.args["title"] == "Q3 / été",
    "unicode": lambda e: e.args["u64"] == 2**64 - 1 and e.meta == {"lang": "fr-é"},
    "boundaries": lambda e: e.priority == INT64_MIN and e.expires_at == MAX_TS and len(e.meta) == 16,
}


@pytest.mark.parametrize("name", sorted(GOLDEN_FACTS))
def test_golden_files_show_what_their_names_say(name: str) -> None:
    assert GOLDEN_FACTS[name](decode((GOLDEN / f"{name}.json").read_bytes()))


@pytest.mark.parametrize("path", INVALID_FILES, ids=lambda p: p.stem)
def test_invalid_golden_fails_with_the_expected_code_fields_and_schema_verdict(path: Path) -> None:
    expected = EXPECTED[path.name]
    raw = path.read_bytes()
    with pytest.raises(EnvelopeError) as info:
        decode(raw)
    assert info.value.code == expected["code"]
    assert sorted({f.field for f in info.value.fields}) == sorted(expected["fields"])
    verdict = expected.get("schema", "invalid")
    if verdict == "not_json":
        return
    doc = json.loads(raw)
    assert STRICT.is_valid(doc) is (verdict == "valid"), "schema and decoder must agree"
    assert PLAIN.is_valid(doc) is (expected.get("plain_schema", verdict) == "valid")


@pytest.mark.parametrize(
    ("name", "fragment", "reencoding_changes_it"),
    [
        ("escapes", b"123456789012345678901234567890", True),
        ("escapes", b"\\u2028sep \\ud83d\\ude00 \\/slash", True),
        ("escapes", b'"neg":-0.0,"e":1E5', True),
        ("unicode", b"\\u0000\\b\\f\\n\\r\\t\\\\ \\u00e9 \\ud83d\\ude80 \\u2028", True),
        ("unicode", b'"tiny":1e-7,"huge":1.5E+300', True),
        ("unicode", "\u2028 \u2029 \U0001f680".encode(), False),
        ("pretty", b'{ "pages" : [ 1 , 2 ],\n', True),
    ],
)
def test_args_bytes_survive_byte_for_byte(name: str, fragment: bytes, reencoding_changes_it: bool) -> None:
    raw = (GOLDEN / f"{name}.json").read_bytes()
    assert fragment in raw
    env = decode(raw)
    assert fragment in encode(env)
    assert (fragment not in orjson.dumps(env.to_dict())) is reencoding_changes_it


# ---- decode edges --------------------------------------------------------------------------------------


def test_decode_takes_bytes_bytearray_memoryview_and_str() -> None:
    raw = (GOLDEN / "unicode.json").read_bytes()
    env = decode(raw)
    for form in (bytearray(raw), memoryview(raw), raw.decode()):
        again = decode(form)
        assert again == env
        assert encode(again) == raw


def test_a_str_with_a_lone_surrogate_is_not_json() -> None:
    with pytest.raises(EnvelopeError) as info:
        decode('{"v":1,"args":"\ud800"}')
    assert info.value.code == "envelope_not_json"


def test_oversize_is_refused_at_one_byte_over_the_limit() -> None:
    raw = (GOLDEN / "minimal.json").read_bytes()
    padded = raw + b" " * (MAX_ENVELOPE_BYTES - len(raw))
    assert decode(padded).id == "job-1"
    with pytest.raises(EnvelopeError) as info:
        decode(padded + b" ")
    assert info.value.code == "envelope_oversize"
    assert [f.field for f in info.value.fields] == ["$"]


@pytest.mark.parametrize("version", [2, 3, 99, 2**70])
def test_a_newer_version_is_unsupported_whatever_else_it_holds(version: int) -> None:
    doc = {"v": version, "id": "has space", "shiny_new_field": [1, 2]}
    with pytest.raises(EnvelopeError) as info:
        decode(json.dumps(doc))
    if version < 2**64:
        assert info.value.code == "envelope_version_unsupported"
        assert [f.field for f in info.value.fields] == ["v"]
    else:  # beyond 64 bits orjson reads a float: not a version at all
        assert info.value.code == "envelope_invalid"


@pytest.mark.parametrize("version", [0, -1, 1.5, "1", None, True])
def test_other_versions_are_invalid(version: object) -> None:
    with pytest.raises(EnvelopeError) as info:
        decode(json.dumps({"v": version}))
    assert info.value.code == "envelope_invalid"
    assert "v" in {f.field for f in info.value.fields}


def test_record_key_is_excl_else_id() -> None:
    assert record_key(new_envelope("q", "k", id="j1")) == b"j1"
    assert record_key(new_envelope("q", "k", id="j1", excl="acct-7")) == b"acct-7"
    assert record_key(decode((GOLDEN / "full.json").read_bytes())) == b"acct:42"


def test_error_names_every_bad_field() -> None:
    with pytest.raises(EnvelopeError) as info:
        decode(b'{"v":1,"id":"","queue":"Q","kind":"k","args":1,"priority":"x","enqueued_at":-1}')
    assert {f.field for f in info.value.fields} == {"id", "queue", "priority", "enqueued_at"}
    assert "priority" in info.value.message


def test_expires_must_follow_run_at() -> None:
    with pytest.raises(EnvelopeError) as info:
        new_envelope("q", "k", run_at=10, expires_at=10, at_ms=0)
    assert [f.field for f in info.value.fields] == ["expires_at"]
    assert new_envelope("q", "k", run_at=10, expires_at=11, at_ms=0).expires_at == 11
    assert new_envelope("q", "k", expires_at=5, at_ms=0).run_at is None


# ---- new_envelope --------------------------------------------------------------------------------------


def test_new_envelope_defaults() -> None:
    env = new_envelope("emails", "email.send", {"to": "a"}, at_ms=1_000)
    assert env.priority == env.enqueued_at == 1_000
    assert (env.run_at, env.expires_at, env.max_attempts, env.lease_ms, env.excl, env.graph) == (None,) * 6
    assert env.meta == {}
    assert env.canary is False
    assert env.v == VERSION
    assert env.raw is None
    assert orjson.loads(encode(env)) == {
        "v": 1,
        "id": env.id,
        "queue": "emails",
        "kind": "email.send",
        "args": {"to": "a"},
        "priority": 1_000,
        "enqueued_at": 1_000,
    }


def test_new_envelope_generates_distinct_valid_ids() -> None:
    ids = {new_envelope("q", "k").id for _ in range(50)} | {new_job_id()}
    assert len(ids) == 51
    for job_id in ids:
        assert len(job_id) == 26
        assert STRICT.evolve(schema=SCHEMA["$defs"]["idlike"]).is_valid(job_id)


def test_one_processs_job_ids_increase_in_the_order_it_made_them() -> None:
    # equal priorities are claimed in id order: a batch's jobs (one stamp) keep their order
    ids = [new_job_id() for _ in range(2_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_job_ids_do_not_follow_the_applications_random_seed() -> None:
    # An application seeding `random` (common in ML code) must not make two processes repeat ids.
    random.seed(7)
    first = new_job_id()[12:]
    random.seed(7)
    assert new_job_id()[12:] != first


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_repeat_its_parents_job_ids() -> None:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id's random part, then out without pytest's teardown
        os.write(write_end, new_job_id()[12:].encode())
        os._exit(0)
    os.close(write_end)
    mine = new_job_id()[12:]
    with os.fdopen(read_end, "rb") as pipe:
        childs = pipe.read().decode()
    os.waitpid(pid, 0)
    assert len(childs) == 14
    assert childs != mine


def test_encoded_fills_in_the_record_value_once_on_the_same_envelope() -> None:
    env = new_envelope("q", "k", {"a": 1}, meta={"m": "v"})
    assert env.raw is None
    same = encoded(env)
    assert same is env
    assert env.raw == orjson.dumps(env.to_dict())
    assert decode(env.raw) == env
    wire = b'{"v":1,"id":"x1","queue":"q","kind":"k","args":{"b": 2},"priority":1,"enqueued_at":1}'
    assert encoded(decode(wire)).raw == wire  # a received envelope keeps its exact bytes


def test_new_envelope_priority_and_delay() -> None:
    assert new_envelope("q", "k", priority=-3, at_ms=1_000).priority == -3
    delayed = new_envelope("q", "k", None, delay_ms=500, at_ms=1_000)
    assert (delayed.run_at, delayed.priority) == (1_500, 1_000)
    assert new_envelope("q", "k", delay_ms=0, at_ms=7).run_at == 7
    assert new_envelope("q", "k", run_at=99, at_ms=7).run_at == 99


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"delay_ms": 5, "run_at": 10}, "delay_ms"),
        ({"delay_ms": -1}, "delay_ms"),
        ({"delay_ms": True}, "delay_ms"),
        ({"delay_ms": 1.5}, "delay_ms"),
        ({"id": "has space"}, "id"),
        ({"lease_ms": 5}, "lease_ms"),
        ({"meta": {"Bad": "x"}}, "meta"),
        ({"trace": "00-xyz"}, "trace"),
        ({"graph": {"children": []}}, "graph"),
        ({"args": {"big": 2**64}}, "args"),
        ({"args": {1: "non-string key"}}, "args"),
    ],
)
def test_new_envelope_refuses_bad_input_with_an_envelope_error(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(EnvelopeError) as info:
        new_envelope("q", "k", **kwargs)
    assert field in {f.field for f in info.value.fields}


def test_new_envelope_validates_queue_and_kind() -> None:
    with pytest.raises(EnvelopeError) as info:
        new_envelope("Queue With Space", "a kind")
    assert {f.field for f in info.value.fields} == {"queue", "kind"}


# ---- strategies ----------------------------------------------------------------------------------------

ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}", fullmatch=True)
queues = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,63}", fullmatch=True)
traces = st.from_regex(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", fullmatch=True)
ms = st.integers(0, MAX_TS)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(INT64_MIN, INT64_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
metas = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9_]{0,31}", fullmatch=True),
    st.text(min_size=1, max_size=256).filter(lambda s: "{" not in s and "}" not in s),
    max_size=MAX_META_ENTRIES,
)
graphs = st.fixed_dictionaries({"id": ids, "node": ids})


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    at_ms = draw(st.integers(0, 10**13))
    run_at = delay_ms = None
    if draw(st.booleans()):
        run_at = draw(st.none() | ms.filter(lambda t: t < MAX_TS))
    else:
        delay_ms = draw(st.none() | st.integers(0, 10**9))
    start = run_at if run_at is not None else at_ms + (delay_ms or 0)
    return new_envelope(
        draw(queues),
        draw(ids),
        draw(json_values),
        id=draw(st.none() | ids),
        priority=draw(st.none() | st.integers(INT64_MIN, INT64_MAX)),
        run_at=run_at,
        delay_ms=delay_ms,
        expires_at=draw(st.none() | st.integers(start + 1, MAX_TS)),
        max_attempts=draw(st.none() | st.integers(1, 1000)),
        lease_ms=draw(st.none() | st.integers(100, 86_400_000)),
        meta=draw(metas),
        excl=draw(st.none() | ids),
        graph=draw(st.none() | graphs),
        trace=draw(st.none() | traces),
        canary=draw(st.booleans()),
        at_ms=at_ms,
    )


TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
NEAR_INTS: list[Any] = [  # integers at and just past every bound, and integers written as floats
    *(-1, 0, 1, 2, 99, 100, 999, 1000, 1001, 86_400_000, 86_400_001, MAX_TS, MAX_TS + 1),
    *(INT64_MIN, INT64_MIN - 1, INT64_MAX, INT64_MAX + 1, 2**64),
    *(0.0, -0.0, 1.0, 100.0, 0.5, 1e3, True, False, None),
]
NEAR_STRINGS: list[Any] = [  # strings around the name and traceparent patterns
    *("", "x", "x\n", "\nx", "x y", "X", "a{b}", "-x", ".x", "x:y@z", "ünï", "UPPER"),
    *("a" * 64, "a" * 65, "a" * 128, "a" * 129, TRACE, TRACE.upper(), TRACE + "\n", TRACE[:-1]),
]
NEAR_OBJECTS: list[Any] = [  # objects around meta and graph
    *({}, {"a": "b"}, {"A": "b"}, {"a": ""}, {"a": "x" * 256}, {"a": "x" * 257}, {"a\n": "b"}),
    *({"a": "b\n"}, {"a": 1}, {"a": "{"}, {f"k{i}": "v" for i in range(16)}),
    {f"k{i}": "v" for i in range(17)},
    *({"id": "g"}, {"id": "g\n"}, {"parents": []}, {"parents": ["x\n"]}, {"parents": None}),
    *({"next": [{}]}, {"next": [1]}, {"next": [], "x": 1}, {"parents": ["a"] * 257}),
    *([], [1], ["x"], [[[]]]),
]
NEAR_MISSES = NEAR_INTS + NEAR_STRINGS + NEAR_OBJECTS
NEAR_BY_FIELD: dict[str, list[Any]] = {
    **dict.fromkeys(("id", "queue", "kind", "excl", "trace"), NEAR_STRINGS),
    **dict.fromkeys(("meta", "graph"), NEAR_OBJECTS),
    **dict.fromkeys(("v", "priority", "enqueued_at", "run_at", "expires_at", "max_attempts"), NEAR_INTS),
    **dict.fromkeys(("lease_ms", "canary"), NEAR_INTS),
}
FIELDS = [*Envelope.__dataclass_fields__, "bogus"]
FIELDS.remove("raw")


@st.composite
def mutated_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A valid envelope with 1-3 fields dropped, replaced (random or near-miss values) or added."""
    doc: dict[str, Any] = draw(envelopes()).to_dict()
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["drop", "set", "near", "add"]))
        name = draw(st.sampled_from(FIELDS))
        if op == "drop":
            doc.pop(name, None)
        elif op == "set":
            doc[name] = draw(json_values)
        elif op == "near":
            doc[name] = draw(
                st.sampled_from(NEAR_BY_FIELD.get(name, NEAR_MISSES)) | st.sampled_from(NEAR_MISSES)
            )
        else:
            doc[draw(st.text(max_size=10))] = draw(json_values)
    return doc


# ---- properties ----------------------------------------------------------------------------------------


@FAST
@given(envelopes())
def test_round_trip(env: Envelope) -> None:
    raw = encode(env)
    back = decode(raw)
    assert back == env
    assert encode(back) == raw
    assert record_key(back) == (env.excl or env.id).encode()
    STRICT.validate(json.loads(raw))


@FAST
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_envelope_error(data: bytes) -> None:
    with contextlib.suppress(EnvelopeError):
        decode(data)


@FAST
@given(st.text(st.characters(codec=None, exclude_categories=()), max_size=100))
def test_arbitrary_text_raises_only_envelope_error(data: str) -> None:
    with contextlib.suppress(EnvelopeError):
        decode(data)


@FAST
@given(json_values | st.dictionaries(st.sampled_from(FIELDS), json_values | st.sampled_from(NEAR_MISSES)))
def test_arbitrary_json_raises_only_envelope_error_and_agrees_with_the_schema(value: Any) -> None:
    _agree(value)


@FAST
@given(mutated_documents())
def test_mutated_documents_raise_only_envelope_error_and_agree_with_the_schema(doc: dict[str, Any]) -> None:
    _agree(doc)


@pytest.mark.parametrize("base", ["minimal", "full"])
def test_every_near_miss_in_every_field_agrees_with_the_schema(base: str) -> None:
    """Exhaustive over (field, near-miss value): the edges random mutation rarely hits."""
    doc = json.loads((GOLDEN / f"{base}.json").read_bytes())
    for name in FIELDS:
        _agree({k: v for k, v in doc.items() if k != name})
        for value in NEAR_MISSES:
            _agree({**doc, name: value})


def _agree(doc: Any) -> None:
    """Decoder and schema accept the same documents (the cross-field rule applied on top of the schema)."""
    raw = json.dumps(doc, ensure_ascii=False).encode()
    result = _decoded(raw)
    assert _outcome(result) == _outcome(_slow(raw)), "the msgspec fast path and the precise checks differ"
    schema_ok = STRICT.is_valid(doc)
    if schema_ok:
        assert PLAIN.is_valid(doc)
    if schema_ok and doc.get("run_at") is not None and doc.get("expires_at", MAX_TS + 1) <= doc["run_at"]:
        assert isinstance(result, EnvelopeError)
        assert [f.field for f in result.fields] == ["expires_at"]
        return
    accepted = isinstance(result, Envelope)
    assert accepted is schema_ok, f"decoder {result!r} vs schema {schema_ok} for {doc!r}"


# ---- the fast path (msgspec) and the precise checks give one verdict -------------------------------------


def _slow(raw: bytes) -> Envelope | EnvelopeError:
    """What the precise checks alone make of ``raw`` (the decoder before msgspec)."""
    try:
        return envelope_module._decode_slow(raw)
    except EnvelopeError as exc:
        return exc


def _outcome(result: Envelope | EnvelopeError) -> tuple[Any, ...]:
    """Everything that must match, types included (``repr`` tells 1 from 1.0 and True, and key order)."""
    if isinstance(result, EnvelopeError):
        return ("refused", result.code, result.fields, result.message)
    return ("accepted", repr(result.to_dict()), repr(result), result.raw, type(result.meta), result.canary)


@contextlib.contextmanager
def _precise_checks_only() -> Iterator[None]:
    """new_envelope as it was: msgspec never consulted, the precise checks decide everything."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(envelope_rules, "fields_pass", lambda doc, args_json: False)
        yield


def _new(**kwargs: Any) -> Envelope | EnvelopeError | TypeError:
    try:
        return new_envelope(**kwargs)
    except (EnvelopeError, TypeError) as exc:
        return exc


def _new_outcome(result: Envelope | EnvelopeError | TypeError) -> tuple[Any, ...]:
    if isinstance(result, TypeError):
        return ("type error", str(result))
    outcome = _outcome(result)
    if isinstance(result, Envelope):  # the caller's own objects, not copies
        return (*outcome, type(result.args), type(result.graph))
    return outcome


@pytest.mark.parametrize("path", VALID_FILES + INVALID_FILES, ids=lambda p: p.stem)
def test_golden_files_get_one_verdict_from_both_paths(path: Path) -> None:
    raw = path.read_bytes()
    assert _outcome(_decoded(raw)) == _outcome(_slow(raw))


@pytest.mark.parametrize("path", VALID_FILES, ids=lambda p: p.stem)
def test_valid_golden_files_take_the_fast_path(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _slow(path.read_bytes())

    def refuse(*_: object) -> None:
        raise AssertionError("fell back to the precise checks")

    monkeypatch.setattr(envelope_module, "_decode_slow", refuse)
    monkeypatch.setattr(envelope_module, "_from_doc", refuse)
    assert _outcome(decode(path.read_bytes())) == _outcome(expected)
    env = expected
    assert isinstance(env, Envelope)
    again = new_envelope(
        env.queue,
        env.kind,
        env.args,
        **{k: getattr(env, k) for k in ("id", "priority", *OPTIONAL)},
        at_ms=env.enqueued_at,
    )
    assert again == env


MINIMAL = b'{"v":1,"id":"j","queue":"q","kind":"k","priority":1,"enqueued_at":1,"args":'
DEEP_EMPTY = "[" * MAX_ARGS_DEPTH + "]" * MAX_ARGS_DEPTH


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(MINIMAL + b"18446744073709551616}", id="args-int-beyond-64-bits-is-a-float"),
        pytest.param(MINIMAL + b"[-9223372036854775809, 18446744073709551615]}", id="args-int-64-edges"),
        pytest.param(MINIMAL + b"1e400}", id="args-infinite-float"),
        pytest.param(MINIMAL + b'"\\\\ud800"}', id="args-escaped-backslash"),
        pytest.param(MINIMAL + b'"\\ud800\\udc00 \\ud83d\\ude00"}', id="args-surrogate-pairs"),
        pytest.param(MINIMAL + b'"\\x"}', id="args-bad-escape"),
        pytest.param(MINIMAL + b'"\\ud800"}', id="args-lone-surrogate"),
        pytest.param(MINIMAL + DEEP_EMPTY.encode() + b"}", id="args-empty-list-at-the-deepest-level"),
        pytest.param(MINIMAL + b"[" + DEEP_EMPTY.encode() + b"]}", id="args-one-level-too-deep"),
        pytest.param(MINIMAL + b"[" + b"[1]," * 100 + b"[]]}", id="args-many-brackets-shallow"),
        pytest.param(MINIMAL + b'"' + b"[" * 100 + b'"}', id="args-brackets-in-a-string"),
        pytest.param(MINIMAL + b'null,"queue":"BAD","queue":"ok"}', id="duplicate-key-last-valid"),
        pytest.param(MINIMAL + b'null,"queue":"ok","queue":"BAD"}', id="duplicate-key-last-invalid"),
        pytest.param(MINIMAL + b'null,"args":1}', id="duplicate-args"),
        pytest.param(
            MINIMAL + b'null,"meta":{' + b",".join(b'"k%d":"v"' % (i % 16) for i in range(20)) + b"}}",
            id="meta-17-pairs-16-keys",
        ),
        pytest.param(MINIMAL + b'null,"graph":{"id":"g","id":"h"}}', id="graph-duplicate-id"),
        pytest.param(MINIMAL + b'null,"graph":{"node":"n","id":"g"}}', id="graph-key-order"),
        pytest.param(MINIMAL + b'null,"meta":{"b":"2","a":"1"}}', id="meta-key-order"),
        pytest.param(MINIMAL + b'null,"meta":{"a":"' + "é😀".encode() * 128 + b'"}}', id="meta-256-chars"),
        pytest.param(MINIMAL + b'null,"meta":{"a":"' + "é😀".encode() * 128 + b'x"}}', id="meta-257-chars"),
        pytest.param(MINIMAL + b'null,"run_at":5,"expires_at":5}', id="expires-equals-run-at"),
        pytest.param(MINIMAL + b'null,"canary":false}', id="canary-false"),
        pytest.param(MINIMAL + b'null,"excl":null}', id="excl-null"),
        pytest.param(MINIMAL + b'null,"v":true}', id="v-true"),
        pytest.param(MINIMAL + b"null}\n ", id="trailing-whitespace"),
        pytest.param(b"\xef\xbb\xbf" + MINIMAL + b"null}", id="bom"),
        pytest.param(MINIMAL + b'"\xc0\x80"}', id="overlong-utf8"),
        pytest.param(MINIMAL + b'"\x7f\x01"}', id="control-character"),
        pytest.param(MINIMAL.replace(b'"priority":1', b'"priority":-0') + b"null}", id="minus-zero-int"),
        pytest.param(MINIMAL.replace(b'"id":"j"', b'"id":"j\\n"') + b"null}", id="id-escaped-newline"),
    ],
)
def test_edge_documents_get_one_verdict_from_both_paths(raw: bytes) -> None:
    assert _outcome(_decoded(raw)) == _outcome(_slow(raw))


@FAST
@given(st.binary(max_size=300) | st.builds(lambda tail: MINIMAL + tail + b"}", st.binary(max_size=40)))
def test_arbitrary_bytes_get_one_verdict_from_both_paths(data: bytes) -> None:
    assert _outcome(_decoded(data)) == _outcome(_slow(data))


@FAST
@given(envelopes())
def test_round_trips_take_the_fast_path_with_the_same_values(env: Envelope) -> None:
    raw = encode(env)
    assert _outcome(_decoded(raw)) == _outcome(_slow(raw))
    kwargs = {k: getattr(env, k) for k in ("id", "priority", *OPTIONAL)}
    fast = _new(queue=env.queue, kind=env.kind, args=env.args, at_ms=env.enqueued_at, **kwargs)
    with _precise_checks_only():
        slow = _new(queue=env.queue, kind=env.kind, args=env.args, at_ms=env.enqueued_at, **kwargs)
    assert _new_outcome(fast) == _new_outcome(slow)
    assert fast == env


NEW_ENVELOPE_EDGES: list[dict[str, Any]] = [
    {"args": {"big": 2**64}},
    {"args": {"big": 2**64 - 1, "small": -(2**63)}},
    {"args": {1: "non-string key"}},
    {"args": (1, [2], {"t": (3,)})},
    {"args": [[]] * 100},
    {"args": [DEEP_EMPTY]},
    {"args": json.loads(DEEP_EMPTY)},
    {"args": [json.loads(DEEP_EMPTY)]},
    {"args": "[" * 100},
    {"args": float("nan")},
    {"priority": True},
    {"priority": 1.0},
    {"priority": 2**63},
    {"priority": -(2**63)},
    {"run_at": 5, "expires_at": 5},
    {"delay_ms": 5, "expires_at": 5},
    {"max_attempts": 0},
    {"lease_ms": 99.5},
    {"meta": {"a": "x" * 256}},
    {"meta": {"a": "x" * 257}},
    {"meta": {1: "x"}},
    {"meta": {"a": 1}},
    {"meta": {f"k{i}": "v" for i in range(17)}},
    {"meta": []},
    {"graph": {"node": "n", "id": "g"}},
    {"graph": {"id": "g"}},
    {"graph": {"id": "g", "node": "n", "x": "y"}},
    {"graph": {"id": 1, "node": "n"}},
    {"graph": []},
    {"excl": ""},
    {"excl": 7},
    {"trace": TRACE.upper()},
    {"trace": TRACE + "\n"},
    {"canary": 1},
    {"canary": "yes"},
    {"canary": 0},
    {"id": "has space"},
    {"id": "x\n"},
    {"id": 5},
    {"queue": "Q"},
    {"queue": None},
    {"kind": ["k"]},
]


@pytest.mark.parametrize("kwargs", NEW_ENVELOPE_EDGES, ids=lambda kw: repr(kw)[:60])
def test_new_envelope_edges_get_one_verdict_from_both_paths(kwargs: dict[str, Any]) -> None:
    call = {"queue": "q", "kind": "k", "id": "j", "at_ms": 1_000, **kwargs}
    fast = _new(**call)
    with _precise_checks_only():
        slow = _new(**call)
    assert _new_outcome(fast) == _new_outcome(slow)
