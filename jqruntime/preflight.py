"""The start-up checks every service runs once, before it does its work (one function the services call).

- **Redis must not evict.** An LRU (or any evicting) ``maxmemory-policy`` would drop job hashes and queue
  keys silently, so a service refuses to start unless the policy is ``noeviction`` or
  ``JOBQ_REDIS_ALLOW_EVICTION=true``. A Redis that refuses ``CONFIG GET`` (an ACL without ``+config``, a
  managed Redis that renames it) cannot be checked: one warning per process, and the service goes on.
  A Redis that does not answer at start-up is not checked (the service waits for it as it always did).
- **The client speaks the server's protocol.** A server that refuses this process's connection at once is
  not "not answering": when the settings say plaintext and the server completes a TLS handshake
  (:func:`takes_tls`), or Redis refuses the ACL user, the service stops with one line naming the settings
  to set (a plaintext service pointed at a secured deployment no longer starts unchecked or retries for
  ever).
- **Kafka topics hold to their declaration** (:func:`jqruntime.topicadmin.ensure`): the topics a service owns
  are created when missing (if ``JOBQ_KAFKA_CREATE_TOPICS`` allows it), every topic it uses is compared
  with the declaration, and any contradiction stops it with one line per problem naming the fix.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import AuthenticationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jqcore.errors import BackendUnavailable, ConfigError
from jqcore.log import get_logger
from jqengine import RedisClient, text

if TYPE_CHECKING:
    from jqcore.settings.kafka import KafkaSettings
    from jqcore.settings.servers import ConsulSettings, RedisSettings
    from jqcore.topics import TopicSpec

__all__ = ["EvictionRefused", "ProtocolRefused", "check_redis", "eviction_policies", "preflight", "takes_tls"]

log = get_logger("jqruntime.preflight")

_T = TypeVar("_T")

OWNER_WAIT_S = 10.0
"""How long a service that owns topics waits for Kafka's metadata at start-up (then it stops: it cannot
work without them)."""
USER_WAIT_S = 2.0
"""How long a service that only uses topics (gateway, canary) waits for it before it starts unchecked."""

_warned: set[str] = set()
"""What this process already warned about (once each)."""


class EvictionRefused(ConfigError):
    """Redis may evict keys (``maxmemory-policy`` other than ``noeviction``): jobs would vanish silently."""

    code = "redis_evicts"


class ProtocolRefused(ConfigError):
    """The server refused this process's connection: plaintext settings against a TLS-only server, or
    credentials it does not accept. Waiting cannot help; the settings must change."""

    code = "protocol_refused"


TLS_PROBE_S = 3.0
"""How long :func:`takes_tls` waits for a TLS handshake."""


def takes_tls(host: str, port: int, timeout_s: float = TLS_PROBE_S) -> bool:
    """Whether ``host:port`` completes a TLS handshake (its certificate unchecked: only the protocol is
    asked). A plaintext server (or none) does not; used only after a plaintext client failed, to say why."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, ctx.wrap_socket(raw):
            return True
    except (OSError, ValueError):  # ssl.SSLError is an OSError
        return False


def _host_port(address: str, default_port: int) -> tuple[str, int] | None:
    host, colon, port = address.rpartition(":")
    if not colon:
        return address, default_port
    try:
        return host.strip("[]") or "127.0.0.1", int(port)
    except ValueError:
        return None


def _redis_refusal(settings: RedisSettings, exc: Exception) -> ProtocolRefused | None:
    """Why Redis refused the start-up probe, when the settings are to blame (None: it is down or busy)."""
    if isinstance(exc, AuthenticationError):  # wrong password, unknown or disabled user, default user off
        who = (
            f"user {settings.username!r}"
            if settings.username
            else "the default user (JOBQ_REDIS_USERNAME unset)"
        )
        return ProtocolRefused(
            f"Redis refused {who}: set JOBQ_REDIS_USERNAME and JOBQ_REDIS_PASSWORD (or _PASSWORD_FILE) to an "
            f"ACL user it knows ({exc})"
        )
    parts = urlsplit(settings.client_url())
    if parts.scheme != "redis" or parts.hostname is None:
        return None
    port = parts.port or 6379
    if not takes_tls(parts.hostname, port):
        return None
    return ProtocolRefused(
        f"Redis at {parts.hostname}:{port} takes TLS only and JOBQ_REDIS_URL is plaintext: use a rediss:// "
        "URL (or JOBQ_REDIS_TLS=true) and JOBQ_REDIS_TLS_CA_FILE"
    )


def _kafka_refusal(kafka: KafkaSettings) -> ProtocolRefused | None:
    """Why Kafka gave no metadata, when the settings are to blame: a plaintext protocol against a TLS
    listener (None otherwise: down, starting, or a failure librdkafka names itself)."""
    if kafka.security_protocol not in ("PLAINTEXT", "SASL_PLAINTEXT"):
        return None
    for address in kafka.bootstrap.split(","):
        hp = _host_port(address.strip(), 9092)
        if hp is not None and takes_tls(*hp):
            wanted = "SASL_SSL" if kafka.security_protocol == "SASL_PLAINTEXT" else "SSL or SASL_SSL"
            return ProtocolRefused(
                f"Kafka at {hp[0]}:{hp[1]} takes TLS and JOBQ_KAFKA_SECURITY_PROTOCOL is "
                f"{kafka.security_protocol}: set it to {wanted} (with JOBQ_KAFKA_SSL_CA_LOCATION and, for "
                "SASL, JOBQ_KAFKA_SASL_MECHANISM, _USERNAME and _PASSWORD)"
            )
    return None


def _consul_refusal(consul: ConsulSettings) -> ProtocolRefused | None:
    """An ``http`` address of an agent that takes HTTPS (it answers every plain request with a 400)."""
    if consul.scheme != "http" or not takes_tls(consul.host, consul.port):
        return None
    return ProtocolRefused(
        f"Consul at {consul.host}:{consul.port} takes HTTPS only and JOBQ_CONSUL_ADDR is http: use "
        f"https://{consul.host}:{consul.port} (or JOBQ_CONSUL_SCHEME=https) and JOBQ_CONSUL_CA_FILE"
    )


async def _in_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a thread of its own, ended here: a start-up leaves no executor thread behind."""
    with ThreadPoolExecutor(1, thread_name_prefix="jobq-preflight") as pool:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


async def eviction_policies(client: RedisClient) -> list[str] | None:
    """Every node's ``maxmemory-policy`` (one for a single Redis); None when ``CONFIG GET`` is refused."""
    try:
        if isinstance(client, RedisCluster):  # every primary holds keys of its own
            got: Any = await client.config_get("maxmemory-policy", target_nodes=RedisCluster.PRIMARIES)
        else:
            got = await client.config_get("maxmemory-policy")
    except ResponseError:  # NOPERM (ACL), or CONFIG renamed away by a managed Redis
        return None
    answers = got.values() if got and all(isinstance(v, dict) for v in got.values()) else [got]
    out = []
    for answer in answers:
        for k, v in dict(answer).items():
            if text(k) == "maxmemory-policy":
                out.append(text(v))
    return out


async def check_redis(client: RedisClient, settings: RedisSettings) -> None:
    """Refuse an evicting Redis (see the module's docstring)."""
    try:
        policies = await eviction_policies(client)
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        if (refused := await _in_thread(_redis_refusal, settings, exc)) is not None:
            raise refused from None
        log.warning("Redis did not answer at start-up: its maxmemory-policy is not checked", error=str(exc))
        return
    if policies is None:
        if "config" not in _warned:
            _warned.add("config")
            log.warning(
                "Redis refuses CONFIG GET: jobq cannot check that maxmemory-policy is noeviction "
                "(make sure it is: an evicting Redis loses jobs silently)"
            )
        return
    evicting = sorted({p for p in policies if p != "noeviction"})
    if not evicting or settings.allow_eviction:
        if evicting and "evict" not in _warned:
            _warned.add("evict")
            log.warning("Redis may evict keys; allowed by JOBQ_REDIS_ALLOW_EVICTION", policy=evicting)
        return
    raise EvictionRefused(
        f"Redis has maxmemory-policy {', '.join(evicting)}: it would evict jobs silently; set "
        f"`CONFIG SET maxmemory-policy noeviction` (and in redis.conf), or JOBQ_REDIS_ALLOW_EVICTION=true"
    )


async def preflight(
    *,
    redis: tuple[RedisClient, RedisSettings] | None = None,
    kafka: KafkaSettings | None = None,
    consul: ConsulSettings | None = None,
    owns: Sequence[TopicSpec] = (),
    uses: Sequence[TopicSpec] = (),
) -> list[str]:
    """A service's start-up checks: Redis's eviction policy (``redis``: the service's client and
    settings), an ``http`` Consul address against an HTTPS agent (``consul``: when the service uses
    Consul), then the Kafka topics it ``owns`` (created when missing and allowed) and ``uses`` (checked
    when present). Raises :class:`~jqcore.errors.ConfigError` (one line per problem; a
    :class:`ProtocolRefused` when a server refuses this process's protocol or credentials); returns the
    topics created. A Kafka that does not answer stops only a service that owns topics (the others wait
    for Kafka as they always did)."""
    if redis is not None:
        await check_redis(*redis)
    if consul is not None and (refused := await _in_thread(_consul_refusal, consul)) is not None:
        raise refused
    if kafka is None or not (owns or uses):
        return []
    from jqruntime.topicadmin import ensure  # Kafka's admin client: the server extra (a worker needs neither)

    try:
        wait_s = OWNER_WAIT_S if owns else USER_WAIT_S
        created = await _in_thread(ensure, kafka, owns, uses, wait_s)
    except BackendUnavailable as exc:
        if (refused := await _in_thread(_kafka_refusal, kafka)) is not None:
            raise refused from None
        if owns:
            raise
        log.warning("Kafka did not answer at start-up: the topics are not checked", error=exc.message)
        return []
    if created:
        log.info("topics created from the declaration", topics=created)
    return created
