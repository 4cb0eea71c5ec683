"""What the gateway's audit middleware records as a call's count (``kafkagate/audit.py``)."""

from __future__ import annotations

import pytest
from aiohttp import web

from jqruntime.http import json_response
from kafkagate.audit import count_of


@pytest.mark.parametrize(
    ("response", "count"),
    [
        (json_response({"queue": "q", "retried": 7}), 7),
        (json_response({"queue": "q", "purged": 0}), 0),
        (json_response({"canceled": True, "state": "canceled"}), 1),
        (json_response({"id": "j", "outcome": "already_completed", "changed": False}), 0),
        (json_response({"id": "g", "state": "running", "released": 3}), 3),
        (json_response({"queue": "q", "config": {"paused": True}}), 1),  # no count said: it succeeded
        (json_response({"error": {"code": "queue_not_found"}}, status=404), 0),
        (web.Response(status=204), 1),
        (web.Response(body=b"{not json", status=200), 1),
    ],
)
def test_the_count_is_what_the_answer_says_else_one_per_success(response: web.Response, count: int) -> None:
    assert count_of(response) == count
