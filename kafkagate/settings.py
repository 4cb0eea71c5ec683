"""The gateway's settings (``JOBQ_GATE_*``)."""

from __future__ import annotations

import os

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.buckets import Rate
from jqcore.envelope import MAX_ENVELOPE_BYTES
from jqcore.settings.common import CommaList, CommaSecrets, _blank_is_unset, _read_secret_file
from jqcore.settings.kafka import ProduceBatching
from jqruntime.clientaddr import Networks, parse_networks

__all__ = ["GateSettings"]


class GateSettings(BaseSettings, ProduceBatching):
    """The gateway (``kafkagate``, ``jobq gate``, ``docs/gateway.md``): where it listens, whom it serves,
    its request limits, how its Kafka producer batches (``produce_*``)."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_GATE_", extra="ignore", populate_by_name=True)

    host: str = "127.0.0.1"
    """The address the gateway listens on. Set ``0.0.0.0`` (or the pod's address) to serve other hosts."""
    port: int = Field(28080, ge=0, lt=65536)
    """The port the gateway listens on (0: a free one)."""
    processes: int = Field(1, ge=0, le=256)
    """Gateway processes sharing ``host:port`` (``SO_REUSEPORT``: the kernel spreads connections over them); 0
    = one per CPU core it may use. Above 1 the process started is a supervisor serving nothing itself: it
    starts that many gateway processes (each with its own Kafka producer), restarts one that dies, stops them
    all gracefully on SIGTERM/SIGINT and exits 1 if they keep dying (``kafkagate.main``). ``/metrics`` then
    sums every process (prometheus-client's multiprocess mode); ``/readyz`` is the answering process's. Needs
    a fixed ``port``. Raise it when one process's CPU limits the gateway's throughput."""
    az: str = "local"
    """The availability zone this gateway runs in (reported on /healthz; clients prefer their own AZ)."""
    tokens: CommaSecrets = Field(default_factory=list)
    """Accepted bearer tokens, comma-separated; ``secret:enqueue+read`` limits one to scopes (enqueue, read,
    work (``worker``: its older name), admin; none given: all), on every queue; ``@RATE`` after the scopes
    limits its requests per gateway process (``secret:enqueue+read@200/s``, every scope: ``secret:@200/s``).
    Named tokens held to queues and kinds come from ``JOBQ_TOKENS_FILE``. With neither, every request is
    refused except the health, readiness, metrics and OpenAPI endpoints (never an open gateway by
    accident). Off loopback each secret must have at least 20 characters (the gateway refuses to start)."""
    tokens_file: str | None = None
    """A file holding ``JOBQ_GATE_TOKENS``' list instead (entries separated by commas or lines; trailing
    newline stripped): a mounted Secret's key, so no token is in the environment. Prefer
    ``JOBQ_TOKENS_FILE`` (named tokens held to queues, kinds and a rate)."""
    auth_failures: str = "30/min"
    """Bearer tokens not accepted one client address may present per gateway process: a bucket of COUNT,
    refilled at the rate (``COUNT/s``, ``/min``, ``/h``, ``/Ns``). Past it the address's requests are a 429
    ``auth_throttled`` with ``Retry-After`` before any token is compared (even a valid one waits), so a weak
    token cannot be guessed at the gateway's speed. Behind a proxy set ``trusted_proxies``, or every client
    of the proxy shares one budget."""
    trusted_proxies: CommaList = Field(default_factory=list)
    """Addresses or CIDRs of the reverse proxies in front of the gateway (comma-separated). A request from one
    of them is counted by ``auth_failures`` against the client its ``X-Forwarded-For`` names (the nearest hop
    that is not a trusted proxy); from any other peer that header is ignored. Empty: the direct peer is the
    client. Set it behind a reverse proxy, or every client of the proxy shares one budget."""
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=MAX_ENVELOPE_BYTES)
    """Largest request body, before and after decompression (413 ``body_too_large`` beyond). At least one
    largest job (``MAX_ENVELOPE_BYTES``, 1 MiB), so every job the envelope allows can be sent; a job whose
    record would exceed that is a 413 ``job_too_large`` whatever the body limit. Lower it to bound what one
    request makes a gateway read; raise it for clients that send larger batches."""
    max_batch: int = Field(10_000, gt=0)
    """Most jobs in one request (413 ``batch_too_large`` beyond). Lower it to keep each request short; raise
    it for bulk loaders."""
    produce_timeout_ms: int = Field(10_000, ge=1000)
    """How long Kafka may take to confirm a write before the request gets a 503. Raise it when Kafka confirms
    slowly on your network (brokers across zones, a failover) and clients would rather wait than retry."""
    idempotency_ttl_s: int = Field(86_400, gt=0, le=7 * 86_400)
    """How long an ``Idempotency-Key`` is remembered (at most a week: each key is one small Redis string
    living this long, so their number is bounded by the enqueue rate times this). Raise it when clients retry
    an enqueue later than that; lower it to hold fewer keys in Redis."""
    claim_wait_max_ms: int = Field(30_000, ge=0)
    """Cap on a long-poll claim's ``wait_ms``. Lower it below the idle timeout of a proxy or load balancer
    between the workers and the gateway, which would cut a longer poll."""
    redis_connections: int = Field(100, gt=0)
    """Redis connections one gateway process's requests share (per node on a Cluster). A request waits up to 2
    s for a free one, then gets a 429 ``gateway_busy`` with ``Retry-After`` (this process is saturated; Redis
    is not down). Parked long-polls use none of them. Raise it when a busy process answers ``gateway_busy``
    while Redis has room (its ``maxclients``)."""
    long_polls_max: int = Field(1000, gt=0)
    """Most long-poll claims parked at once in one gateway process; one more is a 429 ``gateway_busy`` with
    ``Retry-After``. Parked polls hold no Redis connection: one wait per process wakes them
    (``kafkagate.longpoll``). Raise it when more HTTP workers long-poll one process at once."""
    inflight_body_bytes: int = Field(64 * 1024 * 1024, ge=MAX_ENVELOPE_BYTES)
    """Request body bytes one gateway process reads and handles at once (each body counts its declared or
    received size, and again its decompressed size, until its answer); a body that would pass the budget is a
    429 ``gateway_busy`` with ``Retry-After``. A body larger than the budget itself can never fit: 413
    ``body_too_large``. Raise it when concurrent large uploads get 429s and the pod has the memory; lower it
    on a small pod."""
    token_share: float = Field(0.5, gt=0, le=1)
    """The part of each of this process's limits one token may hold at once: its parked long-polls
    (``long_polls_max``), its request body bytes in flight (``inflight_body_bytes``) and its Redis
    connections (``redis_connections``, a single Redis node). Past it that token gets 429 ``gateway_busy``
    with ``Retry-After`` while the other tokens still get in. A setting, not a constant, because the right
    part depends on who shares the gateway: half keeps one team's application from taking a limit from
    every other team (review M7); a gateway serving one application's token (or one trusted token) gives
    it everything with 1.0, or raises the limits themselves."""
    callback_secret: SecretStr = Field(SecretStr(""), validation_alias=AliasChoices("JOBQ_CALLBACK_SECRET"))
    """The HMAC secret of dispatch callback tokens, shared with the dispatchers (``jobq dispatcher``,
    ``docs/dispatcher.md``); unset: ``POST /v1/callbacks/...`` is refused (403 ``callbacks_off``)."""
    callback_secret_file: str | None = Field(None, validation_alias=AliasChoices("JOBQ_CALLBACK_SECRET_FILE"))
    """A file holding the callback secret instead (trailing newline stripped): a mounted Secret's key, so
    the secret is in no process's environment (the Helm chart's way)."""

    _blank = field_validator("tokens_file", "callback_secret_file", mode="before")(_blank_is_unset)

    @model_validator(mode="after")
    def _secret_files(self) -> GateSettings:
        _read_secret_file(self, "tokens", kind="secrets")
        _read_secret_file(self, "callback_secret", name="JOBQ_CALLBACK_SECRET")
        return self

    callback_rate: str = "100/s"
    """Dispatch callbacks (``POST /v1/callbacks/...``, open to anyone: the signed token is checked after)
    one source address may send to one gateway process: ``COUNT/s``, ``/min``, ``/h`` or ``/Ns`` (a burst
    of COUNT), or empty for no limit; past it 429 ``rate_limited`` with ``Retry-After``. Raise it when
    many downstreams call back through one proxy or NAT address (the gateway sees that address) or one
    downstream reports more jobs a second than this; lower it when the callback routes face the
    internet."""
    callback_inflight_body_bytes: int = Field(4 * 1024 * 1024, ge=256 * 1024)
    """Callback body bytes one gateway process reads and handles at once, a budget of their own (never
    the shared ``JOBQ_GATE_INFLIGHT_BODY_BYTES``, so unauthenticated senders cannot stall enqueues and
    claims); past it 429 ``gateway_busy``. Each callback body is at most 128 KiB (64 KiB plus a result).
    Raise it when many downstreams call back at once with large results and get 429s."""
    callback_read_timeout_s: float = Field(10.0, gt=0, le=300)
    """Seconds a callback's body may take to arrive once its headers have (408 ``body_timeout`` beyond),
    so a sender that stops sending does not hold its part of the callback budget. Raise it for
    downstreams on slow links that send large results."""

    @field_validator("callback_rate")
    @classmethod
    def _rate_valid(cls, value: str) -> str:
        if value.strip():
            Rate.parse(value)  # a ValueError says how to write one
        return value.strip()

    def callback_rate_limit(self) -> Rate | None:
        """:attr:`callback_rate` parsed (None: no limit)."""
        return Rate.parse(self.callback_rate) if self.callback_rate else None

    @field_validator("auth_failures")
    @classmethod
    def _rate(cls, v: str) -> str:
        Rate.parse(v)
        return v

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        parse_networks(v)
        return v

    def proxy_networks(self) -> Networks:
        """:attr:`trusted_proxies`, parsed."""
        return parse_networks(self.trusted_proxies)

    @model_validator(mode="after")
    def _fixed_port_when_shared(self) -> GateSettings:
        if self.processes != 1 and self.port == 0:
            raise ValueError(
                "JOBQ_GATE_PROCESSES other than 1 needs a fixed JOBQ_GATE_PORT (0 would give each process "
                "a port of its own)"
            )
        return self

    def process_count(self) -> int:
        """How many gateway processes to run: ``processes``, or the cores this process may use when 0."""
        if self.processes:
            return self.processes
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0)) or 1
        return os.cpu_count() or 1
