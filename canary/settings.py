"""The canary's settings (``JOBQ_CANARY_*``)."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.settings.common import CommaList, _blank_is_unset, _read_secret_file

__all__ = ["CanarySettings"]


class CanarySettings(BaseSettings):
    """The heartbeat canary (``canary``): a heartbeat job through the gateways to every partition of
    every routed topic each round, flagging the partitions whose heartbeat ran late."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_CANARY_", extra="ignore", populate_by_name=True)

    gateways: CommaList = Field(default_factory=lambda: ["http://127.0.0.1:28080"])
    """Gateway URLs, comma-separated; ``url@az`` names a gateway's zone."""
    token: SecretStr = SecretStr("")
    """Bearer token the canary sends to the gateways (it needs the ``enqueue`` and ``read`` scopes on the
    ``canary.*`` queues, nothing more)."""
    token_file: str | None = None
    """A file holding the token instead (trailing newline stripped): a mounted Secret's key, so the token is
    not in the environment (the Helm chart's way)."""

    _blank = field_validator("token_file", mode="before")(_blank_is_unset)

    @model_validator(mode="after")
    def _token_file(self) -> CanarySettings:
        _read_secret_file(self, "token")
        return self

    az: str = ""
    """The canary's availability zone (it prefers the gateways of its own). Set it in a deployment over
    several zones."""
    interval_s: float = Field(60.0, gt=0)
    """Seconds between two rounds of heartbeats. Lower it to notice a stuck partition sooner (more heartbeat
    jobs)."""
    late_after_s: float = Field(30.0, gt=0)
    """A heartbeat not executed this long after it was sent flags its partition. Set it to the delay your
    users notice."""
    metrics_port: int | None = Field(None, ge=1, le=65_535)
    """Serve ``/healthz``, ``/readyz`` (beating: a round sent within two intervals) and ``/metrics`` on
    ``JOBQ_METRICS_HOST``:PORT. Set it so probes and Prometheus can reach the process."""
