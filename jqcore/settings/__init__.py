"""Typed settings, read from the environment once at start-up.

Every service builds one settings object from these parts. Names follow ``JOBQ_<SECTION>_<FIELD>``;
the standard names of the ecosystems are honoured as well (``CONSUL_HTTP_ADDR``, ``CONSUL_HTTP_TOKEN``,
``REDIS_URL``, ``KAFKA_BOOTSTRAP_SERVERS``). Secrets are :class:`pydantic.SecretStr`: they never appear in
``repr``, logs or ``jobq stack env``. Cross-field checks run at construction, so a bad combination stops
the service at start-up with a :class:`~jqcore.errors.ConfigError` naming the setting.

The package, one module per concern: ``common`` (the shared types and validators, :func:`load`,
:func:`load_env`), ``servers`` (:class:`RedisSettings`, :class:`ConsulSettings`), ``kafka``
(:class:`KafkaSettings`), ``observe`` (logs, the health and metrics routes' address, traces) and
``pipeline`` (where the shared state and streams live: the relays' keys, cron, the far-future tier, events,
audit, history, a queue's bounds). Import every name from ``jqcore.settings``: a name's module is imported
when the name is first asked for, so a process builds the settings classes it uses and no other (a worker
builds neither Kafka's nor Consul's; pydantic builds a class's validator as the class is defined).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jqcore.settings.common import (
        DEFAULT_CONSUL_ADDR,
        DEFAULT_KAFKA_BOOTSTRAP,
        DEFAULT_REDIS_URL,
        MASK,
        ClientConfig,
        CommaList,
        CommaSecrets,
        JsonText,
        QueueNames,
        is_secret_key,
        load,
        load_env,
    )
    from jqcore.settings.kafka import KafkaSettings, ProduceBatching, SaslMechanism, librdkafka_key
    from jqcore.settings.observe import LogSettings, MetricsSettings, TraceSettings
    from jqcore.settings.pipeline import (
        AuditSettings,
        CronSettings,
        EventSettings,
        FarSettings,
        HistorySettings,
        QueueBounds,
        RelayKeys,
    )
    from jqcore.settings.servers import ConsulSettings, RedisSettings

__all__ = [
    "DEFAULT_CONSUL_ADDR",
    "DEFAULT_KAFKA_BOOTSTRAP",
    "DEFAULT_REDIS_URL",
    "MASK",
    "AuditSettings",
    "ClientConfig",
    "CommaList",
    "CommaSecrets",
    "ConsulSettings",
    "CronSettings",
    "EventSettings",
    "FarSettings",
    "HistorySettings",
    "JsonText",
    "KafkaSettings",
    "LogSettings",
    "MetricsSettings",
    "ProduceBatching",
    "QueueBounds",
    "QueueNames",
    "RedisSettings",
    "RelayKeys",
    "SaslMechanism",
    "TraceSettings",
    "is_secret_key",
    "librdkafka_key",
    "load",
    "load_env",
]

_MODULES = {
    "common": (
        "DEFAULT_CONSUL_ADDR",
        "DEFAULT_KAFKA_BOOTSTRAP",
        "DEFAULT_REDIS_URL",
        "MASK",
        "ClientConfig",
        "CommaList",
        "CommaSecrets",
        "JsonText",
        "QueueNames",
        "is_secret_key",
        "load",
        "load_env",
    ),
    "servers": ("ConsulSettings", "RedisSettings"),
    "kafka": ("KafkaSettings", "ProduceBatching", "SaslMechanism", "librdkafka_key"),
    "observe": ("LogSettings", "MetricsSettings", "TraceSettings"),
    "pipeline": (
        "AuditSettings",
        "CronSettings",
        "EventSettings",
        "FarSettings",
        "HistorySettings",
        "QueueBounds",
        "RelayKeys",
    ),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}


if not TYPE_CHECKING:  # the type checker sees the names themselves (above): a misspelt one stays an error

    def __getattr__(name: str) -> Any:
        """A name of :data:`__all__` from its module, imported now if it was not yet (PEP 562)."""
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
