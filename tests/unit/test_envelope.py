"""Envelope v1: golden files, the JSON Schema agreeing with the code, round trips and fuzzing."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jqcore.envelope import (
    MAX_ENVELOPE_BYTES,
    Envelope,
    decode,
    encode,
    new_envelope,
    record_key,
)
from jqcore.errors import EnvelopeError

GOLDEN = Path(__file__).parents[1] / "fixtures" / "envelopes"
INVALID = GOLDEN / "invalid"
EXPECTED: dict[str, dict[str, Any]] = json.loads((INVALID / "expected.json").read_text())
SCHEMA = json.loads((Path(__file__).parents[2] / "jqcore" / "schema" / "envelope.v1.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

VALID_FILES = sorted(GOLDEN.glob("*.json"))
INVALID_FILES = sorted(p for p in INVALID.glob("*.json") if p.name != "expected.json")


def test_every_invalid_golden_has_an_expectation() -> None:
    assert {p.name for p in INVALID_FILES} == set(EXPECTED)
    assert len(VALID_FILES) >= 5


@pytest.mark.parametrize("path", VALID_FILES, ids=lambda p: p.stem)
def test_valid_golden_decodes_and_reencodes_byte_for_byte(path: Path) -> None:
    raw = path.read_bytes()
    env = decode(raw)
    assert encode(env) == raw, "the producer's bytes must pass through unchanged"
    VALIDATOR.validate(orjson.loads(raw))
    again = decode(orjson.dumps(env.to_dict()))
    assert again == env


@pytest.mark.parametrize("path", INVALID_FILES, ids=lambda p: p.stem)
def test_invalid_golden_fails_with_the_expected_code_and_field(path: Path) -> None:
    expected = EXPECTED[path.name]
    with pytest.raises(EnvelopeError) as info:
        decode(path.read_bytes())
    assert info.value.code == expected["code"]
    assert expected["field"] in {f.field for f in info.value.fields}
    schema_valid = expected.get("schema_valid", False)
    if schema_valid == "not_json":
        return
    doc = json.loads(path.read_bytes())
    assert VALIDATOR.is_valid(doc) is schema_valid, "schema and decoder must agree"


def test_args_bytes_survive_even_where_parsing_is_lossy() -> None:
    raw = (GOLDEN / "escapes.json").read_bytes()
    assert b"123456789012345678901234567890" in encode(decode(raw))
    assert b"\\u2028" in encode(decode(raw))


def test_oversize_is_refused_before_parsing() -> None:
    raw = b'{"pad":"' + b"x" * MAX_ENVELOPE_BYTES + b'"}'
    with pytest.raises(EnvelopeError) as info:
        decode(raw)
    assert info.value.code == "envelope_oversize"


def test_new_envelope_defaults() -> None:
    env = new_envelope("emails", "email.send", {"to": "a"}, at_ms=1_000)
    assert env.priority == env.enqueued_at == 1_000
    assert env.run_at is None
    assert env.meta == {}
    assert not env.canary
    delayed = new_envelope("emails", "email.send", None, delay_ms=500, at_ms=1_000)
    assert delayed.run_at == 1_500
    with pytest.raises(EnvelopeError) as info:
        new_envelope("emails", "email.send", None, delay_ms=5, run_at=10)
    assert info.value.fields[0].field == "delay_ms"
    assert new_envelope("q", "k").id != new_envelope("q", "k").id


def test_record_key_is_excl_else_id() -> None:
    assert record_key(new_envelope("q", "k", id="j1")) == b"j1"
    assert record_key(new_envelope("q", "k", id="j1", excl="acct-7")) == b"acct-7"


def test_error_names_every_bad_field() -> None:
    with pytest.raises(EnvelopeError) as info:
        decode(b'{"v":1,"id":"","queue":"Q","kind":"k","args":1,"priority":"x","enqueued_at":-1}')
    assert {f.field for f in info.value.fields} == {"id", "queue", "priority", "enqueued_at"}
    assert "priority" in info.value.message


# ---- properties -------------------------------------------------------------------------------------

ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,20}", fullmatch=True)
queues = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
ms = st.integers(0, 253_402_300_799_999)
meta = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
    st.text(min_size=1, max_size=10).filter(lambda s: "{" not in s and "}" not in s),
    max_size=4,
)


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    run_at = draw(st.none() | st.integers(0, 10**13))
    expires_at = draw(st.none() | st.integers((run_at or 0) + 1, 10**13 + 1))
    return new_envelope(
        draw(queues),
        draw(ids),
        draw(json_values),
        id=draw(ids),
        priority=draw(st.none() | st.integers(-(2**63), 2**63 - 1)),
        run_at=run_at,
        expires_at=expires_at,
        max_attempts=draw(st.none() | st.integers(1, 1000)),
        lease_ms=draw(st.none() | st.integers(100, 86_400_000)),
        meta=draw(meta),
        excl=draw(st.none() | ids),
        canary=draw(st.booleans()),
        at_ms=draw(ms),
    )


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(envelopes())
def test_round_trip(env: Envelope) -> None:
    raw = encode(env)
    back = decode(raw)
    assert back == env
    assert encode(back) == raw
    VALIDATOR.validate(orjson.loads(raw))


@settings(max_examples=200)
@given(st.binary(max_size=300))
def test_garbage_bytes_only_raise_envelope_error(data: bytes) -> None:
    with contextlib.suppress(EnvelopeError):
        decode(data)


FIELDS = [
    "v",
    "id",
    "queue",
    "kind",
    "args",
    "priority",
    "enqueued_at",
    "run_at",
    "expires_at",
    "max_attempts",
    "lease_ms",
    "meta",
    "excl",
    "graph",
    "trace",
    "canary",
    "bogus",
]


@st.composite
def mutated_documents(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = draw(envelopes()).to_dict()
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(FIELDS))
        if draw(st.booleans()) and name in doc:
            del doc[name]
        else:
            doc[name] = draw(json_values)
    return doc


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_documents())
def test_mutations_agree_with_the_schema_and_raise_only_envelope_error(doc: dict[str, Any]) -> None:
    raw = orjson.dumps(doc)
    try:
        decode(raw)
        accepted = True
    except EnvelopeError:
        accepted = False
    schema_ok = VALIDATOR.is_valid(doc)
    expires_rule = doc.get("expires_at") is not None and doc.get("run_at") is not None
    if not expires_rule:  # the one cross-field rule JSON Schema does not express
        assert accepted is schema_ok, f"decoder {accepted} vs schema {schema_ok} for {doc}"
