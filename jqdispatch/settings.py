"""The dispatcher's settings (``JOBQ_DISPATCHER_*``; the ``jobq dispatcher`` options override them)."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.settings.common import CommaList, QueueNames, _blank_is_unset, _read_secret_file
from jqdispatch.egress import EgressPolicy

__all__ = ["DispatcherSettings"]


class DispatcherSettings(BaseSettings):
    """The push dispatcher (``jqdispatch``, ``jobq dispatcher``, ``docs/dispatcher.md``): which queues it
    claims from, how many jobs it holds at once, where downstreams call back."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_DISPATCHER_", extra="ignore", populate_by_name=True)

    queues: QueueNames
    """Queues this dispatcher claims from (comma-separated): queues of dispatch kinds only (a job of
    another kind is handed back for a worker pool)."""
    concurrency: int = Field(100, ge=1, le=100_000)
    """Jobs held at once: POSTs under way and 202s awaiting their callback (a kind's own limit is its
    ``concurrency``, enforced across every claimer). Raise it when slow downstreams keep the dispatcher at its
    limit while jobs wait."""
    callback_url: str = Field("http://127.0.0.1:28080", pattern=r"^https?://")
    """The gateway's base URL as the downstreams reach it: each job carries its callback URLs under it."""
    callback_secret: SecretStr = Field(SecretStr(""), validation_alias=AliasChoices("JOBQ_CALLBACK_SECRET"))
    """The HMAC secret of callback tokens (``JOBQ_CALLBACK_SECRET``, the gateways' too); required, here or
    in ``JOBQ_CALLBACK_SECRET_FILE`` (a dispatcher without it refuses to start)."""
    callback_secret_file: str | None = Field(None, validation_alias=AliasChoices("JOBQ_CALLBACK_SECRET_FILE"))
    """A file holding the callback secret instead (trailing newline stripped): a mounted Secret's key, so
    the secret is not in the environment, which the dispatcher's pods share with nothing else but still
    should not hold (the Helm chart's way)."""
    lease_ms: int = Field(30_000, ge=1000)
    """Lease per claim (ms), renewed every third of it while a POST runs or a callback is awaited. Lower it
    for a crashed dispatcher's jobs to come back sooner; raise it when Redis may pause longer than a third of
    it."""
    unknown_kind_retry_s: float = Field(5.0, ge=0)
    """Seconds before a job of a kind without dispatch configuration is claimable again (by a pool). Lower it
    for such jobs to reach their pool sooner, raise it for fewer wasted claims."""
    unknown_kind_dead_after_s: float = Field(3600.0, ge=0)
    """Seconds with nobody running a kind before its jobs are dead-lettered. Raise it when a kind's consumer
    may be absent longer (a slow rollout)."""
    grace_s: float = Field(30.0, ge=0)
    """Seconds POSTs under way get to finish on SIGTERM; then they and the awaited jobs are released. Raise it
    for downstreams that answer slowly; keep it under the pod's termination grace period."""
    metrics_port: int | None = Field(None, ge=1, le=65_535)
    """Serve ``/healthz``, ``/readyz`` and ``/metrics`` on ``JOBQ_METRICS_HOST``:PORT. Set it so probes and
    Prometheus can reach the process."""
    allow_nets: CommaList = Field(default_factory=list)
    """Internal networks (CIDRs such as ``10.20.0.0/16``) and host names (``billing.internal``) the
    dispatcher may POST to, comma-separated. Without an entry, a URL whose host is or resolves to a
    loopback, link-local (cloud metadata), private (RFC 1918, ULA), carrier-grade NAT, unspecified or
    multicast address fails its attempt unsent: an admin of one queue could otherwise read internal
    services through the jobs' results. Set it when your downstreams run inside your network (a cluster's
    service range, an internal name); ``127.0.0.0/8`` for a downstream on the dispatcher's own host."""
    secrets_dir: Path | None = None
    """The folder a dispatch kind's ``auth.file`` names a file of (read at each POST: a rotated secret is
    used at once). Set it when downstream credentials are mounted as files, e.g. a Kubernetes Secret
    mounted as a volume; unset, kinds whose auth is a file fail their attempts unsent. (``auth.env`` can
    only name ``JOBQ_DISPATCH_AUTH_*`` variables of this process.)"""

    @field_validator("allow_nets")
    @classmethod
    def _nets_valid(cls, value: list[str]) -> list[str]:
        EgressPolicy.parse(value)  # a ValueError names the bad entry
        return value

    _blank = field_validator("callback_secret_file", mode="before")(_blank_is_unset)

    @model_validator(mode="after")
    def _secret_file(self) -> DispatcherSettings:
        _read_secret_file(self, "callback_secret", name="JOBQ_CALLBACK_SECRET")
        return self
