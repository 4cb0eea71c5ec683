"""``JOBQ_QUEUES_ALLOWED``: a queue outside the allowed globs is refused by the routing every producer and
the relay share (403 ``queue_not_allowed``), so naming a queue never creates one."""

from __future__ import annotations

import pytest

from jqcore.routing import QueueNotAllowed, Route, RoutingSettings


def test_only_allowed_queues_are_routed() -> None:
    routing = RoutingSettings(
        routes=[Route(queues="*", topic="jobs.all")], queues_allowed=["billing.*", "emails"]
    )
    assert routing.route("billing.invoices") == ("jobs.all", "all")
    assert routing.route("emails")[0] == "jobs.all"
    with pytest.raises(QueueNotAllowed, match="'payments'") as refused:
        routing.route("payments")
    assert (refused.value.code, refused.value.http_status) == ("queue_not_allowed", 403)
    assert routing.route("canary.jobs.all")[0] == "jobs.all", "the canary's queues stay routed"


def test_an_empty_allowlist_allows_every_routed_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RoutingSettings().allows("anything")
    monkeypatch.setenv("JOBQ_QUEUES_ALLOWED", "a.*, b")
    assert RoutingSettings().queues_allowed == ["a.*", "b"]
