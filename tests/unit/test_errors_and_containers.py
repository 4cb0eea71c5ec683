"""The error base and the testcontainers definitions (built, never started: no engine here)."""

from __future__ import annotations

import pytest

from jobq.stack import containers
from jqcore.errors import BackendUnavailable, EnvelopeError, FieldError, JobqError, Retry, Snooze


def test_error_codes_and_retriable_flags() -> None:
    assert BackendUnavailable("redis down").retriable
    assert not EnvelopeError(FieldError("id", "required")).retriable
    err = EnvelopeError([FieldError("id", "required"), FieldError("queue", "bad")])
    assert err.message == "id: required; queue: bad"
    assert [f.as_dict() for f in err.fields][1] == {"field": "queue", "problem": "bad"}
    assert JobqError("x", code="custom").code == "custom"
    assert Retry(5).delay_s == 5
    assert Snooze(2.5).delay_s == 2.5


def test_container_definitions_build_without_an_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    # testcontainers asks the engine for its API version when a container object is made; there is no
    # engine here, so that one client is replaced. Nothing is started either way.
    import testcontainers.core.container as tc

    monkeypatch.setattr(tc, "DockerClient", lambda **_: object())
    defs = {d.name: d for d in containers.definitions(19092, 18500, 16379)}
    assert defs["kafka"].image.startswith("apache/kafka:")
    assert defs["consul"].image.startswith("hashicorp/consul:")
    assert defs["redis"].image.startswith("redis:")
    assert defs["kafka"].env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://127.0.0.1:19092"
    assert "noeviction" in defs["redis"].command
    for defn in defs.values():
        built = containers.build(defn)
        assert built.image == defn.image
        assert {int(p) for p in built.ports} == set(defn.ports)
