"""Tracing off costs nothing and changes nothing (``jqruntime/tracing.py``); the sampler of new traces."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import orjson
import pytest

from jqcore.envelope import encode, new_envelope
from jqcore.errors import ConfigError
from jqcore.settings.common import load
from jqcore.settings.observe import TraceSettings
from jqruntime import tracing
from kafkagate.enqueue import parse_jobs

CLIENT_TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_off_the_envelope_bytes_are_exactly_the_clients() -> None:
    assert not tracing.enabled()
    spans = tracing.enqueue_spans({"traceparent": CLIENT_TRACE})
    assert spans.stamp is None  # nothing runs per job, not even a traceparent's formatting
    jobs = [
        {"id": "j1", "kind": "k", "args": {"x": [1, 2]}},
        {"id": "j2", "kind": "k", "trace": CLIENT_TRACE},
    ]
    with spans:
        parsed = parse_jobs(
            "q", orjson.dumps({"jobs": jobs}), "application/json", max_batch=10, idempotency=None, now=5
        )
    first = new_envelope("q", "k", {"x": [1, 2]}, id="j1", at_ms=5)
    second = new_envelope("q", "k", None, id="j2", trace=CLIENT_TRACE, at_ms=5)
    assert [e.raw for e in parsed.envelopes] == [encode(first), encode(second)]
    assert b"trace" not in (parsed.envelopes[0].raw or b"")
    assert orjson.loads(parsed.envelopes[1].raw or b"")["trace"] == CLIENT_TRACE


def test_off_no_sdk_provider_is_installed_nor_the_sdk_imported() -> None:
    """In a fresh interpreter (OpenTelemetry's global provider is process-wide): the services' start-up
    call with the settings off leaves the API's defaults in place."""
    script = textwrap.dedent(
        """
        import sys
        from opentelemetry import trace
        from jqruntime import tracing
        from jqcore.envelope import new_envelope
        from jqcore.settings.common import load
        from jqcore.settings.observe import TraceSettings
        import kafkagate.main, jqrelay.main, worker.main  # noqa: F401 - the services' modules

        for service in ("kafkagate", "jqrelay", "worker"):
            assert tracing.setup_tracing(service, load(TraceSettings)) is False
        assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        assert isinstance(tracing.tracer(), trace.NoOpTracer)
        env = new_envelope("q", "k", None)
        with tracing.run_span(env, 1) as span:
            assert span is None
        assert tracing.relay_write_spans("t", [env]) is tracing.relay_write_spans("t", [])
        assert "opentelemetry.sdk.trace" not in sys.modules, "the SDK was imported"
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBQ_TRACE_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok"), done.stdout


def test_new_traces_follow_the_ratio_unless_they_link_to_a_recorded_one() -> None:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link

    provider = tracing._new_provider("unit", 0.0)
    try:
        tracer = provider.get_tracer("unit")
        recorded = tracing._context_of(CLIENT_TRACE)
        unrecorded = tracing._context_of(CLIENT_TRACE[:-2] + "00")
        assert recorded is not None
        assert unrecorded is not None
        assert not tracer.start_span("root", context=Context()).is_recording()
        retry = tracer.start_span("retry", context=Context(), links=[Link(recorded)])
        assert retry.is_recording()
        assert not tracer.start_span("retry", context=Context(), links=[Link(unrecorded)]).is_recording()
        child = tracer.start_span("child", context=tracing._under(recorded))
        assert child.is_recording()  # a parent's decision wins over the ratio
    finally:
        provider.shutdown()


def test_traceparent_round_trip() -> None:
    ctx = tracing._context_of(CLIENT_TRACE)
    assert ctx is not None
    assert tracing.traceparent(ctx) == CLIENT_TRACE
    assert tracing._context_of("00-" + "0" * 32 + "-b7ad6b7169203331-01") is None  # invalid: all-zero id
    assert tracing._context_of(None) is None


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_TRACE_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("JOBQ_TRACE_SAMPLE_RATIO", "0.25")
    settings = load(TraceSettings)
    assert (settings.enabled, settings.sample_ratio, settings.service_name) == (True, 0.25, "")
    assert not load(TraceSettings, otlp_endpoint="").enabled
    monkeypatch.setenv("JOBQ_TRACE_OTLP_ENDPOINT", "collector:4318")
    with pytest.raises(ConfigError, match="JOBQ_TRACE_OTLP_ENDPOINT"):
        load(TraceSettings)
    monkeypatch.setenv("JOBQ_TRACE_OTLP_ENDPOINT", "")
    monkeypatch.setenv("JOBQ_TRACE_SAMPLE_RATIO", "2")
    with pytest.raises(ConfigError, match="JOBQ_TRACE_SAMPLE_RATIO"):
        load(TraceSettings)


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in os.environ:
        if name.startswith(("JOBQ_TRACE_", "OTEL_")):
            monkeypatch.delenv(name)


def test_opentelemetrys_standard_variables_come_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """``OTEL_*`` are read first; jobq's ``JOBQ_TRACE_*`` names stay as aliases."""
    _clean(monkeypatch)
    monkeypatch.setenv("JOBQ_TRACE_OTLP_ENDPOINT", "http://old:4318")
    monkeypatch.setenv("JOBQ_TRACE_SERVICE_NAME", "old-name")
    monkeypatch.setenv("JOBQ_TRACE_SAMPLE_RATIO", "0.5")
    old = load(TraceSettings)
    assert (old.otlp_endpoint, old.service_name, old.sampler, old.ratio, old.parent_based) == (
        "http://old:4318",
        "old-name",
        "parentbased_traceidratio",  # jobq's default: a ratio for new traces, parents decide for the rest
        0.5,
        True,
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing-worker")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.1")
    new = load(TraceSettings)
    assert (new.otlp_endpoint, new.service_name, new.ratio, new.parent_based, new.enabled) == (
        "https://collector:4318",
        "billing-worker",
        0.1,
        False,
        True,
    )
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not load(TraceSettings).enabled


@pytest.mark.parametrize(
    ("sampler", "ratio", "parent_based"),
    [
        ("always_on", 1.0, False),
        ("always_off", 0.0, False),
        ("traceidratio", 0.25, False),
        ("parentbased_always_on", 1.0, True),
        ("parentbased_always_off", 0.0, True),
        ("parentbased_traceidratio", 0.25, True),
    ],
)
def test_each_sampler_maps_to_a_ratio_and_a_parent_rule(
    monkeypatch: pytest.MonkeyPatch, sampler: str, ratio: float, parent_based: bool
) -> None:
    _clean(monkeypatch)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")  # only the ratio samplers read it
    settings = load(TraceSettings)
    assert (settings.ratio, settings.parent_based) == (ratio, parent_based)


def test_bad_otel_values_are_named_by_the_variable_set(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean(monkeypatch)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "jaeger_remote")  # a remote sampler: not runnable here
    with pytest.raises(ConfigError, match="OTEL_TRACES_SAMPLER: Input should be"):
        load(TraceSettings)
    _clean(monkeypatch)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "half")
    with pytest.raises(ConfigError, match="OTEL_TRACES_SAMPLER_ARG: Input should be a valid number"):
        load(TraceSettings)
    _clean(monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_ENDPOINT: Value error"):
        load(TraceSettings)


def test_a_sampler_not_parent_based_decides_for_children_too() -> None:
    from opentelemetry.context import Context

    recorded = tracing._context_of(CLIENT_TRACE)
    assert recorded is not None
    off = tracing._new_provider("unit", 0.0, parent_based=False)  # OTEL_TRACES_SAMPLER=always_off
    parented_off = tracing._new_provider("unit", 0.0)  # parentbased_always_off
    try:
        assert not off.get_tracer("u").start_span("child", context=tracing._under(recorded)).is_recording()
        assert not off.get_tracer("u").start_span("root", context=Context()).is_recording()
        child = parented_off.get_tracer("u").start_span("child", context=tracing._under(recorded))
        assert child.is_recording()
    finally:
        off.shutdown()
        parented_off.shutdown()


def test_the_propagator_keeps_tracestate() -> None:
    """Contexts are read and written by OpenTelemetry's W3C propagator on a dict carrier: a vendor's
    ``tracestate`` survives the round trip (the hand-written traceparent dropped it)."""
    ctx = tracing._context_of(CLIENT_TRACE, "vendor=opaque,other=x1")
    assert ctx is not None
    assert dict(ctx.trace_state) == {"vendor": "opaque", "other": "x1"}
    assert tracing.carrier(ctx) == {"traceparent": CLIENT_TRACE, "tracestate": "vendor=opaque,other=x1"}
    assert tracing.carrier(tracing._context_of(CLIENT_TRACE) or ctx) == {"traceparent": CLIENT_TRACE}
    assert tracing._context_of("ff" + CLIENT_TRACE[2:]) is None  # version ff is invalid
    assert tracing._context_of(CLIENT_TRACE, "not a tracestate") is not None  # a bad tracestate is dropped


def test_the_gateways_span_keeps_the_requests_tracestate() -> None:
    """In a fresh interpreter (the provider is process-wide): the `send` span of a request carrying
    ``traceparent`` and ``tracestate`` is the request's child and carries its tracestate."""
    script = textwrap.dedent(
        f"""
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from jqcore.envelope import new_envelope
        from jqcore.settings.common import load
        from jqcore.settings.observe import TraceSettings
        from jqruntime import tracing

        exporter = InMemorySpanExporter()
        assert tracing.setup_tracing("kafkagate", load(TraceSettings), exporter)
        headers = {{"traceparent": "{CLIENT_TRACE}", "tracestate": "vendor=opaque"}}
        with tracing.enqueue_spans(headers) as spans:
            stamped = spans.stamp(new_envelope("q", "k", None))
        (span,) = exporter.get_finished_spans()
        assert span.parent.span_id == 0xB7AD6B7169203331, span.parent
        assert dict(span.context.trace_state) == {{"vendor": "opaque"}}
        assert stamped.trace == tracing.traceparent(span.context)  # the envelope: traceparent only
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBQ_TRACE_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok"), done.stdout
