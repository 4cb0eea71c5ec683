"""Traces across the hops (``jqruntime/tracing.py``): a job sent over HTTP through the real gateway, Kafka,
relay, Redis, scheduler and a worker pool leaves one trace from the caller's ``traceparent`` through the
enqueue, the relay's write and the first run; its retry starts a new trace linked to the enqueue span.

Only the span exporter is a test double (the SDK's ``InMemorySpanExporter``, installed once for this
module); every server is real. OpenTelemetry's global provider can be set once per process: tracing is
turned off again after the module (``shutdown_tracing``), so later tests see the helpers' no-ops."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from jqcore.backoff import Backoff
from jqcore.envelope import decode
from jqcore.routing import Route, RoutingSettings
from jqcore.settings.observe import TraceSettings
from jqcore.testsignal import enable_all
from jqengine import Engine
from jqrelay.main import RelayService
from jqruntime import tracing
from jqsched.service import SchedulerService
from kafkagate.main import GateService
from worker.pool import Pool, PoolConfig
from worker.registry import Registry, current_job

FAST = Backoff(base_s=0.05, factor=1.0, cap_s=0.05, jitter=False)


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on for this module's services (all in this process), spans kept in memory."""
    spans = InMemorySpanExporter()
    assert tracing.setup_tracing("jobq-tests", TraceSettings(), exporter=spans)
    try:
        yield spans
    finally:
        tracing.shutdown_tracing()


@pytest.fixture
async def gateway(
    prefix: str,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    make_relay: Callable[..., RelayService],
    scheduler: SchedulerService,
    exporter: InMemorySpanExporter,
) -> AsyncIterator[str]:
    """HTTP → gateway → Kafka → relay → Redis for ``<prefix>*``, with the scheduler (retry promotion)."""
    topic = make_topic("jobs", partitions=2)
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    async with make_gate(routing) as gate, make_relay(topic):
        yield gate.url


def _of(exporter: InMemorySpanExporter, job_id: str) -> list[ReadableSpan]:
    return [
        s for s in exporter.get_finished_spans() if (s.attributes or {}).get("messaging.message.id") == job_id
    ]


def _one(spans: list[ReadableSpan], name: str, **attributes: Any) -> ReadableSpan:
    found = [
        s
        for s in spans
        if s.name == name and all((s.attributes or {}).get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, attributes, [(s.name, dict(s.attributes or {})) for s in spans])
    return found[0]


def _hex(value: int, width: int) -> str:
    return f"{value:0{width}x}"


async def test_a_job_is_one_trace_through_the_hops_and_its_retry_a_linked_new_one(
    gateway: str,
    exporter: InMemorySpanExporter,
    prefix: str,
    engine: Engine,
    redis: aioredis.Redis,
    token: str,
) -> None:
    q = f"{prefix}.q"
    registry = Registry()

    @registry.job("tr.flaky", queue=q, backoff=FAST)
    async def flaky() -> str:
        if current_job().attempt == 1:
            raise ValueError("the first try fails")
        return "done"

    @registry.job("tr.ok", queue=q)
    async def ok() -> str:
        return "done"

    caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    own_trace, own_span = secrets.token_hex(16), secrets.token_hex(8)
    own = f"00-{own_trace}-{own_span}-01"  # a job that brings its own context: it wins over the header
    jobs = [{"kind": "tr.flaky"}, {"kind": "tr.ok", "trace": own}]
    headers = {"Authorization": f"Bearer {token}", "traceparent": f"00-{caller_trace}-{caller_span}-01"}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.post(f"{gateway}/v1/queues/{q}/jobs", json={"jobs": jobs}) as resp,
    ):
        assert resp.status == 202, await resp.text()
        flaky_id, ok_id = (await resp.json())["ids"]

    pool = Pool(registry, engine, PoolConfig([q]), redis=redis)
    enable_all(pool.signals)
    succeeded: set[str] = set()

    def both(finished: tuple[str, str]) -> bool:
        if finished[1] == "succeeded":
            succeeded.add(finished[0])
        return succeeded == {flaky_id, ok_id}

    async with pool:
        await pool.signals.finished.wait_for(both)
    done = await engine.reads.get_jobs(q, [flaky_id, ok_id])
    assert all(i is not None and i.state == "completed" for i in done), done
    # send, relay and two runs (each span is exported as it ends, before the pool reports the job finished)
    spans = _of(exporter, flaky_id)
    assert len(spans) == 4, spans

    send = _one(spans, f"send {q}")
    relay = _one(spans, f"relay {q}")
    first = _one(spans, f"process {q}", **{"jobq.attempt": 1})
    second = _one(spans, f"process {q}", **{"jobq.attempt": 2})
    assert send.context is not None
    assert relay.context is not None
    assert first.context is not None
    assert second.context is not None

    # The enqueue span continues the caller's trace; its context is what the envelope carries.
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None
    assert _hex(send.parent.span_id, 16) == caller_span
    assert _hex(send.context.trace_id, 32) == caller_trace
    stored = decode(done[0].envelope or b"")
    assert stored.trace == tracing.traceparent(send.context)

    # One trace: relay and first run are children of the enqueue span.
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    for span in (relay, first):
        assert span.context is not None
        assert span.context.trace_id == send.context.trace_id
        assert span.kind is SpanKind.CONSUMER
        assert span.parent is not None
        assert by_id[span.parent.span_id] is send  # the chain reaches the enqueue span

    # The failed first run records the exception and an error status.
    assert first.status.status_code is StatusCode.ERROR
    assert any(
        e.name == "exception" and (e.attributes or {}).get("exception.type") == "ValueError"
        for e in first.events
    )
    assert (first.attributes or {}).get("jobq.outcome") == "failed"

    # The retry is a new trace, linked to the enqueue span, not nested under it.
    assert second.context.trace_id != send.context.trace_id
    assert second.parent is None
    assert [(link.context.trace_id, link.context.span_id) for link in second.links] == [
        (send.context.trace_id, send.context.span_id)
    ]
    assert second.status.status_code is StatusCode.UNSET
    assert (second.attributes or {}).get("jobq.outcome") == "succeeded"

    for span in spans:
        attributes = span.attributes or {}
        assert attributes["messaging.system"] == "jobq"
        assert attributes["messaging.destination.name"] == q
        assert attributes["messaging.message.id"] == flaky_id
        assert attributes["jobq.kind"] == "tr.flaky"
    assert (relay.attributes or {}).get("jobq.outcome") == "stored"

    # The job that came with its own context: its enqueue span is that context's child.
    ok_spans = _of(exporter, ok_id)
    assert len(ok_spans) == 3, ok_spans
    ok_send = _one(ok_spans, f"send {q}")
    assert ok_send.parent is not None
    assert ok_send.context is not None
    assert (_hex(ok_send.parent.trace_id, 32), _hex(ok_send.parent.span_id, 16)) == (own_trace, own_span)
    assert decode(done[1].envelope or b"").trace == tracing.traceparent(ok_send.context)
    ok_run = _one(ok_spans, f"process {q}", **{"jobq.attempt": 1})
    assert ok_run.parent is not None
    assert ok_run.parent.span_id == ok_send.context.span_id
