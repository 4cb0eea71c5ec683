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
from jqcore.settings import TraceSettings, load
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
        from jqcore.settings import TraceSettings, load
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
