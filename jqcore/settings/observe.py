"""How a process shows itself: its logs (:class:`LogSettings`), the address of its health and metrics routes
(:class:`MetricsSettings`) and its traces (:class:`TraceSettings`); every service reads them."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["LogSettings", "MetricsSettings", "Sampler", "TraceSettings"]


class LogSettings(BaseSettings):
    """Logging (``JOBQ_LOG_LEVEL``, ``JOBQ_LOG_FORMAT``)."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_LOG_", extra="ignore")

    level: Literal["debug", "info", "warning", "error"] = "info"
    """The lowest level logged. ``debug`` to diagnose; ``warning`` for quieter logs."""
    format: Literal["console", "json"] = "console"
    """``json``: JSON lines, for production."""


class MetricsSettings(BaseSettings):
    """Where relays, schedulers, workers and canaries serve ``/healthz``, ``/readyz`` and ``/metrics``
    (``JOBQ_METRICS_HOST``); the port is each one's metrics port (``JOBQ_RELAY_METRICS_PORT``,
    ``JOBQ_SCHEDULER_METRICS_PORT``, ``JOBQ_WORKER_METRICS_PORT``, ``JOBQ_CANARY_METRICS_PORT`` or the
    command's ``--metrics-port``). Loopback by default; ``0.0.0.0`` in containers (probes come from
    outside)."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_METRICS_", extra="ignore")

    host: str = "127.0.0.1"
    """The address the health and metrics routes are served on. Set ``0.0.0.0`` in a container, where probes
    and Prometheus come from outside."""


Sampler = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]
"""OpenTelemetry's ``OTEL_TRACES_SAMPLER`` values that jobq's processes honour (the remote samplers,
``jaeger_remote`` and ``xray``, are refused: a jobq process cannot run them)."""


class TraceSettings(BaseSettings):
    """OpenTelemetry traces across the hops (``jqruntime/tracing.py``, ``docs/history.md`` "Traces"): off
    unless an OTLP endpoint is set; then the gateway, relays and workers export their spans there over
    OTLP/HTTP (protobuf). OpenTelemetry's standard variables (``OTEL_*``) are read first, jobq's own names
    (``JOBQ_TRACE_*``) are their aliases; the exporter reads its other ``OTEL_EXPORTER_OTLP_*`` settings
    (headers, timeout, compression, certificates) itself."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_TRACE_", extra="ignore", populate_by_name=True)

    otlp_endpoint: str = Field(
        "", validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT", "JOBQ_TRACE_OTLP_ENDPOINT")
    )
    """Collector base URL (``http://collector:4318``; ``/v1/traces`` is added unless given); '' = off. Set it
    to trace jobs across the hops."""
    service_name: str = Field(
        "", validation_alias=AliasChoices("OTEL_SERVICE_NAME", "JOBQ_TRACE_SERVICE_NAME")
    )
    """``service.name`` of this process's spans ('' = the service's own: kafkagate, jqrelay, worker). Set it
    to tell apart deployments that share a collector."""
    sampler: Sampler = Field(
        "parentbased_traceidratio", validation_alias=AliasChoices("OTEL_TRACES_SAMPLER", "JOBQ_TRACE_SAMPLER")
    )
    """Which spans are recorded: ``parentbased_*`` follow a parent's decision and apply the rest to new traces
    (a job's retry, whose new trace links to its first, is recorded whenever that one was);
    ``always_on``/``always_off``/``traceidratio`` apply to every span, parent or not. Change it to record
    every span of a service, or none, whatever its callers decided."""
    sample_ratio: float = Field(
        1.0, ge=0, le=1, validation_alias=AliasChoices("OTEL_TRACES_SAMPLER_ARG", "JOBQ_TRACE_SAMPLE_RATIO")
    )
    """The ratio of the ``traceidratio`` samplers: the share of new traces recorded (the others ignore it).
    Lower it to export fewer traces at high job rates."""
    sdk_disabled: bool = Field(
        False, validation_alias=AliasChoices("OTEL_SDK_DISABLED", "JOBQ_TRACE_DISABLED")
    )
    """``true``: tracing stays off whatever else is set. Set it to switch tracing off without removing its
    settings."""

    @field_validator("otlp_endpoint")
    @classmethod
    def _url(cls, v: str) -> str:
        if v and not v.startswith(("http://", "https://")):
            raise ValueError("must be empty (off) or start with http:// or https://")
        return v

    @property
    def ratio(self) -> float:
        """The share of new traces recorded, as the sampler says."""
        if self.sampler.endswith("always_on"):
            return 1.0
        if self.sampler.endswith("always_off"):
            return 0.0
        return self.sample_ratio

    @property
    def parent_based(self) -> bool:
        """A span with a parent follows the parent's decision (the ``parentbased_*`` samplers)."""
        return self.sampler.startswith("parentbased_")

    @property
    def enabled(self) -> bool:
        return bool(self.otlp_endpoint) and not self.sdk_disabled
