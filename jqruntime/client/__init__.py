"""The app-side client: what an application uses to enqueue and follow jobs (``import jobq`` re-exports it).

:mod:`~jqruntime.client.http` talks to the gateways (AZ-aware, retries, failover: ``JobqClient``);
:mod:`~jqruntime.client.jobs` is the typed client applications use (``AsyncClient``, ``Client``, job
handles); :mod:`~jqruntime.client.portal` runs an asyncio client for synchronous callers. Nothing here needs
the rest of the runtime (a Django web process imports it alone: an import-linter contract).
"""

from jqruntime.client.http import ApiRefused, Gateway, GatewayUnavailable, JobqClient, parse_retry_after
from jqruntime.client.jobs import (
    AsyncClient,
    AsyncJobHandle,
    Client,
    JobCanceled,
    JobFailed,
    JobHandle,
    JobOptions,
    Transport,
    default_async_client,
    default_client,
    use_transport,
)

__all__ = [
    "ApiRefused",
    "AsyncClient",
    "AsyncJobHandle",
    "Client",
    "Gateway",
    "GatewayUnavailable",
    "JobCanceled",
    "JobFailed",
    "JobHandle",
    "JobOptions",
    "JobqClient",
    "Transport",
    "default_async_client",
    "default_client",
    "parse_retry_after",
    "use_transport",
]
