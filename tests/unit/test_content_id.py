"""Content ids (Slack's dedup rule): one function for the gateway and the Python client."""

from __future__ import annotations

import pytest

from jqcore.envelope import content_id, validate_name
from jqruntime.client.http import _named


def test_the_id_is_the_work_not_its_spelling() -> None:
    a = content_id("reports", "monthly", {"user": 7, "month": "2026-11", "opts": {"b": 1, "a": 2}})
    b = content_id("reports", "monthly", {"opts": {"a": 2, "b": 1}, "month": "2026-11", "user": 7})
    assert a == b
    assert a.startswith("c-")
    assert len(a) == 42
    assert validate_name("id", a) == a
    others = {
        content_id("reports", "monthly", {"user": 8, "month": "2026-11", "opts": {"b": 1, "a": 2}}),
        content_id("reports2", "monthly", {"user": 7, "month": "2026-11", "opts": {"b": 1, "a": 2}}),
        content_id("reports", "weekly", {"user": 7, "month": "2026-11", "opts": {"b": 1, "a": 2}}),
        content_id("reports", "monthly", {"user": 7, "month": "2026-11", "opts": {"b": 1, "a": 2}}, "k"),
    }
    assert a not in others
    assert len(others) == 4


def test_the_client_names_jobs_as_the_gateway_would() -> None:
    job = {"kind": "monthly", "args": [1, 2]}
    assert _named("q", job, content=True)["id"] == content_id("q", "monthly", [1, 2])
    keyed = _named("q", {**job, "dedup_key": "run-1"}, content=False)
    assert keyed == {**job, "id": content_id("q", "monthly", [1, 2], "run-1")}, "the key is used up"
    assert _named("q", job, content=False)["id"] != _named("q", job, content=False)["id"]
    assert _named("q", {**job, "id": "mine"}, content=True)["id"] == "mine"
    with pytest.raises(ValueError, match="not both"):
        _named("q", {**job, "id": "mine", "dedup_key": "k"}, content=False)
