"""Traces across the hops (OpenTelemetry): gateway → Kafka → relay → Redis → worker, one place for all of it.

Opt-in (:class:`~jqcore.settings.observe.TraceSettings`: OpenTelemetry's ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER``, ``OTEL_TRACES_SAMPLER_ARG``, ``OTEL_SDK_DISABLED``; jobq's
``JOBQ_TRACE_*`` names as aliases). Off, nothing is installed: the
OpenTelemetry API keeps its no-op tracer, the helpers below return shared do-nothing objects after one
check of a module flag, the gateway adds no ``trace`` to envelopes (their bytes are exactly the ones built
from the client's fields) and no traceparent is ever formatted or parsed. OpenTelemetry is imported only
once tracing is on: a worker or client installed without the ``tracing`` extra runs without it.

On, each service calls :func:`setup_tracing` once at start-up; the spans follow OpenTelemetry's guidance
for messaging (a job is a message, its envelope's ``trace`` field its creation context):

* ``send <queue>`` (PRODUCER, gateway, one per job): where a job's trace starts, as a child of the job's
  own ``trace`` when the client gave one, else of the request's ``traceparent`` header, else a new trace.
  Its context is written into the envelope's ``trace`` field; it ends when Kafka confirmed the record.
* ``relay <queue>`` (CONSUMER, relay, one per job carrying a *sampled* context): the write into Redis,
  a child of the envelope's context; ``jobq.outcome`` says what the engine did (stored, duplicate, ...).
  Per job rather than one span per batch with links: the relay hop then appears inside each job's trace
  (a batch span would sit in a trace of its own, found only by following links), and the cost is paid
  only for sampled jobs (``sample_ratio`` bounds it); jobs without a sampled context cost one string test.
* ``process <queue>`` (CONSUMER, worker, one per attempt): attempt 1 is a child of the envelope's
  context; each retry (attempt ≥ 2) starts a new trace whose span links to the envelope's context, so the
  retries of a job are not nested under one long-lived parent. A failed attempt records the exception and
  an error status. The span is the current one while the handler runs: a handler's own spans nest in it.

Attributes: ``messaging.system="jobq"``, ``messaging.destination.name`` (queue), ``messaging.message.id``
(job id), ``messaging.operation.type`` / ``.name``, ``jobq.kind``, and on runs ``jobq.attempt``.
New traces are sampled at the sampler's ratio (a retry's new trace is recorded whenever the context it
links to was); with a ``parentbased_*`` sampler (the default) a span with a parent follows the parent's
decision.

Contexts cross a hop as W3C trace-context headers, read and written by OpenTelemetry's
``TraceContextTextMapPropagator`` on a dict carrier (``traceparent`` and ``tracestate``): a request's
``tracestate`` stays on the gateway's span, and a handler's outgoing calls inject the run span's. The
envelope's ``trace`` field (envelope v1) holds the ``traceparent`` only: a vendor's ``tracestate`` does not
travel through Kafka and Redis with the job (a field for it would be a new envelope version).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from jqcore.envelope import Envelope
from jqcore.extras import require
from jqcore.log import get_logger
from jqcore.settings.observe import TraceSettings

if TYPE_CHECKING:  # the tracing extra's: imported where a span is made, i.e. only once tracing is on
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Link, Span, SpanContext, Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "EnqueueSpans",
    "RelaySpans",
    "carrier",
    "enabled",
    "enqueue_spans",
    "relay_write_spans",
    "run_failed",
    "run_outcome",
    "run_span",
    "setup_tracing",
    "shutdown_tracing",
    "trace_id",
    "traceparent",
    "tracer",
]

log = get_logger("jqruntime.tracing")

SYSTEM = "jobq"
INSTRUMENTATION = "jobq"

_enabled = False
"""The one check every per-job helper makes first."""
_tracer: Tracer | None = None
_provider: TracerProvider | None = None
_headers: TraceContextTextMapPropagator | None = None


# ---- set-up ----------------------------------------------------------------------------------------


def setup_tracing(service_name: str, settings: TraceSettings, exporter: SpanExporter | None = None) -> bool:
    """Turn tracing on for this process when ``settings`` say so (or an ``exporter`` is given); True if on.

    ``service_name`` is the service's own name (``settings.service_name`` overrides it). ``exporter``:
    export to it synchronously instead of OTLP (tests pass the SDK's ``InMemorySpanExporter``). Off (no
    endpoint, no exporter) installs nothing and leaves an earlier set-up of this process as it is. Several
    services of one process (tests, a demo) share the first set-up's provider: a later call reuses it, only
    adding its ``exporter``. The SDK provider also becomes OpenTelemetry's global one when none was set,
    so handlers' own spans (``opentelemetry.trace.get_tracer``) nest in the run span.
    """
    global _enabled, _tracer, _provider, _headers
    if exporter is None and not settings.enabled:
        return _enabled
    require("tracing (OTEL_EXPORTER_OTLP_ENDPOINT)", "tracing")
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    if _provider is None:
        name = settings.service_name or service_name
        _provider = _new_provider(name, settings.ratio, parent_based=settings.parent_based)
        if settings.enabled:
            _provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(settings.otlp_endpoint)))
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            trace.set_tracer_provider(_provider)
        log.info(
            "tracing on",
            service=name,
            endpoint=settings.otlp_endpoint,
            sampler=settings.sampler,
            ratio=settings.ratio,
        )
    if exporter is not None:
        _provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracer = _provider.get_tracer(INSTRUMENTATION)
    _headers = _w3c()
    _enabled = True
    return True


def shutdown_tracing() -> None:
    """Turn this process's tracing off again (flushing what was recorded): the helpers go back to doing
    nothing. OpenTelemetry's global provider cannot be unset; it stays, shut down."""
    global _enabled, _tracer, _provider
    _enabled, _tracer = False, None
    provider, _provider = _provider, None
    if provider is not None:
        provider.shutdown()


def enabled() -> bool:
    return _enabled


def tracer() -> Tracer:
    """This process's jobq tracer (the API's no-op tracer while tracing is off; needs the tracing extra)."""
    if _tracer is not None:
        return _tracer
    require("jqruntime.tracing.tracer()", "tracing")
    from opentelemetry import trace

    return trace.NoOpTracer()


def _new_provider(service_name: str, ratio: float, *, parent_based: bool = True) -> TracerProvider:
    """An SDK provider whose new traces are recorded at ``ratio`` (a retry's whenever the trace it links
    to was); ``parent_based``: a span with a parent follows the parent's decision, else ``ratio`` decides
    for every span (``OTEL_TRACES_SAMPLER=always_off``, ratio 0 and not parent-based: nothing at all)."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import (
        ALWAYS_OFF,
        Decision,
        ParentBased,
        Sampler,
        SamplingResult,
        TraceIdRatioBased,
    )
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.span import TraceState
    from opentelemetry.util.types import Attributes

    class LinkedOrRatio(Sampler):
        """Root spans: recorded when a context they link to was (a retry of a recorded job), else at
        ``ratio``."""

        def __init__(self) -> None:
            self._ratio = TraceIdRatioBased(ratio)

        def should_sample(
            self,
            parent_context: Context | None,
            trace_id: int,
            name: str,
            kind: SpanKind | None = None,
            attributes: Attributes = None,
            links: Sequence[Link] | None = None,
            trace_state: TraceState | None = None,
        ) -> SamplingResult:
            if links and any(link.context.trace_flags.sampled for link in links):
                return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
            return self._ratio.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )

        def get_description(self) -> str:
            return f"LinkedOrRatio{{{ratio}}}"

    resource = Resource.create({SERVICE_NAME: service_name})  # OTEL_RESOURCE_ATTRIBUTES are merged in
    if parent_based:
        sampler: Sampler = ParentBased(LinkedOrRatio())
    else:
        sampler = LinkedOrRatio() if ratio > 0 else ALWAYS_OFF
    return TracerProvider(sampler=sampler, resource=resource)


def _otlp_exporter(endpoint: str) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    url = endpoint.rstrip("/")
    return OTLPSpanExporter(endpoint=url if url.endswith("/v1/traces") else f"{url}/v1/traces")


# ---- W3C trace context ---------------------------------------------------------------------------


def _w3c() -> TraceContextTextMapPropagator:
    """OpenTelemetry's W3C trace-context propagator (made on first use: only where the API is installed)."""
    global _headers
    if _headers is None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _headers = TraceContextTextMapPropagator()
    return _headers


def carrier(ctx: SpanContext) -> dict[str, str]:
    """The W3C headers of a span context, as the propagator writes them: ``traceparent``, and
    ``tracestate`` when the context has one."""
    out: dict[str, str] = {}
    _w3c().inject(out, context=_under(ctx))
    return out


def traceparent(ctx: SpanContext) -> str:
    """The W3C ``traceparent`` value of a span context (what the envelope's ``trace`` field holds)."""
    return carrier(ctx)["traceparent"]


def _context_of(value: str | None, state: str | None = None) -> SpanContext | None:
    """The remote span context of a ``traceparent`` (an envelope's ``trace``, checked by the envelope's
    decoder) and a ``tracestate``, as the propagator reads them; None without one, or for what W3C calls
    invalid (version ff, all-zero ids)."""
    if value is None:
        return None
    from opentelemetry.trace import get_current_span

    headers = {"traceparent": value} if state is None else {"traceparent": value, "tracestate": state}
    ctx = get_current_span(_w3c().extract(headers)).get_span_context()
    return ctx if ctx.is_valid else None


def _under(ctx: SpanContext) -> Context:
    from opentelemetry.trace import NonRecordingSpan, set_span_in_context

    return set_span_in_context(NonRecordingSpan(ctx))


def _sampled(value: str | None) -> bool:
    """The envelope carries a context whose sampled flag is set (the flag is bit 0 of the last byte)."""
    return value is not None and value[-1] in "13579bdf"


def _attributes(env: Envelope, operation: str, kind: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": kind,
        "messaging.operation.name": operation,
        "messaging.destination.name": env.queue,
        "messaging.message.id": env.id,
        "jobq.kind": env.kind,
    }


def _fail(span: Span, exc: BaseException, description: str | None = None) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, description or f"{type(exc).__name__}: {exc}"[:500]))


class _Spans:
    """Spans that end together when the ``with`` block ends (with the exception that ended it, if any)."""

    def __init__(self) -> None:
        self._spans: list[Span] = []

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for span in self._spans:
            if exc is not None:
                _fail(span, exc)
            span.end()


# ---- gateway -------------------------------------------------------------------------------------


class EnqueueSpans(_Spans):
    """The PRODUCER spans of one enqueue request, one per job. ``stamp`` (None while tracing is off) starts
    a job's span and returns its envelope with the span's context as ``trace``; the spans end when the
    request's ``with`` block does."""

    def __init__(self, parent: Context | None) -> None:
        super().__init__()
        self._parent = parent
        self.stamp: Callable[[Envelope], Envelope] | None = self._stamp if parent is not None else None

    def __enter__(self) -> EnqueueSpans:
        return self

    def _stamp(self, env: Envelope) -> Envelope:
        from opentelemetry.trace import SpanKind

        assert _tracer is not None  # stamping happens only while tracing is on
        own = _context_of(env.trace)  # the client's context for this job wins over the request's header
        span = _tracer.start_span(
            f"send {env.queue}",
            context=_under(own) if own is not None else self._parent,
            kind=SpanKind.PRODUCER,
            attributes=_attributes(env, "send", "send"),
        )
        self._spans.append(span)
        return dataclasses.replace(env, trace=traceparent(span.get_span_context()), raw=None)

    def delivered(self, delivered: Sequence[Any]) -> None:
        """Where Kafka put each job (``jqruntime.kafka.Delivered``, in the order the jobs were stamped)."""
        for span, where in zip(self._spans, delivered, strict=False):
            if span.is_recording():
                span.set_attribute("messaging.destination.partition.id", str(where.partition))
                span.set_attribute("messaging.kafka.offset", where.offset)


_NO_ENQUEUE = EnqueueSpans(None)


def enqueue_spans(headers: Mapping[str, str]) -> EnqueueSpans:
    """The gateway's spans for one request (``headers``: the request's, for a ``traceparent``)."""
    if not _enabled or _headers is None:
        return _NO_ENQUEUE
    return EnqueueSpans(_headers.extract(headers))


# ---- relay ---------------------------------------------------------------------------------------


class _EngineOutcome(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def reason(self) -> str | None: ...


class RelaySpans(_Spans):
    """The relay's write of a batch into Redis: a CONSUMER span per job with a sampled context."""

    def __init__(self, by_id: dict[str, Span]) -> None:
        super().__init__()
        self._by_id = by_id
        self._spans = list(by_id.values())

    def __enter__(self) -> RelaySpans:
        return self

    def outcomes(self, outcomes: Iterable[_EngineOutcome]) -> None:
        """What the engine did with each job (``jqengine.models.EnqueueOutcome``)."""
        if not self._by_id:
            return
        for o in outcomes:
            span = self._by_id.get(o.id)
            if span is None:
                continue
            span.set_attribute("jobq.outcome", o.outcome)
            if o.outcome == "refused":
                from opentelemetry.trace import Status, StatusCode

                span.set_status(Status(StatusCode.ERROR, f"refused: {o.reason}"))


_NO_RELAY = RelaySpans({})


def relay_write_spans(topic: str, envelopes: Iterable[Envelope]) -> RelaySpans:
    """Spans for writing ``envelopes`` (read from ``topic``) into Redis, started now."""
    if not _enabled or _tracer is None:
        return _NO_RELAY
    from opentelemetry.trace import SpanKind

    by_id: dict[str, Span] = {}
    for env in envelopes:
        if not _sampled(env.trace) or env.id in by_id:
            continue
        ctx = _context_of(env.trace)
        if ctx is None:
            continue
        attributes = _attributes(env, "relay", "process")
        attributes["jobq.topic"] = topic
        by_id[env.id] = _tracer.start_span(
            f"relay {env.queue}", context=_under(ctx), kind=SpanKind.CONSUMER, attributes=attributes
        )
    return RelaySpans(by_id) if by_id else _NO_RELAY


# ---- worker --------------------------------------------------------------------------------------

_NO_RUN: AbstractContextManager[Span | None] = nullcontext(None)


def run_span(envelope: Envelope, attempt: int) -> AbstractContextManager[Span | None]:
    """The span of one attempt, current while the handler runs (a child of the envelope's context on
    attempt 1, a new trace linked to it on a retry); an exception escaping it is recorded. None while
    tracing is off (the worker then needs no OpenTelemetry installed)."""
    if not _enabled or _tracer is None:
        return _NO_RUN
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, SpanKind

    ctx = _context_of(envelope.trace)
    links: list[Link] | None = None
    if ctx is not None and attempt <= 1:
        parent = _under(ctx)
    else:
        parent = Context()  # a root, whatever is current
        if ctx is not None:
            links = [Link(ctx, {"jobq.link": "enqueue"})]
    attributes = _attributes(envelope, "process", "process")
    attributes["jobq.attempt"] = attempt
    return _tracer.start_as_current_span(
        f"process {envelope.queue}",
        context=parent,
        kind=SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
    )


def run_failed(span: Span | None, exc: BaseException, outcome: str) -> None:
    """The attempt failed (``outcome``: retried, failed, timeout): the exception and an error status."""
    if span is not None and span.is_recording():
        _fail(span, exc, f"{outcome}: {type(exc).__name__}: {exc}"[:500])


def trace_id(span: Span | None, trace: str | None) -> str | None:
    """The trace id (32 hex digits) an attempt's log lines carry: its run span's while tracing is on, else
    the one of the envelope's ``trace`` (the job's creation context, a traceparent); None without either."""
    if span is not None:
        ctx = span.get_span_context()
        if ctx.is_valid:
            return f"{ctx.trace_id:032x}"
    if trace is None or len(trace) < 35:
        return None
    return trace[3:35]


def run_outcome(span: Span | None, outcome: str) -> None:
    """How the attempt ended (``worker.execute.Outcome.label``)."""
    if span is not None and span.is_recording():
        span.set_attribute("jobq.outcome", outcome)
